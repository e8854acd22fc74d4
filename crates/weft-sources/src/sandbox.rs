//! The confinement of a `command` tool's child (its step security profile, enforced): the
//! filesystem through Landlock, the network through a network namespace the child joins (or,
//! where user namespaces are off, a seccomp filter). See the `command` module docs for what a
//! definition asks; this module makes it so or says why not.
//!
//! **Built once, applied in each child.** When the tool is built, its Landlock ruleset is
//! made (a file descriptor, [`Prepared`]); `weft-spawn` starts each child and, between
//! `clone` and `execve`, restricts the child alone to that ruleset and has it join the
//! namespaces. No runtime thread of weft is ever restricted.
//!
//! **No network** ([`NetCut::Namespace`]): one user namespace and one network namespace it
//! owns are made once per process ([`weft_spawn::Namespaces`]); every child without network
//! joins them (two `setns` calls). The network namespace's only interface, `lo`, is down: no
//! address, not even 127.0.0.1, is reachable, TCP and UDP alike ("Network is unreachable"),
//! and the machine's abstract Unix sockets are not there. The user namespace maps weft's
//! user and group to themselves, so the child's ids and file access are as without it; the
//! capabilities a child has inside reach that network namespace only, so it cannot leave
//! it. A Unix socket at a path stays reachable where the filesystem rules let the child see
//! it. Costs a few microseconds per call.
//!
//! **The fallback** ([`NetCut::Filter`], where user namespaces cannot be made or joined — off
//! by `user.max_user_namespaces`, or refused to unprivileged users by an LSM — and the kernel
//! has Landlock ABI 6, Linux 6.12): a seccomp filter refuses `socket` for every family but
//! `AF_UNIX` (IPv4, IPv6, netlink, packet, …: `EACCES`, "Permission denied") and
//! `io_uring_setup` (whose rings can open sockets past the filter), and Landlock's scope
//! refuses connecting to abstract Unix sockets made outside the child's domain. The filter
//! only knows the machine's own architecture: a 32-bit program is killed at its first
//! system call (`SIGSYS`), and x32 calls of `socket` are refused outright. The filter is
//! compiled once and installed once, on one thread of weft's that does nothing but start
//! these children ([`offline_spawner`]): they inherit it, where installing it in each child
//! would cost ~55 µs (the kernel compiles every filter it is given). The hand-over to that
//! thread costs up to ~50 µs a call (docs/performance.md).
//!
//! Both are checked when the tool is built: a restriction the definition implies that this
//! machine cannot enforce (no Landlock in the kernel, neither way to cut the network) is a
//! build error naming the setting that would lift it, never a run without it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What is readable beside a command's `read_paths`: what programs need to start (the
/// loader, shared libraries, the usual binaries) and the harmless devices.
pub(crate) const RUNTIME_PATHS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Devices every sandboxed command may write (output thrown away).
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// What a sandboxed child gets: its filesystem and TCP ports through Landlock, and with
/// `offline` no network at all ([`NetCut::Filter`]).
#[derive(Debug, Clone)]
pub(crate) struct Confinement {
    /// Readable (and executable) paths; `None` is everything.
    pub(crate) read: Option<Vec<PathBuf>>,
    /// Writable paths.
    pub(crate) write: Vec<PathBuf>,
    /// The only TCP ports the child may connect to; `None` is every port.
    pub(crate) connect_ports: Option<Vec<u16>>,
    /// No network: the seccomp filter and the abstract-socket scope of [`NetCut::Filter`].
    pub(crate) offline: bool,
}

impl Confinement {
    /// Whether the filesystem is open (everything readable, `/` writable).
    pub(crate) fn fs_unrestricted(&self) -> bool {
        self.read.is_none() && self.write.iter().any(|p| p == Path::new("/"))
    }

    /// Whether these rules restrict nothing (the filesystem open, any port, the network).
    pub(crate) fn is_unrestricted(&self) -> bool {
        self.fs_unrestricted() && self.connect_ports.is_none() && !self.offline
    }
}

/// How a command without network (`network = false`) is cut off from it on this machine.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NetCut {
    /// The child joins a network namespace without interfaces.
    Namespace(&'static weft_spawn::Namespaces),
    /// In the child: a seccomp filter (from the offline spawner) and Landlock's
    /// abstract-socket scope.
    Filter,
}

