//! Starts the child of a `command` tool from the calling thread, confined and limited, and
//! waits for it through its pidfd. Linux only: elsewhere [`spawn`] says so (`Unsupported`).
//!
//! **Why not `std::process::Command`.** A Landlock domain and a seccomp filter bind the thread
//! that installs them and what it starts afterwards, so a confined child needs either a
//! thread confined for the purpose or code that runs between `clone` and `exec`. A thread of
//! its own costs a hand-over per call (the caller's task parks, the thread wakes on another
//! core, the reply wakes the task there: ~45 µs on a two-core machine, docs/performance.md);
//! `std`'s `pre_exec` hook forces `fork`, whose copy of the page tables grows with weft's
//! memory and leaves every page of the parent copy-on-write. [`spawn`] does what glibc's
//! `posix_spawn` does — `clone(CLONE_VM | CLONE_VFORK)`: the child borrows weft's memory, the
//! calling thread waits until it has called `execve` — with a child of its own that also
//! applies the confinement and the limits:
//!
//! 1. every signal handler back to the default (`SIGPIPE` too; other ignored signals stay
//!    ignored, as `std` leaves them), so no handler of weft's runs in the child;
//! 2. a process group of its own (`setpgid(0, 0)`), so the caller can kill all it started;
//! 3. the three pipes onto stdin, stdout and stderr; the working directory;
//! 4. the resource limits (`prlimit64` on itself: `RLIMIT_AS`, `RLIMIT_CPU`);
//! 5. the namespaces it joins (`setns`: a user namespace, then the network namespace it owns,
//!    both made once per process by [`Namespaces::create`]), `no_new_privs` and the Landlock
//!    ruleset (`landlock_restrict_self` with a ruleset file descriptor made once per tool);
//! 6. an empty signal mask, then `execve`.
//!
//! The child only makes system calls through libc's thin wrappers: no allocation, no lock, no
//! unwinding, nothing written but its own stack (a guarded stack per thread, reused), `errno`
//! and the block it shares with the caller (its pipe ends, the failed step and its `errno`).
//! Everything it reads (paths, `argv`, `envp`, the limits) is built by the caller beforehand
//! and outlives the call, since the caller's thread is suspended until the child has called
//! `execve` or exited. Signals are blocked across `clone`, so none is handled in the child before
//! step 1. A step that fails ends the child (`_exit(127)`) and [`spawn`] returns which step and its
//! `errno` (an `execve` failure is [`Stage::Exec`], with `ENOENT` as [`io::ErrorKind::NotFound`]).
//!
//! Before `clone`, the caller puts the child's input ([`Spec::input`]) into the stdin pipe, as
//! much as the pipe holds, and closes its end when that was all: the child can read it, see
//! its end, answer and exit while the caller is still on its way back to the runtime, instead
//! of waiting for the runtime to report the pipe writable and the caller to be polled again.
//!
//! **Who runs first.** The kernel mostly starts a child on its parent's core, and the `execve` that
//! ends `CLONE_VFORK` wakes the parent there, which takes the core back: the child then waits
//! while the caller goes on (through weft's engine, tens of µs) until it parks. So when a
//! child that has exec'd is the only one of this process's children alive, [`spawn`] yields
//! the core to it (`sched_yield`): it runs at once, and the caller follows on the other core
//! or after it. With several alive the caller is the one starting and reaping them all, and
//! giving its core away at each start cost a fifth of the calls per second. Measured
//! (docs/performance.md, tool sources, 2026-11-28): a lone child's wait for the core after
//! `execve` went from ~28 µs to ~2 µs at p50, a `command` tool call through the engine
//! 20–30 µs sooner.
//!
//! The child comes with a pidfd (`CLONE_PIDFD`, Linux 5.2), so the caller waits for it on the
//! runtime's reactor and never signals a recycled pid. A [`Child`] dropped before it was
//! waited for kills its process group and is reaped in the background.
//!
//! **A seccomp filter from a thread ([`Spawner`]).** The kernel compiles a filter each time
//! one is installed (~55 µs per child here, docs/performance.md), while a child inherits its
//! parent thread's filter for nothing. So there is no filter step in the child: a
//! [`Spawner`] is a thread that installs a filter once and starts children the same way
//! (Landlock and limits still in each child). The caller
//! does not wait for it: it gets the pipes at once, writes and reads, and [`Child::started`]
//! says how the start went (a failed start closes the child's ends of the pipes).

#![cfg(unix)]

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// One instruction of a seccomp filter (classic BPF).
#[cfg(target_os = "linux")]
pub use libc::sock_filter as SockFilter;

