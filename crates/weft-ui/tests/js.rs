//! Runs the layout module's JavaScript unit tests (`js-tests/*.test.mjs`) with `node --test`, so
//! `cargo test` covers them. Without `node` on PATH the test prints a visible skip, except in CI
//! (env `CI` set), where it fails.

use std::path::Path;
use std::process::Command;

#[test]
fn layout_module_node_tests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node_ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "node is not on PATH; CI needs Node.js >= 20 for the weft-ui layout tests"
        );
        eprintln!("SKIPPED weft-ui layout tests: `node` is not on PATH");
        return;
    }
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
