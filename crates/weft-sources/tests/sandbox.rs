//! The `command` source's sandbox against real processes: a program reading outside its
//! `read_paths`, writing outside its `write_paths`, or reaching anything over a network
//! without network (TCP, UDP, an abstract Unix socket) is refused by the kernel (Landlock and
//! the network namespace here; the seccomp filter that stands in for it is checked in
//! `command.rs`'s unit tests),
//! while the same program with the restriction lifted succeeds — so each refusal is the
//! sandbox's doing.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use weft_sources::{DeclaredTool, ToolDef, declare};
use weft_tools::{NoServices, Tool, ToolContext};

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weft-sandbox-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.canonicalize().unwrap()
}

/// Writes an executable script.
fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn def(source: Value) -> ToolDef {
    let mut src = json!({"kind": "command"});
    for (k, v) in source.as_object().unwrap() {
        src[k] = v.clone();
    }
    serde_json::from_value(json!({"name": "run", "timeout_ms": 20_000, "source": src})).unwrap()
}

fn tool(source: Value) -> DeclaredTool {
    declare(&def(source)).unwrap()
}

fn ctx() -> ToolContext {
    ToolContext {
        services: Arc::new(NoServices),
        ..ToolContext::detached("sandboxed")
    }
}

/// `cat`s the file named by the args' `path` and prints `{"read": <its text>}`.
const READ: &str = "#!/bin/sh\npath=$(cat | sed 's/.*\"path\": *\"\\([^\"]*\\)\".*/\\1/')\ntext=$(cat \"$path\") || exit 3\nprintf '{\"read\": \"%s\"}\\n' \"$text\"\n";

/// Writes `x` into the file named by the args' `path` and prints `{"wrote": true}`.
const WRITE: &str = "#!/bin/sh\npath=$(cat | sed 's/.*\"path\": *\"\\([^\"]*\\)\".*/\\1/')\necho x > \"$path\" || exit 3\necho '{\"wrote\": true}'\n";

#[tokio::test]
async fn reading_outside_read_paths_is_refused() {
    let dir = scratch("read");
    let tools = dir.join("tools");
    let private = dir.join("private");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(tools.join("mine.txt"), "mine").unwrap();
    std::fs::write(private.join("secret.txt"), "secret").unwrap();
    let p = script(&tools, "read.sh", READ);
    let secret = private.join("secret.txt");

    // Without read_paths everything is readable: the read below is refused by the sandbox.
    let open = tool(json!({"program": p}));
    let r = open.call(ctx(), json!({"path": secret})).await.unwrap();
    assert_eq!(r, json!({"read": "secret"}));

    let confined = tool(json!({"program": p, "read_paths": [tools]}));
    let r = confined
        .call(ctx(), json!({"path": tools.join("mine.txt")}))
        .await
        .unwrap();
    assert_eq!(
        r,
        json!({"read": "mine"}),
        "its own read path stays readable"
    );
    let e = confined
        .call(ctx(), json!({"path": secret}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "command_failed", "{e}");
    assert!(
        e.message.contains("status 3") && e.message.contains("Permission denied"),
        "{e}"
    );
    // The system files a demanding user did not list are not readable either.
    let e = confined
        .call(ctx(), json!({"path": "/etc/hostname"}))
        .await
        .unwrap_err();
    assert!(e.message.contains("Permission denied"), "{e}");
}

#[tokio::test]
async fn writing_outside_write_paths_is_refused() {
    let dir = scratch("write");
    let own = dir.join("own");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let p = script(&own, "write.sh", WRITE);
    let outside = elsewhere.join("planted.txt");

    // With `/` writable the same write succeeds: the refusal below is the sandbox's.
    let open = tool(json!({"program": p, "write_paths": ["/"]}));
    assert_eq!(
        open.call(ctx(), json!({"path": outside})).await.unwrap(),
        json!({"wrote": true})
    );
    std::fs::remove_file(&outside).unwrap();

    let confined = tool(json!({"program": p, "cwd": own, "write_paths": ["."]}));
    assert_eq!(
        confined
            .call(ctx(), json!({"path": own.join("ok.txt")}))
            .await
            .unwrap(),
        json!({"wrote": true}),
        "its own directory is writable"
    );
    let e = confined
        .call(ctx(), json!({"path": outside}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "command_failed", "{e}");
    assert!(e.message.contains("Permission denied"), "{e}");
    assert!(!outside.exists(), "nothing was written outside");

    // Read-only: not even its own directory.
    let read_only = tool(json!({"program": p, "cwd": own, "write_paths": []}));
    let e = read_only
        .call(ctx(), json!({"path": own.join("again.txt")}))
        .await
        .unwrap_err();
    assert!(e.message.contains("Permission denied"), "{e}");
}

const PY_CONNECT: &str = r#"
import json, socket, sys
args = json.load(sys.stdin)
try:
    s = socket.create_connection(("127.0.0.1", args["port"]), timeout=5)
    s.sendall(b"hello")
    s.close()
    print(json.dumps({"connected": True}))
except OSError as e:
    print(f"connect failed: {e}", file=sys.stderr)
    sys.exit(3)
"#;

/// Reaches out as the args' `how` says: a UDP datagram to `port`, a connection to the
/// abstract Unix socket `name`, or a Unix socket pair of its own (`pair`, no one else's).
const PY_REACH: &str = r#"
import json, socket, sys
args = json.load(sys.stdin)
try:
    if args["how"] == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"hello", ("127.0.0.1", args["port"]))
    elif args["how"] == "abstract":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + args["name"])
        s.sendall(b"hello")
    else:
        a, b = socket.socketpair()
        a.sendall(b"ping")
        assert b.recv(4) == b"ping"
    print(json.dumps({"reached": args["how"]}))