/// One instruction of a seccomp filter (classic BPF; no seccomp off Linux).
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// A resource limit of the child, set before `execve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `RLIMIT_AS`, in bytes.
    AddressSpace(u64),
    /// `RLIMIT_CPU`, in seconds (`SIGXCPU` at the limit, `SIGKILL` a second later).
    CpuSeconds(u64),
}

/// What to start and how to confine it.
#[derive(Debug, Clone, Copy)]
pub struct Spec<'a> {
    /// The program, a path (no `PATH` search).
    pub program: &'a CStr,
    /// The whole argument vector, `argv[0]` included.
    pub argv: &'a [CString],
    /// The whole environment, `NAME=value` each.
    pub env: &'a [CString],
    /// The working directory; `None`: the caller's.
    pub cwd: Option<&'a CStr>,
    pub limits: &'a [Limit],
    /// A Landlock ruleset (`landlock_create_ruleset`'s file descriptor) the child restricts
    /// itself to.
    pub landlock: Option<BorrowedFd<'a>>,
    /// A user namespace and its network namespace the child joins (`setns`).
    pub namespaces: Option<&'a Namespaces>,
    /// `Some`: the child's whole stdin. It is written before the child starts, as much as
    /// the pipe holds ([`Child::input_written`] says how much); when all of it fits, the
    /// caller's end is closed too ([`Child::stdin`] is `None`), so the child reads its input
    /// and then the end of it without waiting for the caller to be polled again. `None`:
    /// nothing is written and the caller writes stdin through [`Child::stdin`].
    pub input: Option<&'a [u8]>,
}

/// Where starting a child failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// In the caller: the pipes, the runtime, `clone`.
    Start,
    /// In the child, before confinement: process group, stdio, working directory, limits.
    Setup,
    /// In the child: `no_new_privs` or Landlock; on a [`Spawner`]'s thread, its filter.
    Confine,
    /// `execve` itself (`NotFound`: no such program).
    Exec,
}

/// A child that could not be started: where, and the system's error.
#[derive(Debug)]
pub struct Error {
    pub stage: Stage,
    /// The step that failed (`"execve"`, `"landlock_restrict_self"`, …).
    pub step: &'static str,
    pub source: io::Error,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.step, self.source)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// A started child: its pipes (taken by the caller) and its process.
pub struct Child {
    /// How much of the input ([`Spec::input`]) is already in the stdin pipe; the caller
    /// writes the rest and closes [`Child::stdin`], which is `None` when nothing is left.
    pub input_written: usize,
    process: Process,
    /// [`Child::kill`] came while a [`Spawner`] was still starting it.
    kill_asked: bool,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

enum Process {
    /// Being started by a [`Spawner`]: its answer.
    Pending(tokio::sync::oneshot::Receiver<Result<Proc, Error>>),
    Started(Proc),
    /// Its start failed (and [`Child::started`] said so).
    Failed,
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.process {
            Process::Pending(_) => "starting".to_string(),
            Process::Started(p) => format!("pid {} ({:?})", p.pid, p.status),
            Process::Failed => "failed".to_string(),
        };
        f.debug_struct("Child")
            .field("process", &state)
            .finish_non_exhaustive()
    }
}

/// A child process of ours until it is reaped: its pid stays ours (no other process can get
/// it) until then. Dropped unreaped, it kills the child's group and has it reaped in the
/// background — whoever drops it: a [`Child`], or a [`Spawner`] whose caller has gone.
struct Proc {
    pid: libc::pid_t,
    /// The pidfd, until it is registered with the runtime (at the first wait).
    pidfd: Option<OwnedFd>,
    watch: Option<AsyncFd<OwnedFd>>,
    /// Its exit status, once reaped.
    status: Option<ExitStatus>,
    /// Counts it in [`LIVE`] while it exists (`None`: a child that never exec'd).
    _live: Option<Live>,
}

/// Children started (exec'd) whose [`Proc`] still exists, in this process.
#[cfg(target_os = "linux")]
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// How many children [`spawn`] and [`Spawner::spawn`] started (past `execve`) whose [`Child`]
/// has not been dropped yet, in this process.
#[cfg(target_os = "linux")]
pub fn alive() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// One child counted in [`LIVE`].
#[cfg(target_os = "linux")]
struct Live;

