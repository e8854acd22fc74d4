//! Helpers shared by the end-to-end tests: run the real `weft` binary from the workspace root
//! (so example paths in output are stable) with colour off.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The workspace root (two levels above this crate).
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Runs `weft args…` in the workspace root with `NO_COLOR=1`.
pub(crate) fn weft(args: &[&str]) -> Output {
    weft_in(&root(), args)
}

/// Runs `weft args…` in `dir` with `NO_COLOR=1` and no stdin.
pub(crate) fn weft_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run weft")
}

/// Exit code (panics if killed by a signal, which would be a crash).
pub(crate) fn code(o: &Output) -> i32 {
    o.status
        .code()
        .unwrap_or_else(|| panic!("weft was killed by a signal: {o:?}"))
}

/// Stdout as text.
pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

/// Stderr as text.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

/// Stdout parsed as one JSON document.
pub(crate) fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
            stdout(o),
            stderr(o)
        )
    })
}

/// A fresh temporary directory under the target dir, removed and recreated.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}
