//! Runs the UI modules' JavaScript unit tests (`js-tests/*.test.mjs`) with `node --test`, so
//! `cargo test` covers them. Ignored unless `WEFT_TEST_BROWSER` was set at build time
//! (`cfg(weft_browser)`, see `build.rs`: Node.js and the browser tier are installed, as
//! `.ci/run` does); run without `node` on PATH it fails.

use std::path::Path;
use std::process::Command;

#[test]
#[cfg_attr(
    not(weft_browser),
    ignore = "needs Node.js >= 20: install it and set WEFT_TEST_BROWSER=1 (bash .ci/run does)"
)]
fn ui_module_node_tests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        node_ok,
        "`node` is not on PATH: the weft-ui module tests need Node.js >= 20 (or unset \
         WEFT_TEST_BROWSER to have them ignored)"
    );
    let out = Command::new("node")
        .args(["--test", "--test-reporter=spec", "js-tests/"])
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "node --test failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("pass"), "no node test ran:\n{stdout}");
}