#[cfg(target_os = "linux")]
impl Live {
    /// Counts a child; how many there are with it.
    fn count() -> (Live, usize) {
        (Live, LIVE.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

#[cfg(target_os = "linux")]
impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The steps of the child, as it reports a failure (0: none).
#[cfg(target_os = "linux")]
const STEPS: &[(Stage, &str)] = &[
    (Stage::Start, "none"),
    (Stage::Setup, "setpgid"),
    (Stage::Setup, "dup2"),
    (Stage::Setup, "chdir"),
    (Stage::Setup, "prlimit64"),
    (Stage::Confine, "setns(CLONE_NEWUSER)"),
    (Stage::Confine, "setns(CLONE_NEWNET)"),
    (Stage::Confine, "prctl(PR_SET_NO_NEW_PRIVS)"),
    (Stage::Confine, "landlock_restrict_self"),
    (Stage::Setup, "sigprocmask"),
    (Stage::Exec, "execve"),
];
/// The numbers the child reports a failed step by (0: none), indexes of [`STEPS`].
#[cfg(target_os = "linux")]
mod step {
    use std::ffi::c_int;
    pub(super) const SETPGID: c_int = 1;
    pub(super) const DUP2: c_int = 2;
    pub(super) const CHDIR: c_int = 3;
    pub(super) const PRLIMIT: c_int = 4;
    pub(super) const SETNS_USER: c_int = 5;
    pub(super) const SETNS_NET: c_int = 6;
    pub(super) const NO_NEW_PRIVS: c_int = 7;
    pub(super) const LANDLOCK: c_int = 8;
    pub(super) const SIGMASK: c_int = 9;
    pub(super) const EXECVE: c_int = 10;
}

/// What the child reads (prepared by [`spawn`], alive until the child has exec'd or exited)
/// and the two words it writes when a step fails.
#[cfg(target_os = "linux")]
struct Shared {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    /// Null: the caller's.
    cwd: *const c_char,
    /// The child's ends of the stdin, stdout and stderr pipes.
    stdio: [c_int; 3],
    limits: [(libc::c_long, libc::rlimit64); 2],
    n_limits: usize,
    /// -1: none.
    landlock: c_int,
    /// The user and network namespaces to join; -1: none.
    userns: c_int,
    netns: c_int,
    /// False: end (`_exit(0)`) where `execve` would come (a check that the steps work).
    exec: bool,
    /// 0: none.
    failed_step: c_int,
    errno: c_int,
}

/// Bytes of the child's stack (below it, one guard page).
#[cfg(target_os = "linux")]
const STACK_BYTES: usize = 64 * 1024;

/// A stack for the children this thread starts, mapped at its first [`spawn`]: only one
/// child uses it at a time, since the thread is suspended until that child has exec'd.
#[cfg(target_os = "linux")]
struct Stack {
    base: *mut c_void,
    len: usize,
}

#[cfg(target_os = "linux")]
impl Stack {
    fn map() -> io::Result<Stack> {
        let page = page_size();
        let len = STACK_BYTES + page;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping just made becomes the guard.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The top of the stack (it grows down), 16-byte aligned (the mapping is page-aligned).
    fn top(&self) -> *mut c_void {
        self.base.wrapping_byte_add(self.len)
    }
}

#[cfg(target_os = "linux")]
impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unused once its thread ends.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
}

#[cfg(target_os = "linux")]
thread_local! {
    static STACK: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A pipe, both ends close-on-exec: (read end, write end).
#[cfg(target_os = "linux")]
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Off Linux: `Unsupported` (no `CLONE_PIDFD`, Landlock or seccomp).
#[cfg(not(target_os = "linux"))]
pub fn spawn(_spec: &Spec<'_>) -> Result<Child, Error> {
    Err(Error {
        stage: Stage::Start,
        step: "spawn",
        source: io::Error::new(
            io::ErrorKind::Unsupported,
            "command tools run on Linux only",
        ),
    })
}

/// Starts `spec`'s program from the calling thread (see the crate docs): stdin, stdout and
/// stderr are pipes to the returned [`Child`], which is the leader of a process group of its
/// own. Must be called on a tokio runtime (the pipes and the pidfd are registered with its
/// reactor).
#[cfg(target_os = "linux")]
pub fn spawn(spec: &Spec<'_>) -> Result<Child, Error> {
    let (mut child, theirs) = pipes(spec.input)?;
    let started = start_child(spec, &theirs, true);
    drop(theirs);
    child.process = Process::Started(started?);
    Ok(child)
}

/// A [`Child`] without its process yet, with as much of `input` in its stdin pipe as it
/// holds (and its end of that pipe closed when that was all), and the child's ends of its
/// three pipes.
#[cfg(target_os = "linux")]
fn pipes(input: Option<&[u8]>) -> Result<(Child, [OwnedFd; 3]), Error> {
    let start = |step: &'static str, source: io::Error| Error {
        stage: Stage::Start,
        step,
        source,
    };
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(start(
            "runtime",
            io::Error::other("weft_spawn must be called on a tokio runtime"),
        ));
    }
    let (in_child, in_ours) = pipe().map_err(|e| start("pipe2", e))?;
    let (out_ours, out_child) = pipe().map_err(|e| start("pipe2", e))?;
    let (err_ours, err_child) = pipe().map_err(|e| start("pipe2", e))?;
    let stdin = pipe::Sender::from_owned_fd(in_ours).map_err(|e| start("stdin", e))?;
    let input_written = match input {
        Some(input) => prefill(&stdin, input).map_err(|e| start("write", e))?,
        None => 0,
    };
    let whole = input.is_some_and(|i| i.len() == input_written);
    let child = Child {
        input_written,
        process: Process::Failed,
        kill_asked: false,
        stdin: (!whole).then_some(stdin),
        stdout: Some(pipe::Receiver::from_owned_fd(out_ours).map_err(|e| start("stdout", e))?),
        stderr: Some(pipe::Receiver::from_owned_fd(err_ours).map_err(|e| start("stderr", e))?),
    };
    Ok((child, [in_child, out_child, err_child]))
}

/// Writes as much of `input` to the pipe `stdin` as it takes without blocking (the runtime
/// has made it non-blocking); how much.
#[cfg(target_os = "linux")]
fn prefill(stdin: &pipe::Sender, input: &[u8]) -> io::Result<usize> {
    let fd = stdin.as_raw_fd();
    let mut done = 0;
    while done < input.len() {
        let rest = &input[done..];
        // SAFETY: a plain system call on a pipe end the caller owns; it reads `rest`'s
        // initialized bytes only.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        match n {
            1.. => done += n.unsigned_abs(),
            0 => break,
            _ => match errno() {
                libc::EINTR => {}
                libc::EAGAIN => break,
                e => return Err(io::Error::from_raw_os_error(e)),
            },
        }
    }
    Ok(done)
}

/// `clone` with every signal blocked across the call, so that no handler of weft's runs in
/// the child (which starts with the mask blocked); the caller's mask is restored after.
///
/// # Safety
/// As `clone(2)` with `CLONE_VM`: `f` runs on the stack below `top`, which must stay mapped
/// and unused by anything else until the child has exec'd or exited, and may touch only what
/// stays alive and unshared that long (through `arg`); `pidfd` must be valid for writing when
/// `flags` has `CLONE_PIDFD`.
#[cfg(target_os = "linux")]
unsafe fn clone_blocked(
    f: extern "C" fn(*mut c_void) -> c_int,
    top: *mut c_void,
    flags: c_int,
    arg: *mut c_void,
    pidfd: *mut c_int,
) -> io::Result<libc::pid_t> {
    // SAFETY: the caller's part is above; the masks are plain values on this stack.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(f, top, flags, arg, pidfd);
        let clone_errno = errno();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(io::Error::from_raw_os_error(clone_errno));
        }
        Ok(pid)
    }
}

