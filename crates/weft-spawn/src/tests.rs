//! The spawner against real programs: what the child gets (stdio, environment, working
//! directory, process group, signal state, limits), how failures are reported, and that a
//! dropped child is killed and reaped.

use super::*;
use std::os::fd::AsFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

fn spec<'a>(program: &'a CStr, argv: &'a [CString]) -> Spec<'a> {
    Spec {
        program,
        argv,
        env: &[],
        cwd: None,
        limits: &[],
        landlock: None,
        namespaces: None,
        input: None,
    }
}

/// Runs `spec` with `input` on stdin; its stdout, stderr and exit status.
async fn run(spec: &Spec<'_>, input: &[u8]) -> (String, String, ExitStatus) {
    let mut child = spawn(spec).expect("started");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input).await.expect("written");
    drop(stdin);
    let mut out = String::new();
    let mut err = String::new();
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let (o, e) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    o.expect("stdout read");
    e.expect("stderr read");
    let status = child.wait().await.expect("waited");
    assert_eq!(child.id(), None, "a reaped child has no id");
    (out, err, status)
}

#[tokio::test]
async fn stdin_reaches_stdout_and_the_exit_status_comes_back() {
    let prog = c("/bin/cat");
    let argv = [c("cat")];
    let (out, _, status) = run(&spec(&prog, &argv), b"{\"n\": 1}").await;
    assert_eq!(out, "{\"n\": 1}");
    assert!(status.success());

    let prog = c("/bin/sh");
    let argv = [c("sh"), c("-c"), c("echo oops >&2; exit 3")];
    let (_, err, status) = run(&spec(&prog, &argv), b"").await;
    assert_eq!(err, "oops\n");
    assert_eq!(status.code(), Some(3));

    let argv = [c("sh"), c("-c"), c("kill -9 $$")];
    let (_, _, status) = run(&spec(&prog, &argv), b"").await;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[tokio::test]
async fn the_child_gets_exactly_its_environment_and_working_directory() {
    let prog = c("/usr/bin/env");
    let argv = [c("env")];
    let env = [c("A=1"), c("B=two words")];
    let (out, _, _) = run(
        &Spec {
            env: &env,
            ..spec(&prog, &argv)
        },
        b"",
    )
    .await;
    assert_eq!(out, "A=1\nB=two words\n");

    let prog = c("/bin/pwd");
    let argv = [c("pwd"), c("-P")];
    let dir = c("/usr/bin");
    let (out, _, _) = run(
        &Spec {
            cwd: Some(&dir),
            ..spec(&prog, &argv)
        },
        b"",
    )
    .await;
    assert_eq!(out.trim(), "/usr/bin");
}

/// The test binary ignores `SIGPIPE` (Rust's runtime does) and blocks nothing; the child must
/// neither ignore `SIGPIPE` nor block any signal, and leads a process group of its own. (`cat`
/// reads its own status: a shell blocks signals around its own forks.)
#[tokio::test]
async fn the_child_has_default_signals_and_a_process_group_of_its_own() {
    let prog = c("/bin/cat");
    let argv = [c("cat"), c("/proc/self/status"), c("/proc/self/stat")];
    let mut child = spawn(&spec(&prog, &argv)).expect("started");
    let pid = child.id().expect("pid");
    drop(child.stdin.take());
    let mut out = String::new();
    let mut stdout = child.stdout.take().expect("stdout");
    stdout.read_to_string(&mut out).await.expect("read");
    assert!(child.wait().await.expect("waited").success());
    let field = |name: &str| {
        let line = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {out}"));
        u64::from_str_radix(line.split_whitespace().nth(1).expect("mask"), 16).expect("hex")
    };
    assert_eq!(field("SigBlk:"), 0, "{out}");
    let pipe_bit = 1u64 << (libc::SIGPIPE - 1);
    assert_eq!(field("SigIgn:") & pipe_bit, 0, "SIGPIPE ignored: {out}");
    // /proc/self/stat: pid (comm) state ppid pgrp …
    let stat = out.lines().last().expect("stat line");
    let after_comm = stat.rsplit_once(") ").expect("comm").1;
    let pgrp = after_comm.split(' ').nth(2).expect("pgrp");
    assert!(stat.starts_with(&format!("{pid} ")), "{stat}");
    assert_eq!(pgrp, pid.to_string(), "its own process group: {stat}");
}

#[tokio::test]
async fn limits_are_the_childs_own() {
    let prog = c("/bin/sh");
    let argv = [c("sh"), c("-c"), c("ulimit -v; ulimit -t")];
    let limits = [Limit::AddressSpace(256 * 1024 * 1024), Limit::CpuSeconds(7)];
    let (out, err, status) = run(
        &Spec {
            limits: &limits,
            ..spec(&prog, &argv)
        },
        b"",
    )
    .await;
    assert!(status.success(), "{err}");
    assert_eq!(out, "262144\n7\n");
    // And not the caller's.
    let mut own = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a plain system call reading this process's own limit.
    unsafe { libc::getrlimit64(libc::RLIMIT_CPU, &mut own) };
    assert_ne!(own.rlim_cur, 7);
}

#[tokio::test]
async fn a_missing_program_is_an_exec_failure_not_found() {
    let prog = c("/nonexistent/weft-no-such-program");
    let argv = [c("x")];
    let e = spawn(&spec(&prog, &argv)).expect_err("no such program");
    assert_eq!(e.stage, Stage::Exec);
    assert_eq!(e.step, "execve");
    assert_eq!(e.source.kind(), io::ErrorKind::NotFound, "{e}");
}

/// A descriptor that is not a Landlock ruleset: the child fails at that step, and says so.
#[tokio::test]
async fn a_confinement_that_fails_is_reported_as_such() {
    let null = std::fs::File::open("/dev/null").expect("open");
    let prog = c("/bin/true");
    let argv = [c("true")];
    let e = spawn(&Spec {
        landlock: Some(null.as_fd()),
        namespaces: None,
        input: None,
        ..spec(&prog, &argv)
    })
    .expect_err("not a ruleset");
    assert_eq!(e.stage, Stage::Confine, "{e}");
    assert_eq!(e.step, "landlock_restrict_self");

    let bad_dir = c("/nonexistent/dir");
    let e = spawn(&Spec {
        cwd: Some(&bad_dir),
        ..spec(&prog, &argv)
    })
    .expect_err("no such directory");
    assert_eq!((e.stage, e.step), (Stage::Setup, "chdir"));
    assert_eq!(e.source.kind(), io::ErrorKind::NotFound);
}

/// Whether `pid` is gone (reaped), rather than running or a zombie.
fn gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_child_is_killed_with_its_group_and_reaped() {
    let prog = c("/bin/sh");
    // The shell starts a grandchild in its group and waits.
    let argv = [c("sh"), c("-c"), c("sleep 60 & echo $!; wait")];
    let mut child = spawn(&spec(&prog, &argv)).expect("started");
    let pid = child.id().expect("pid");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte).await.expect("read") == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let grandchild: u32 = String::from_utf8(line).expect("utf8").parse().expect("pid");
    drop(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(gone(pid) && gone(grandchild)) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(gone(pid), "the child {pid} is still there (not reaped)");
    // The grandchild is reparented and reaped by init once killed.
    assert!(gone(grandchild), "the grandchild {grandchild} lives on");
}

/// Children started at once from several runtime threads each get their own pipes (the
/// per-thread stack is used by one child at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_spawns_each_get_their_own_child() {
    let calls = (0..32).map(|i| {
        tokio::spawn(async move {
            let prog = c("/bin/cat");
            let argv = [c("cat")];
            let input = format!("call {i}");
            let (out, _, status) = run(&spec(&prog, &argv), input.as_bytes()).await;
            assert!(status.success());
            assert_eq!(out, input);
        })
    });
    for call in calls.collect::<Vec<_>>() {
        call.await.expect("call");
    }
}

