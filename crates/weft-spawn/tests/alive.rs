//! `weft_spawn::alive` counts this process's started children while their `Child` exists; it
//! decides whether a start yields the core to the child. A test binary of its own, so that no
//! other test's children are counted.
#![cfg(target_os = "linux")]

use std::ffi::CString;

use weft_spawn::{Spec, alive, spawn};

#[tokio::test]
async fn started_children_are_counted_while_they_exist() {
    let program = CString::new("/bin/cat").expect("path");
    let argv = [CString::new("cat").expect("arg")];
    let spec = Spec {
        program: &program,
        argv: &argv,
        env: &[],
        cwd: None,
        limits: &[],
        landlock: None,
        namespaces: None,
        input: None,
    };
    assert_eq!(alive(), 0);
    let mut first = spawn(&spec).expect("started");
    assert_eq!(alive(), 1);
    let second = spawn(&spec).expect("started");
    assert_eq!(alive(), 2);
    // Dropped while running: killed, and no longer counted.
    drop(second);
    assert_eq!(alive(), 1);
    // Ended and waited for: counted until dropped.
    drop(first.stdin.take());
    assert!(first.wait().await.expect("waited").success());
    assert_eq!(alive(), 1);
    drop(first);
    assert_eq!(alive(), 0);
    // A start that fails is not counted.
    let missing = CString::new("/nonexistent/weft-spawn-test").expect("path");
    assert!(
        spawn(&Spec {
            program: &missing,
            ..spec
        })
        .is_err()
    );
    assert_eq!(alive(), 0);
}