/// `strings` as `execve` takes them: pointers, then a null one.
#[cfg(target_os = "linux")]
fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Clones and execs the child with `stdio` as its stdin, stdout and stderr; needs no runtime.
/// Without `exec`, the child ends with status 0 where it would call `execve`.
#[cfg(target_os = "linux")]
fn start_child(spec: &Spec<'_>, stdio: &[OwnedFd; 3], exec: bool) -> Result<Proc, Error> {
    let start = |step: &'static str, source: io::Error| Error {
        stage: Stage::Start,
        step,
        source,
    };
    let argv = pointers(spec.argv);
    let envp = pointers(spec.env);
    let mut limits = [(
        0,
        libc::rlimit64 {
            rlim_cur: 0,
            rlim_max: 0,
        },
    ); 2];
    if spec.limits.len() > limits.len() {
        return Err(start("limits", io::Error::other("more than two limits")));
    }
    for (slot, limit) in limits.iter_mut().zip(spec.limits) {
        let (resource, value) = match *limit {
            Limit::AddressSpace(b) => (libc::RLIMIT_AS, b),
            Limit::CpuSeconds(s) => (libc::RLIMIT_CPU, s),
        };
        *slot = (
            libc::c_long::from(resource as i32),
            libc::rlimit64 {
                rlim_cur: value,
                rlim_max: value,
            },
        );
    }
    let mut shared = Shared {
        program: spec.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: spec.cwd.map_or(std::ptr::null(), CStr::as_ptr),
        stdio: [
            stdio[0].as_raw_fd(),
            stdio[1].as_raw_fd(),
            stdio[2].as_raw_fd(),
        ],
        limits,
        n_limits: spec.limits.len(),
        landlock: spec.landlock.map_or(-1, |fd| fd.as_raw_fd()),
        userns: spec.namespaces.map_or(-1, |n| n.user.as_raw_fd()),
        netns: spec.namespaces.map_or(-1, |n| n.net.as_raw_fd()),
        exec,
        failed_step: 0,
        errno: 0,
    };

    let started = STACK.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(Stack::map()?);
        }
        let top = cell
            .as_ref()
            .map(Stack::top)
            .ok_or_else(io::Error::last_os_error)?;
        let mut pidfd: c_int = -1;
        // SAFETY: `child` runs on `top`'s stack, owned by this thread and used by one child at
        // a time; it reads only `shared` and what its pointers point to, all alive until
        // `clone` returns (CLONE_VFORK suspends this thread until the child has exec'd or
        // exited), and writes only `shared`'s two failure words. On success the kernel
        // stored a new pidfd, owned by nothing else.
        unsafe {
            let pid = clone_blocked(
                child,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
                (&raw mut shared).cast::<c_void>(),
                &raw mut pidfd,
            )?;
            Ok((pid, OwnedFd::from_raw_fd(pidfd)))
        }
    });
    let (pid, pidfd) = started.map_err(|e| start("clone", e))?;
    // SAFETY: the child has exec'd or exited (CLONE_VFORK); it wrote these before either.
    let (failed, failed_errno) = unsafe {
        (
            std::ptr::read_volatile(&raw const shared.failed_step),
            std::ptr::read_volatile(&raw const shared.errno),
        )
    };
    let mut proc = Proc {
        pid,
        pidfd: Some(pidfd),
        watch: None,
        status: None,
        _live: None,
    };
    if failed != 0 {
        // It has exited (`_exit(127)`): reaped at once.
        proc.reap_blocking();
        let (stage, step) = usize::try_from(failed)
            .ok()
            .and_then(|i| STEPS.get(i))
            .copied()
            .unwrap_or((Stage::Start, "unknown"));
        return Err(Error {
            stage,
            step,
            source: io::Error::from_raw_os_error(failed_errno),
        });
    }
    if exec {
        let (live, n) = Live::count();
        proc._live = Some(live);
        if n == 1 {
            // The child has just exec'd on this thread's core and this thread, woken by it,
            // took the core back: a lone child gets it (see the crate docs, "Who runs
            // first").
            // SAFETY: a plain system call without arguments.
            unsafe { libc::sched_yield() };
        }
    }
    Ok(proc)
}