#[test]
fn outside_a_runtime_it_says_so() {
    let prog = c("/bin/true");
    let argv = [c("true")];
    let e = spawn(&spec(&prog, &argv)).expect_err("no runtime");
    assert_eq!((e.stage, e.step), (Stage::Start, "runtime"));
}

/// A filter refusing `socket` with `EACCES`, every other call allowed.
fn no_sockets() -> Vec<SockFilter> {
    let stmt = |code: u32, k: u32| SockFilter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let nr = u32::try_from(libc::SYS_socket).expect("small");
    vec![
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        SockFilter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

fn owned(argv: &[&str]) -> OwnedSpec {
    OwnedSpec {
        program: c(argv[0]),
        argv: argv.iter().map(|a| c(a)).collect(),
        env: Vec::new(),
        cwd: None,
        limits: Vec::new(),
        landlock: None,
        input: None,
    }
}

/// Opens a TCP socket to a closed port with bash's `/dev/tcp`; its stderr.
const TCP: &str = "exec 3<>/dev/tcp/127.0.0.1/9; echo connected";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawners_children_inherit_its_filter_and_its_caller_keeps_none() {
    let spawner = Spawner::start(&no_sockets()).expect("filter installed");
    let mut child = spawner
        .spawn(owned(&["/bin/bash", "-c", TCP]))
        .expect("handed over");
    let mut err = String::new();
    let mut stderr = child.stderr.take().expect("stderr");
    stderr.read_to_string(&mut err).await.expect("read");
    child.started().await.expect("started");
    child.wait().await.expect("waited");
    assert!(err.contains("Permission denied"), "{err}");

    // The same program started by `spawn` (no filter) gets its socket, refused by the port.
    let prog = c("/bin/bash");
    let argv = [c("bash"), c("-c"), c(TCP)];
    let (_, err, _) = run(&spec(&prog, &argv), b"").await;
    assert!(err.contains("Connection refused"), "{err}");
    // And the caller's threads are unrestricted.
    std::net::TcpListener::bind("127.0.0.1:0").expect("a socket here");
}

#[tokio::test]
async fn a_spawners_failed_start_comes_through_started() {
    let spawner = Spawner::start(&no_sockets()).expect("filter installed");
    let mut child = spawner
        .spawn(owned(&["/nonexistent/weft-no-such-program"]))
        .expect("handed over");
    let mut out = Vec::new();
    let mut stdout = child.stdout.take().expect("stdout");
    stdout.read_to_end(&mut out).await.expect("end of output");
    assert!(out.is_empty());
    let e = child.started().await.expect_err("no such program");
    assert_eq!((e.stage, e.step), (Stage::Exec, "execve"));
    assert_eq!(e.source.kind(), io::ErrorKind::NotFound);
    assert!(child.wait().await.is_err());
}

/// A kill that comes while the spawner is still starting the child is carried out once it
/// has; a child dropped while being started is killed and reaped all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_killed_or_dropped_while_starting_does_not_live_on() {
    let spawner = Spawner::start(&no_sockets()).expect("filter installed");
    let mut child = spawner
        .spawn(owned(&["/bin/sleep", "61.25"]))
        .expect("handed over");
    child.kill();
    let status = child.wait().await.expect("waited");
    assert_eq!(status.signal(), Some(libc::SIGKILL));

    for _ in 0..8 {
        drop(
            spawner
                .spawn(owned(&["/bin/sleep", "61.75"]))
                .expect("handed over"),
        );
    }
    // The spawner starts its jobs in turn: once a later one has started, every dropped one
    // has been started and killed, so the count below can only fall (it could be 0 for a
    // moment before, between one start and the next).
    let mut last = spawner
        .spawn(owned(&["/bin/sleep", "61.5"]))
        .expect("handed over");
    last.started().await.expect("started");
    last.kill();
    last.wait().await.expect("waited");
    let running = || {
        std::fs::read_dir("/proc")
            .expect("proc")
            .filter_map(Result::ok)
            .filter(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| c.windows(5).any(|w| w == b"61.75"))
            })
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(running(), 0, "a dropped child lives on (or is a zombie)");
}