/// The way this machine cuts a command off the network (the namespaces where they can be
/// made and joined, else the filter), or why neither works. Found once per process.
pub(crate) fn net_cut() -> Result<NetCut, String> {
    static CUT: OnceLock<Result<NetCut, String>> = OnceLock::new();
    CUT.get_or_init(|| match namespaces() {
        Ok(ns) => Ok(NetCut::Namespace(ns)),
        Err(ns) => filter_available()
            .map(|()| NetCut::Filter)
            .map_err(|filter| format!("{ns}; and {filter}")),
    })
    .clone()
}

/// The namespaces of [`NetCut::Namespace`], made once per process; why they cannot be.
pub(crate) fn namespaces() -> Result<&'static weft_spawn::Namespaces, String> {
    static NAMESPACES: OnceLock<Result<weft_spawn::Namespaces, String>> = OnceLock::new();
    NAMESPACES
        .get_or_init(|| {
            weft_spawn::Namespaces::create()
                .map_err(|e| format!("a user and network namespace cannot be made here ({e})"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether [`NetCut::Filter`] works here: Landlock's abstract-socket scope (ABI 6) and a
/// seccomp filter, both installed on a thread of its own that ends at once (the probe
/// restricts its thread).
fn filter_available() -> Result<(), String> {
    let probe = || {
        restrict_thread(&Confinement {
            read: None,
            write: vec![PathBuf::from("/")],
            connect_ports: None,
            offline: true,
        })
    };
    std::thread::Builder::new()
        .name("weft-sandbox-probe".into())
        .spawn(probe)
        .map_err(|e| format!("starting the probe thread: {e}"))?
        .join()
        .map_err(|_| "the probe thread panicked".to_string())?
}

/// The seccomp filter of [`NetCut::Filter`], compiled once.
#[cfg(target_os = "linux")]
fn offline_filter() -> Result<&'static seccompiler::BpfProgram, String> {
    static FILTER: OnceLock<Result<seccompiler::BpfProgram, String>> = OnceLock::new();
    FILTER
        .get_or_init(|| compile_offline_filter().map_err(|e| format!("seccomp: {e}")))
        .as_ref()
        .map_err(Clone::clone)
}

/// `socket` and `socketpair` for any family but `AF_UNIX`, and `io_uring_setup`, fail with
/// `EACCES`; every other call is allowed (the filter's prologue kills a call of another
/// architecture).
#[cfg(target_os = "linux")]
fn compile_offline_filter() -> Result<seccompiler::BpfProgram, seccompiler::Error> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let not_unix = || {
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .and_then(|c| SeccompRule::new(vec![c]))
    };
    let mut rules = std::collections::BTreeMap::new();
    rules.insert(libc::SYS_socket, vec![not_unix()?]);
    rules.insert(libc::SYS_socketpair, vec![not_unix()?]);
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    // The x32 ABI reaches the same calls with this bit set: refused whatever the family.
    #[cfg(target_arch = "x86_64")]
    for nr in [
        libc::SYS_socket,
        libc::SYS_socketpair,
        libc::SYS_io_uring_setup,
    ] {
        rules.insert(nr | 0x4000_0000, Vec::new());
    }
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )?;
    Ok(seccompiler::BpfProgram::try_from(filter)?)
}

/// Whether this kernel's Landlock restricts TCP connections by port (ABI 4, Linux 6.7); the
/// reason when not. Checked once per process.
pub(crate) fn landlock_ports_available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE.get_or_init(probe_ports).clone()
}

#[cfg(target_os = "linux")]
fn probe_ports() -> Result<(), String> {
    use landlock::{AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr};
    landlock_available()?;
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp)
        .and_then(|r| r.create())
        .map(|_| ())
        .map_err(|e| {
            format!(
                "this kernel's Landlock cannot restrict TCP ports ({e}; it needs Linux 6.7 or \
                 later)"
            )
        })
}

#[cfg(not(target_os = "linux"))]
fn probe_ports() -> Result<(), String> {
    Err("Landlock exists on Linux only".into())
}

/// Whether this kernel enforces Landlock; the reason when not. Checked once per process.
pub(crate) fn landlock_available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE.get_or_init(probe_landlock).clone()
}

#[cfg(target_os = "linux")]
fn probe_landlock() -> Result<(), String> {
    use landlock::{ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr};
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create())
        .map(|_| ())
        .map_err(|e| {
            format!(
                "this kernel does not enforce Landlock ({e}; it needs Linux 5.13 or later with \
                 `landlock` in its LSM list)"
            )
        })
}

#[cfg(not(target_os = "linux"))]
fn probe_landlock() -> Result<(), String> {
    Err("Landlock exists on Linux only".into())
}

/// A [`Confinement`] made ready for every child of a tool: the Landlock ruleset's file
/// descriptor (each child restricts itself to it) and, without network, the
/// [`offline_spawner`] its children start from (they inherit its seccomp filter).
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) landlock: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    pub(crate) spawner: Option<&'static weft_spawn::Spawner>,
}