/// The child between `clone` and `execve` (see the crate docs). Never returns.
#[cfg(target_os = "linux")]
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Shared` of the suspended `spawn`, whose pointers are valid; only
    // libc's system call wrappers are called (no allocation, no lock); a failure writes the
    // step and errno and ends the child without running any of weft's code.
    unsafe {
        let s = &mut *arg.cast::<Shared>();
        let fail = |s: &mut Shared, step: c_int| -> ! {
            s.errno = errno();
            s.failed_step = step;
            libc::_exit(127)
        };
        // 1. Handlers back to the default (glibc refuses its own two signals, 32 and 33).
        for sig in 1..65 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if sig == libc::SIGPIPE
                || (old.sa_sigaction != libc::SIG_IGN && old.sa_sigaction != libc::SIG_DFL)
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        // 2.
        if libc::setpgid(0, 0) != 0 {
            fail(s, step::SETPGID);
        }
        // 3. A pipe end that is itself 0, 1 or 2 (weft started without them) is first moved
        // above 2, so that no `dup2` overwrites an end still to be placed.
        for i in 0..3 {
            let fd = s.stdio[i];
            if fd < 3 && fd != i as c_int {
                let moved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
                if moved < 0 {
                    fail(s, step::DUP2);
                }
                s.stdio[i] = moved;
            }
        }
        for i in 0..3 {
            let fd = s.stdio[i];
            let ok = if fd == i as c_int {
                libc::fcntl(fd, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(fd, i as c_int) == i as c_int
            };
            if !ok {
                fail(s, step::DUP2);
            }
        }
        if !s.cwd.is_null() && libc::chdir(s.cwd) != 0 {
            fail(s, step::CHDIR);
        }
        // 4.
        for i in 0..s.n_limits.min(s.limits.len()) {
            let (resource, limit) = &s.limits[i];
            if libc::syscall(
                libc::SYS_prlimit64,
                0 as libc::c_long,
                *resource,
                limit as *const libc::rlimit64,
                std::ptr::null_mut::<libc::rlimit64>(),
            ) != 0
            {
                fail(s, step::PRLIMIT);
            }
        }
        // 5. The user namespace first: it owns the network namespace, and joining it gives the
        // child the capability that joining that one takes (in it alone).
        if s.userns >= 0 && libc::setns(s.userns, libc::CLONE_NEWUSER) != 0 {
            fail(s, step::SETNS_USER);
        }
        if s.netns >= 0 && libc::setns(s.netns, libc::CLONE_NEWNET) != 0 {
            fail(s, step::SETNS_NET);
        }
        if s.landlock >= 0 {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                fail(s, step::NO_NEW_PRIVS);
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, s.landlock, 0) != 0 {
                fail(s, step::LANDLOCK);
            }
        }
        // 6.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            fail(s, step::SIGMASK);
        }
        if !s.exec {
            libc::_exit(0);
        }
        libc::execve(s.program, s.argv, s.envp);
        fail(s, step::EXECVE)
    }
}

impl Child {
    /// Its process id, once started and until reaped (then `None`: the id may be another's).
    pub fn id(&self) -> Option<u32> {
        match &self.process {
            Process::Started(p) if p.status.is_none() => u32::try_from(p.pid).ok(),
            _ => None,
        }
    }

    /// Waits until it has been started (at once unless a [`Spawner`] starts it): a failed start
    /// is this error, the one [`spawn`] would have returned.
    pub async fn started(&mut self) -> Result<(), Error> {
        if let Process::Pending(answer) = &mut self.process {
            let answer = answer.await.unwrap_or_else(|_| {
                Err(Error {
                    stage: Stage::Start,
                    step: "spawner",
                    source: io::Error::other("the spawner thread has ended"),
                })
            });
            match answer {
                Ok(p) => {
                    self.process = Process::Started(p);
                    if self.kill_asked {
                        self.kill();
                    }
                }
                Err(e) => {
                    self.process = Process::Failed;
                    return Err(e);
                }
            }
        }
        match self.process {
            Process::Failed => Err(Error {
                stage: Stage::Start,
                step: "spawn",
                source: io::Error::other("the child did not start"),
            }),
            _ => Ok(()),
        }
    }

    /// Sends `SIGKILL` to its process group and to itself (in case it left the group);
    /// nothing once it has been reaped. One still being started is killed once it is.
    pub fn kill(&mut self) {
        match &mut self.process {
            Process::Started(p) => p.kill(),
            Process::Pending(_) => self.kill_asked = true,
            Process::Failed => {}
        }
    }

    /// Waits for it to exit (on the runtime, through its pidfd) and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.started().await.map_err(io::Error::other)?;
        match &mut self.process {
            Process::Started(p) => p.wait().await,
            _ => Err(io::Error::other("the child did not start")),
        }
    }
}

impl Proc {
    fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        // SAFETY: plain system calls; the pid and the group (led by it) are still ours,
        // since it has not been reaped.
        unsafe {
            libc::kill(-self.pid, libc::SIGKILL);
            libc::kill(self.pid, libc::SIGKILL);
        }
    }

    async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.try_reap()? {
                return Ok(s);
            }
            if self.watch.is_none() {
                let fd = self
                    .pidfd
                    .take()
                    .ok_or_else(|| io::Error::other("the pidfd is gone"))?;
                // SAFETY: an `OwnedFd` keeps its descriptor open and the same until dropped.
                let watch = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
                match watch {
                    Ok(w) => self.watch = Some(w),
                    Err(e) => {
                        let e: io::Error = e.into();
                        return Err(e);
                    }
                }
            }
            let Some(watch) = self.watch.as_ref() else {
                return Err(io::Error::other("the pidfd is gone"));
            };
            let mut ready = watch.readable().await?;
            ready.clear_ready();
        }
    }

    /// Reaps it if it has exited.
    fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let mut status: c_int = 0;
        loop {
            // SAFETY: a plain system call on our own unreaped child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                let s = ExitStatus::from_raw(status);
                self.status = Some(s);
                return Ok(Some(s));
            }
            if r == 0 {
                return Ok(None);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Reaps it, waiting as long as it takes (only for a child known to have exited or been
    /// killed).
    fn reap_blocking(&mut self) {
        let mut status: c_int = 0;
        loop {
            // SAFETY: a plain system call on our own unreaped child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                self.status = Some(ExitStatus::from_raw(status));
                return;
            }
            if r < 0 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
    }
}

impl Drop for Proc {
    /// Unreaped, it is killed with its group and reaped in the background: on the runtime
    /// once its pidfd says it exited, else on a thread of its own.
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        self.kill();
        if matches!(self.try_reap(), Ok(Some(_))) {
            return;
        }
        let pid = self.pid;
        let reap = move || {
            let mut status: c_int = 0;
            // SAFETY: a plain system call on our own unreaped, killed child.
            while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
        };
        let rt = tokio::runtime::Handle::try_current();
        match (self.watch.take(), rt) {
            (Some(watch), Ok(rt)) => {
                rt.spawn(async move {
                    let _ = watch.readable().await;
                    reap();
                });
            }
            _ => {
                let _ = std::thread::Builder::new()
                    .name("weft-reaper".into())
                    .spawn(reap);
            }
        }
    }
}

/// A user namespace and a network namespace it owns, made once, that children join
/// ([`Spec::namespaces`]): the network namespace has no interface but a loopback that is down,
/// so nothing is reachable from it — no host, not even 127.0.0.1, TCP and UDP alike — and its
/// abstract Unix sockets are its own. Joining costs each child two `setns` calls, where
/// making a network namespace per child would cost far more (the kernel sets up and later
/// tears down its whole network stack).
///
/// The user namespace maps weft's own user and group to themselves (as root, every id to
/// itself), so the child's ids, and whose files it may touch, are as without it; the
/// capabilities it gains there reach that namespace's network namespace and nothing of the
/// machine's (so it cannot leave it). Not running as root, `setgroups` is denied in it.
#[derive(Debug)]
pub struct Namespaces {
    user: OwnedFd,
    net: OwnedFd,
}

/// Off Linux: `Unsupported`.
#[cfg(not(target_os = "linux"))]
impl Namespaces {
    pub fn create() -> Result<Namespaces, Error> {
        Err(Error {
            stage: Stage::Start,
            step: "namespaces",
            source: io::Error::new(io::ErrorKind::Unsupported, "namespaces are Linux's"),
        })
    }
}

#[cfg(target_os = "linux")]
impl Namespaces {
    /// Makes them (through a child that holds them while its id maps are written, then is
    /// killed) and checks that a child can join them; the error says which step failed here
    /// (user namespaces may be off: `user.max_user_namespaces`, or refused by the LSM).
    pub fn create() -> Result<Namespaces, Error> {
        let fail = |step: &'static str, source: io::Error| Error {
            stage: Stage::Confine,
            step,
            source,
        };
        let stack = Stack::map().map_err(|e| fail("mmap", e))?;
        let top = stack.top();
        // SAFETY: `hold` runs on `stack`, which only it uses and which outlives it (the
        // `Holder` kills and reaps it before unmapping it); it touches nothing else, and with
        // every signal blocked only SIGKILL ends it.
        let pid = unsafe {
            clone_blocked(
                hold,
                top,
                libc::CLONE_VM | libc::CLONE_NEWUSER | libc::CLONE_NEWNET,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
        .map_err(|e| fail("clone(CLONE_NEWUSER | CLONE_NEWNET)", e))?;
        let holder = Holder { pid, _stack: stack };
        let open = |ns: &str| {
            std::fs::File::open(format!("/proc/{pid}/ns/{ns}"))
                .map(OwnedFd::from)
                .map_err(|e| fail("open /proc/<pid>/ns", e))
        };
        let namespaces = Namespaces {
            user: open("user")?,
            net: open("net")?,
        };
        // SAFETY: plain system calls without arguments.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let write = |file: &str, text: &str| {
            std::fs::write(format!("/proc/{pid}/{file}"), text)
                .map_err(|e| fail("writing the user namespace's id maps", e))
        };
        if uid == 0 {
            write("uid_map", "0 0 4294967295")?;
            write("gid_map", "0 0 4294967295")?;
        } else {
            write("setgroups", "deny")?;
            write("uid_map", &format!("{uid} {uid} 1"))?;
            write("gid_map", &format!("{gid} {gid} 1"))?;
        }
        drop(holder);
        namespaces.check_join()?;
        Ok(namespaces)
    }

    /// Starts a child that joins them and ends where it would call `execve`.
    fn check_join(&self) -> Result<(), Error> {
        let null = || {
            std::fs::File::open("/dev/null")
                .map(OwnedFd::from)
                .map_err(|e| Error {
                    stage: Stage::Start,
                    step: "open /dev/null",
                    source: e,
                })
        };
        let stdio = [null()?, null()?, null()?];
        let spec = Spec {
            program: c"/",
            argv: &[],
            env: &[],
            cwd: None,
            limits: &[],
            landlock: None,
            namespaces: Some(self),
            input: None,
        };
        let mut proc = start_child(&spec, &stdio, false)?;
        proc.reap_blocking();
        match proc.status {
            Some(s) if s.success() => Ok(()),
            other => Err(Error {
                stage: Stage::Confine,
                step: "joining the namespaces",
                source: io::Error::other(format!("the check child ended with {other:?}")),
            }),
        }
    }
}

/// The child holding new namespaces while they are set up: killed, then reaped, then its
/// stack unmapped.
#[cfg(target_os = "linux")]
struct Holder {
    pid: libc::pid_t,
    _stack: Stack,
}

#[cfg(target_os = "linux")]
impl Drop for Holder {
    fn drop(&mut self) {
        let mut status: c_int = 0;
        // SAFETY: plain system calls on our own unreaped child (its exit signal is none, so
        // only `__WALL` waits for it).
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            while libc::waitpid(self.pid, &mut status, libc::__WALL) < 0 && errno() == libc::EINTR {
            }
        }
    }
}

/// What the holder runs: nothing, until it is killed.
#[cfg(target_os = "linux")]
extern "C" fn hold(_: *mut c_void) -> c_int {
    loop {
        // SAFETY: a plain system call; every signal is blocked, so only SIGKILL ends it.
        unsafe { libc::pause() };
    }
}

/// A thread with a seccomp filter of its own that starts children, which inherit the filter:
/// installing a filter costs each child ~55 µs (the kernel compiles it and builds its cache),
/// handing the start to a thread that has it once costs less, and the caller does not wait
/// for the thread — it writes to and reads from the child's pipes at once, and
/// [`Child::started`] says whether the start worked. One thread for all the children with
/// that filter: their starts take turns (each holds it until its `execve`).
#[cfg(target_os = "linux")]
pub struct Spawner {
    jobs: std::sync::mpsc::Sender<Job>,
}

#[cfg(target_os = "linux")]
impl fmt::Debug for Spawner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spawner").finish_non_exhaustive()
    }
}

/// What a [`Spawner`] starts: a [`Spec`] whose parts it owns (the filter is the spawner's).
#[derive(Debug, Clone)]
pub struct OwnedSpec {
    pub program: CString,
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    pub cwd: Option<CString>,
    pub limits: Vec<Limit>,
    pub landlock: Option<std::sync::Arc<OwnedFd>>,
    /// As [`Spec::input`].
    pub input: Option<Vec<u8>>,
}

#[cfg(target_os = "linux")]
struct Job {
    spec: OwnedSpec,
    stdio: [OwnedFd; 3],
    answer: tokio::sync::oneshot::Sender<Result<Proc, Error>>,
}

#[cfg(target_os = "linux")]
impl Spawner {
    /// Starts the thread and installs `seccomp` on it; the error is the filter's.
    pub fn start(seccomp: &[SockFilter]) -> Result<Spawner, Error> {
        let fail = |step: &'static str, source: io::Error| Error {
            stage: Stage::Confine,
            step,
            source,
        };
        let filter = seccomp.to_vec();
        let len = u16::try_from(filter.len())
            .map_err(|_| fail("seccomp", io::Error::other("over 65,535 instructions")))?;
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let (ready_tx, ready) = std::sync::mpsc::sync_channel::<Result<(), Error>>(1);
        std::thread::Builder::new()
            .name("weft-spawner".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let prog = libc::sock_fprog {
                    len,
                    filter: filter.as_ptr().cast_mut(),
                };
                // SAFETY: plain system calls restricting this thread; `prog` points into
                // `filter`, alive across the call.
                let installed = unsafe {
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                        Err(fail(
                            "prctl(PR_SET_NO_NEW_PRIVS)",
                            io::Error::last_os_error(),
                        ))
                    } else if libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        0,
                        &raw const prog,
                    ) != 0
                    {
                        Err(fail("seccomp", io::Error::last_os_error()))
                    } else {
                        Ok(())
                    }
                };
                let ok = installed.is_ok();
                let _ = ready_tx.send(installed);
                if !ok {
                    return;
                }
                while let Ok(job) = queue.recv() {
                    let s = &job.spec;
                    let spec = Spec {
                        program: &s.program,
                        argv: &s.argv,
                        env: &s.env,
                        cwd: s.cwd.as_deref(),
                        limits: &s.limits,
                        landlock: s.landlock.as_deref().map(AsFd::as_fd),
                        namespaces: None,
                        input: None,
                    };
                    let started = start_child(&spec, &job.stdio, true);
                    drop(job.stdio);
                    // A caller gone meanwhile drops the answer: its child is killed and reaped.
                    let _ = job.answer.send(started);
                }
            })
            .map_err(|e| fail("starting the spawner thread", e))?;
        ready.recv().map_err(|_| {
            fail(
                "starting the spawner thread",
                io::Error::other("it ended without an answer"),
            )
        })??;
        Ok(Spawner { jobs })
    }

    /// Has the thread start `spec`'s program; returns at once with its pipes (see
    /// [`Child::started`]). Must be called on a tokio runtime.
    pub fn spawn(&self, mut spec: OwnedSpec) -> Result<Child, Error> {
        let (mut child, stdio) = pipes(spec.input.take().as_deref())?;
        let (answer, pending) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Job {
                spec,
                stdio,
                answer,
            })
            .map_err(|_| Error {
                stage: Stage::Start,
                step: "spawner",
                source: io::Error::other("the spawner thread has ended"),
            })?;
        child.process = Process::Pending(pending);
        Ok(child)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