/// Children that join the namespaces reach no address, TCP or UDP, not even loopback, while
/// keeping weft's user and group; all of them share the one network namespace, not weft's.
#[tokio::test]
async fn children_joining_the_namespaces_have_no_network_and_keep_their_ids() {
    let ns = Namespaces::create().expect("namespaces made");
    let prog = c("/bin/bash");
    // A failed `exec` redirection does not end bash: each says so and the script goes on.
    let script =
        "exec 3<>/dev/tcp/127.0.0.1/9 || echo tcp; exec 4<>/dev/udp/127.0.0.1/9 || echo udp";
    let argv = [c("bash"), c("-c"), c(script)];
    let joined = Spec {
        namespaces: Some(&ns),
        ..spec(&prog, &argv)
    };
    let (out, err, _) = run(&joined, b"").await;
    assert_eq!(out, "tcp\nudp\n", "{err}");
    assert_eq!(err.matches("Network is unreachable").count(), 4, "{err}");
    // Without them, the same program reaches the loopback: the closed port refuses TCP, and
    // UDP is sent.
    let (out, err, _) = run(&spec(&prog, &argv), b"").await;
    assert_eq!(out, "tcp\n", "{err}");
    assert!(err.contains("Connection refused"), "{err}");

    let argv = [
        c("bash"),
        c("-c"),
        c("id -u; id -g; readlink /proc/self/ns/net /proc/self/ns/user"),
    ];
    let ids = |out: &str| out.lines().map(str::to_string).collect::<Vec<_>>();
    let ours = ids(&run(&spec(&prog, &argv), b"").await.0);
    let joined = Spec {
        namespaces: Some(&ns),
        ..spec(&prog, &argv)
    };
    let first = ids(&run(&joined, b"").await.0);
    eprintln!("uid {}", first[0]);
    let second = ids(&run(&joined, b"").await.0);
    assert_eq!(first[..2], ours[..2], "the same uid and gid");
    assert_ne!(first[2], ours[2], "another network namespace");
    assert_ne!(first[3], ours[3], "another user namespace");
    assert_eq!(first, second, "one network namespace for all");
}

