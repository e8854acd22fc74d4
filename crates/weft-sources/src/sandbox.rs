//! The confinement of a `command` tool's child (its step security profile, enforced): the
//! filesystem through Landlock, the network through a namespace without interfaces. See the
//! `command` module docs for what a definition asks; this module makes it so or says why not.
//!
//! **Landlock without `unsafe`.** A Landlock domain binds the thread that calls
//! `landlock_restrict_self` and everything it starts afterwards. So each sandboxed call starts
//! a fresh thread, restricts that thread, spawns the child from it and lets it end: the child
//! inherits the domain across `exec`, and no other thread of weft (no runtime worker) is ever
//! restricted. No `pre_exec` hook, no code between `fork` and `exec`.
//!
//! **The network namespace** comes from `unshare` (util-linux, like `prlimit`): the child
//! runs `unshare --net -- [prlimit …] program …`, so it starts in a namespace whose only
//! interface, `lo`, is down: no address, not even 127.0.0.1, is reachable, UDP and TCP alike.
//! Not running as root, the namespace needs a user namespace too (`--user`,
//! `--map-current-user` where the kernel lets it write the map under Landlock, else unmapped).
//! Which form works is found once per process by running it.
//!
//! Both are checked when the tool is built: a restriction the definition implies that this
//! machine cannot enforce (no Landlock in the kernel, user namespaces refused) is a build
//! error naming the setting that would lift it, never a run without it.

use std::ffi::OsString;
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

/// The filesystem (and the TCP ports) a sandboxed child gets through Landlock.
#[derive(Debug, Clone)]
pub(crate) struct FsRules {
    /// Readable (and executable) paths; `None` is everything.
    pub(crate) read: Option<Vec<PathBuf>>,
    /// Writable paths.
    pub(crate) write: Vec<PathBuf>,
    /// The only TCP ports the child may connect to; `None` is every port.
    pub(crate) connect_ports: Option<Vec<u16>>,
}

impl FsRules {
    /// Whether these rules restrict nothing (everything readable, `/` writable, any port).
    pub(crate) fn is_unrestricted(&self) -> bool {
        self.read.is_none()
            && self.write.iter().any(|p| p == Path::new("/"))
            && self.connect_ports.is_none()
    }
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

/// Restricts the calling thread (and what it starts from now on) to `rules`. Call it on a
/// thread of its own that ends after spawning ([`spawn_confined`]).
#[cfg(target_os = "linux")]
fn restrict_thread(rules: &FsRules) -> Result<(), String> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, path_beneath_rules,
    };
    // V5: files and directories (V1), cross-directory renames and links (V2), truncation
    // (V3), device ioctls (V5). An older kernel enforces what it knows (best effort).
    let abi = ABI::V5;
    let fail = |e: landlock::RulesetError| format!("Landlock: {e}");
    let read: Vec<PathBuf> = match &rules.read {
        None => vec![PathBuf::from("/")],
        Some(paths) => paths
            .iter()
            .cloned()
            .chain(RUNTIME_PATHS.iter().map(PathBuf::from))
            .collect(),
    };
    let write: Vec<PathBuf> = rules
        .write
        .iter()
        .cloned()
        .chain(WRITABLE_DEVICES.iter().map(PathBuf::from))
        .collect();
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?;
    if rules.connect_ports.is_some() {
        // Checked when the tool was built (`landlock_ports_available`).
        ruleset = ruleset.handle_access(AccessNet::ConnectTcp).map_err(fail)?;
    }
    let ports = rules.connect_ports.iter().flatten();
    let status = ruleset
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(&read, AccessFs::from_read(abi)))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&write, AccessFs::from_all(abi)))
        .map_err(fail)?
        .add_rules(
            ports.map(|p| Ok::<_, landlock::RulesetError>(NetPort::new(*p, AccessNet::ConnectTcp))),
        )
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock: the kernel did not enforce the ruleset".into());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn restrict_thread(_rules: &FsRules) -> Result<(), String> {
    Err("Landlock exists on Linux only".into())
}

/// Spawns `cmd` confined to `rules`, from a thread of its own (see the module docs). The
/// outer error is the confinement's, the inner the spawn's.
pub(crate) async fn spawn_confined(
    mut cmd: tokio::process::Command,
    rules: FsRules,
) -> Result<std::io::Result<tokio::process::Child>, String> {
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("weft-sandbox".into())
        .spawn(move || {
            let result = restrict_thread(&rules).map(|()| {
                let _entered = runtime.enter();
                cmd.spawn()
            });
            let _ = tx.send(result);
        })
        .map_err(|e| format!("starting the sandbox thread: {e}"))?;
    rx.await
        .map_err(|_| "the sandbox thread ended without an answer".to_string())?
}

/// `unshare` and its flags (ending in `--`) that put a child in a network namespace without
/// interfaces here, or why none does. Found once per process, by running them.
pub(crate) fn netns_prefix() -> Result<Vec<OsString>, String> {
    static PREFIX: OnceLock<Result<Vec<OsString>, String>> = OnceLock::new();
    PREFIX.get_or_init(probe_netns).clone()
}

fn probe_netns() -> Result<Vec<OsString>, String> {
    // Also where util-linux installs it: the sandbox should not hang on weft's PATH.
    let unshare = crate::command::find_on_path("unshare")
        .or_else(|| {
            ["/usr/bin/unshare", "/bin/unshare"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
        .ok_or("`unshare` (util-linux) is neither on weft's PATH nor in /usr/bin")?;
    let candidates: [&[&str]; 3] = [
        &["--net"],
        &["--user", "--map-current-user", "--net"],
        &["--user", "--net"],
    ];
    let mut first_error = None;
    for flags in candidates {
        let mut prefix: Vec<OsString> = vec![unshare.clone().into_os_string()];
        prefix.extend(flags.iter().map(OsString::from));
        prefix.push("--".into());
        match probe_one(&prefix, &unshare) {
            Ok(()) => return Ok(prefix),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_default())
}

/// Runs `prefix unshare --version` as a sandboxed call would (under Landlock when this
/// kernel has it, since Landlock decides whether `unshare` may write a user namespace's map).
fn probe_one(prefix: &[OsString], unshare: &Path) -> Result<(), String> {
    let prefix = prefix.to_vec();
    let unshare = unshare.to_path_buf();
    let run = move || -> Result<(), String> {
        if landlock_available().is_ok() {
            restrict_thread(&FsRules {
                read: None,
                write: Vec::new(),
                connect_ports: None,
            })?;
        }
        let (exec, rest) = prefix.split_first().ok_or("empty prefix")?;
        let out = std::process::Command::new(exec)
            .args(rest)
            .arg(&unshare)
            .arg("--version")
            .env_clear()
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("running `unshare`: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`{}` failed: {}",
                prefix
                    .iter()
                    .map(|s| s.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    std::thread::Builder::new()
        .name("weft-sandbox-probe".into())
        .spawn(run)
        .map_err(|e| format!("starting the probe thread: {e}"))?
        .join()
        .map_err(|_| "the probe thread panicked".to_string())?
}