/// Builds `c`'s ruleset once per tool (and starts the offline spawner when it needs it).
#[cfg(target_os = "linux")]
pub(crate) fn prepare(c: &Confinement) -> Result<Prepared, String> {
    let landlock = match ruleset(c)? {
        None => None,
        Some(created) => Some(std::sync::Arc::new(
            Option::<std::os::fd::OwnedFd>::from(created)
                .ok_or("Landlock: the kernel did not enforce the ruleset")?,
        )),
    };
    let spawner = c.offline.then(offline_spawner).transpose()?;
    Ok(Prepared { landlock, spawner })
}

/// The thread every child without network starts from: it has the seccomp filter of
/// [`NetCut::Filter`], which its children inherit (installing it in each child costs ~55 µs,
/// docs/performance.md). Started once per process.
#[cfg(target_os = "linux")]
fn offline_spawner() -> Result<&'static weft_spawn::Spawner, String> {
    static SPAWNER: OnceLock<Result<weft_spawn::Spawner, String>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let program: Vec<weft_spawn::SockFilter> = offline_filter()?
                .iter()
                .map(|i| weft_spawn::SockFilter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect();
            weft_spawn::Spawner::start(&program).map_err(|e| format!("seccomp: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn prepare(_c: &Confinement) -> Result<Prepared, String> {
    Err("Landlock exists on Linux only".into())
}

/// Restricts the calling thread to `c`, as a child would be: what the probes check on a
/// thread that ends at once.
#[cfg(target_os = "linux")]
fn restrict_thread(c: &Confinement) -> Result<(), String> {
    if let Some(created) = ruleset(c)? {
        let status = created
            .restrict_self()
            .map_err(|e| format!("Landlock: {e}"))?;
        if status.ruleset == landlock::RulesetStatus::NotEnforced {
            return Err("Landlock: the kernel did not enforce the ruleset".into());
        }
    }
    if c.offline {
        seccompiler::apply_filter(offline_filter()?).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn restrict_thread(_rules: &Confinement) -> Result<(), String> {
    Err("Landlock exists on Linux only".into())
}

/// `c`'s Landlock ruleset, created with its rules (`None`: Landlock has nothing to restrict).
#[cfg(target_os = "linux")]
fn ruleset(c: &Confinement) -> Result<Option<landlock::RulesetCreated>, String> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope, path_beneath_rules,
    };
    // V5: files and directories (V1), cross-directory renames and links (V2), truncation
    // (V3), device ioctls (V5). An older kernel enforces what it knows (best effort).
    let abi = ABI::V5;
    let fail = |e: landlock::RulesetError| format!("Landlock: {e}");
    let fs = !c.fs_unrestricted();
    if !(fs || c.connect_ports.is_some() || c.offline) {
        return Ok(None);
    }
    let mut ruleset = Ruleset::default();
    if fs {
        ruleset = ruleset
            .handle_access(AccessFs::from_all(abi))
            .map_err(fail)?;
    }
    if c.connect_ports.is_some() {
        // Checked when the tool was built (`landlock_ports_available`).
        ruleset = ruleset.handle_access(AccessNet::ConnectTcp).map_err(fail)?;
    }
    if c.offline {
        // Never best effort: without the scope the filter leaves abstract sockets open.
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .scope(Scope::AbstractUnixSocket)
            .map_err(fail)?
            .set_compatibility(CompatLevel::BestEffort);
    }
    let mut created = ruleset.create().map_err(fail)?;
    if fs {
        let read: Vec<PathBuf> = match &c.read {
            None => vec![PathBuf::from("/")],
            Some(paths) => paths
                .iter()
                .cloned()
                .chain(RUNTIME_PATHS.iter().map(PathBuf::from))
                .collect(),
        };
        let write: Vec<PathBuf> = c
            .write
            .iter()
            .cloned()
            .chain(WRITABLE_DEVICES.iter().map(PathBuf::from))
            .collect();
        created = created
            .add_rules(path_beneath_rules(&read, AccessFs::from_read(abi)))
            .map_err(fail)?
            .add_rules(path_beneath_rules(&write, AccessFs::from_all(abi)))
            .map_err(fail)?;
    }
    let ports = c.connect_ports.iter().flatten();
    created
        .add_rules(
            ports.map(|p| Ok::<_, landlock::RulesetError>(NetPort::new(*p, AccessNet::ConnectTcp))),
        )
        .map_err(fail)
        .map(Some)
}