/// Not running as root, the namespaces are made with other id maps (the user's own ids, and
/// `setgroups` denied): the test above runs again, from a copy of this test binary, as
/// `nobody`.
#[test]
fn the_namespaces_work_for_a_user_other_than_root_too() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: a plain system call.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not running as root: the test above ran as another user already");
        return;
    }
    let dir = std::env::temp_dir().join(format!("weft-spawn-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let exe = dir.join("tests");
    std::fs::copy(std::env::current_exe().expect("this binary"), &exe).expect("copied");
    for p in [&dir, &exe] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let name = "tests::children_joining_the_namespaces_have_no_network_and_keep_their_ids";
    let out = std::process::Command::new(&exe)
        .args(["--exact", name, "--nocapture"])
        .current_dir(&dir)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("ran");
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
    assert!(text.contains("uid 65534"), "{text}");
}

/// A namespace file descriptor that is not one is refused in the child, as the confinement.
#[tokio::test]
async fn a_namespace_that_cannot_be_joined_is_reported_as_confine() {
    let null = |_| OwnedFd::from(std::fs::File::open("/dev/null").expect("null"));
    let bad = Namespaces {
        user: null(0),
        net: null(1),
    };
    let prog = c("/bin/true");
    let argv = [c("true")];
    let e = spawn(&Spec {
        namespaces: Some(&bad),
        ..spec(&prog, &argv)
    })
    .expect_err("not a namespace");
    assert_eq!((e.stage, e.step), (Stage::Confine, "setns(CLONE_NEWUSER)"));
    assert_eq!(e.source.raw_os_error(), Some(libc::EINVAL));
}

/// The input goes into the stdin pipe before the child starts, as much as the pipe holds.
/// All of a small one (or of none): stdin is closed too, so the child reads it and its end
/// with nothing more from the caller. The first part of a large one: the caller writes the
/// rest and closes stdin. The child reads it whole either way.
#[tokio::test]
async fn the_input_is_in_the_pipe_before_the_child_starts() {
    let prog = c("/bin/cat");
    let argv = [c("cat")];
    let small = b"{\"n\": 1}".to_vec();
    let large: Vec<u8> = (0..1_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    for input in [Vec::new(), small, large] {
        let mut child = spawn(&Spec {
            input: Some(&input),
            ..spec(&prog, &argv)
        })
        .expect("started");
        let written = child.input_written;
        let mut stdout = child.stdout.take().expect("stdout");
        let mut out = Vec::new();
        if input.len() < 4096 {
            assert_eq!(written, input.len(), "a small input is written whole");
            assert!(child.stdin.is_none(), "stdin is closed once all is written");
            stdout.read_to_end(&mut out).await.expect("read");
        } else {
            assert!(written > 0 && written < input.len(), "{written}");
            let mut stdin = child.stdin.take().expect("stdin, for the rest");
            let rest = input[written..].to_vec();
            let feed = async move {
                stdin.write_all(&rest).await.expect("the rest written");
            };
            let (_, read) = tokio::join!(feed, stdout.read_to_end(&mut out));
            read.expect("read");
        }
        assert!(child.wait().await.expect("waited").success());
        assert_eq!(out.len(), input.len());
        assert!(out == input, "the output is the input");
    }
}