except OSError as e:
    print(f"{args['how']} failed: {e}", file=sys.stderr)
    sys.exit(3)
"#;

/// The real Python interpreter (not a version manager's shim).
fn python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is on the machine");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A loopback listener's port, and the task counting the connections it accepts until none
/// comes for 3 s.
async fn counting_listener() -> (u16, tokio::task::JoinHandle<usize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = tokio::spawn(async move {
        let mut n = 0;
        while tokio::time::timeout(std::time::Duration::from_secs(3), listener.accept())
            .await
            .is_ok_and(|r| r.is_ok())
        {
            n += 1;
        }
        n
    });
    (port, accepted)
}

#[tokio::test]
async fn opening_a_socket_without_network_fails() {
    let dir = scratch("net");
    let p = script(&dir, "connect.py", &format!("#!{}\n{PY_CONNECT}", python()));
    let (port, accepted) = counting_listener().await;

    // Given the network, the same program connects: the failure below is the sandbox's.
    let networked = tool(json!({"program": p, "network": true}));
    assert_eq!(
        networked.call(ctx(), json!({"port": port})).await.unwrap(),
        json!({"connected": true})
    );

    // The default: no network at all, not even loopback. The namespace has no route
    // ("unreachable"); the filter, where user namespaces are off, refuses the socket
    // ("Permission denied").
    let offline = tool(json!({"program": p}));
    let e = offline
        .call(ctx(), json!({"port": port}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "command_failed", "{e}");
    assert!(
        e.message.contains("connect failed")
            && (e.message.contains("Permission denied") || e.message.contains("unreachable")),
        "{e}"
    );
    assert_eq!(
        accepted.await.unwrap(),
        1,
        "only the networked call connected"
    );
}

#[tokio::test]
async fn without_network_udp_and_abstract_sockets_are_refused_and_socket_pairs_work() {
    use std::os::linux::net::SocketAddrExt;
    let dir = scratch("reach");
    let p = script(&dir, "reach.py", &format!("#!{}\n{PY_REACH}", python()));
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = udp.local_addr().unwrap().port();
    let name = format!("weft-sandbox-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let unix = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    unix.set_nonblocking(true).unwrap();
    let accepted = || {
        let mut n = 0;
        while unix.accept().is_ok() {
            n += 1;
        }
        n
    };
    let received = async || {
        let mut buf = [0u8; 16];
        let mut n = 0;
        while tokio::time::timeout(std::time::Duration::from_millis(300), udp.recv(&mut buf))
            .await
            .is_ok_and(|r| r.is_ok())
        {
            n += 1;
        }
        n
    };
    let udp_args = json!({"how": "udp", "port": port});
    let abstract_args = json!({"how": "abstract", "name": name});

    // Given the network, both reach their peers: the refusals below are the sandbox's.
    let networked = tool(json!({"program": &p, "network": true}));
    for args in [&udp_args, &abstract_args] {
        let r = networked.call(ctx(), args.clone()).await.unwrap();
        assert_eq!(r["reached"], args["how"]);
    }
    assert_eq!(received().await, 1, "the networked datagram arrived");
    assert_eq!(accepted(), 1, "the networked connection arrived");

    let offline = tool(json!({"program": &p}));
    for args in [&udp_args, &abstract_args] {
        let e = offline.call(ctx(), args.clone()).await.unwrap_err();
        assert_eq!(e.code, "command_failed", "{e}");
        assert!(e.message.contains("failed:"), "{e}");
    }
    assert_eq!(received().await, 0, "no datagram left the sandbox");
    assert_eq!(accepted(), 0, "no connection left the sandbox");

    // A socket pair of its own (what asyncio and many runtimes make at start) still works.
    assert_eq!(
        offline.call(ctx(), json!({"how": "pair"})).await.unwrap(),
        json!({"reached": "pair"})
    );
}

/// Calls made at once each get a child and an answer of their own, and every one of them is
/// confined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_each_get_a_confined_child_of_their_own() {
    let dir = scratch("concurrent");
    let p = script(&dir, "connect.py", &format!("#!{}\n{PY_CONNECT}", python()));
    let (port, accepted) = counting_listener().await;
    let echo = Arc::new(tool(json!({"program": "/bin/cat"})));
    let offline = Arc::new(tool(json!({"program": &p})));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..24 {
        let (echo, offline) = (Arc::clone(&echo), Arc::clone(&offline));
        calls.spawn(async move {
            let answer = echo.call(ctx(), json!({"i": i})).await;
            let refused = offline.call(ctx(), json!({"port": port})).await;
            (i, answer, refused)
        });
    }
    while let Some(r) = calls.join_next().await {
        let (i, answer, refused) = r.unwrap();
        assert_eq!(
            answer.unwrap(),
            json!({"i": i}),
            "each call its own child's answer"
        );
        let e = refused.unwrap_err();
        assert!(e.message.contains("connect failed"), "{e}");
    }
    assert_eq!(accepted.await.unwrap(), 0, "no confined child connected");
}

#[tokio::test]
async fn connect_ports_limit_the_tcp_ports_a_networked_command_reaches() {
    let dir = scratch("ports");
    let p = script(&dir, "connect.py", &format!("#!{}\n{PY_CONNECT}", python()));
    let (port, accepted) = counting_listener().await;
    let other = if port == u16::MAX { port - 1 } else { port + 1 };
    // Its port listed: it connects.
    let allowed = tool(json!({"program": &p, "network": true, "connect_ports": [port]}));
    assert_eq!(
        allowed.call(ctx(), json!({"port": port})).await.unwrap(),
        json!({"connected": true})
    );
    assert_eq!(
        allowed.profile_needs().map(|n| n.network),
        Some(vec![format!("*:{port}")])
    );
    // Another port listed: Landlock refuses the connection.
    let refused = tool(json!({"program": &p, "network": true, "connect_ports": [other]}));
    let e = refused
        .call(ctx(), json!({"port": port}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "command_failed", "{e}");
    assert!(
        e.message.contains("connect failed") && e.message.contains("ermission"),
        "{e}"
    );
    assert_eq!(
        accepted.await.unwrap(),
        1,
        "only the allowed call connected"
    );
    // Ports without the network say so when the tool is built.
    let none = declare(&def(json!({"program": &p, "connect_ports": [port]})));
    let Err(e) = none else {
        panic!("a command without network built with connect_ports")
    };
    let e = e.to_string();
    assert!(e.contains("network = true"), "{e}");
}

#[test]
fn paths_that_do_not_exist_do_not_build_and_the_profile_says_what_runs() {
    let dir = scratch("build");
    let e = declare(&def(
        json!({"program": "/bin/sh", "write_paths": [dir.join("nowhere")]}),
    ))
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("write_paths") && e.contains("nowhere") && e.contains("must exist"),
        "{e}"
    );
    let list: Result<ToolDef, _> = serde_json::from_value(json!({"name": "x",
        "source": {"kind": "command", "program": "sh", "network": ["api.example.com:443"]}}));
    assert!(list.is_err(), "a host list is not a command's network");

    let t = tool(
        json!({"program": "/bin/sh", "cwd": dir, "read_paths": [dir],
        "memory_mb": 64, "cpu_seconds": 2}),
    );
    let needs = t.profile_needs().unwrap();
    assert_eq!(needs.source, "command");
    assert_eq!(needs.isolation, weft_tools::Isolation::Sandboxed);
    assert!(needs.network.is_empty());
    assert!(needs.read.contains(&dir) && needs.read.contains(&PathBuf::from("/usr")));
    assert_eq!(
        needs.write,
        std::slice::from_ref(&dir),
        "no temporary directory beside read_paths"
    );
    assert_eq!(
        (needs.memory_mb, needs.cpu_seconds, needs.time_ms),
        (Some(64), Some(2), Some(20_000))
    );
    let open = tool(json!({"program": "/bin/sh", "network": true}));
    let needs = open.profile_needs().unwrap();
    assert_eq!(needs.network, ["*"]);
    assert_eq!(needs.read, [PathBuf::from("/")]);
    assert_eq!(needs.write, [std::env::temp_dir()]);
}
