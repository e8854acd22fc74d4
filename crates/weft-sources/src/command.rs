//! The `command` source: each call runs a program (no shell), writes the tool's args as JSON
//! to its stdin and reads one JSON value from its stdout.
//!
//! ```toml
//! [[tools.declared]]
//! name = "summarize"
//! description = "Summarize a text"
//! effect = "pure"
//! timeout_ms = 20000              # the child is killed when the call runs past it
//! input_schema = { type = "object", required = ["text"] }
//! [tools.declared.source]
//! kind = "command"
//! program = "python3"             # a name on weft's PATH, or a path
//! args = ["tools/summarize.py", "--fast"]
//! env = ["PATH", "LANG", "OPENAI_API_KEY"]   # passed through; nothing else is inherited
//! cwd = "/srv/tools"              # default: weft's working directory
//! retry_on_exit = [75]            # exit statuses worth retrying (default: none)
//! max_output_bytes = 1048576      # stdout cap (the default, 1 MiB)
//! memory_mb = 512                 # RLIMIT_AS of the child
//! cpu_seconds = 30                # RLIMIT_CPU of the child
//! network = false                 # the default: no network at all (true: weft's network)
//! # connect_ports = [443]         # with network = true: the only TCP ports it may connect to
//! read_paths = ["/srv/tools", "/srv/data"]   # default: everything is readable
//! write_paths = ["/srv/tools/out"]           # default: cwd (when set) and the temp directory
//! ```
//!
//! **The program** is resolved when the tool is built: a bare name on weft's `PATH`, a path
//! as it is (a relative path against `cwd` when set, else weft's working directory). A
//! program that is not there or not executable is a build error, so `weft config --check`
//! reports it before anything runs.
//!
//! **The child's environment** holds only the variables `env` lists (with their values in
//! weft's environment at the time of the call; missing ones are left out) and
//! `WEFT_INSTANCE`, `WEFT_STEP`, `WEFT_IDEMPOTENCY_KEY` (the same on every retry of a call:
//! use it to deduplicate side effects) and `WEFT_ATTEMPT`. `PATH` is not inherited unless
//! listed.
//!
//! **The answer.** stdout must hold exactly one JSON value (surrounding whitespace allowed);
//! stderr is for people, and its last 512 characters go into failure messages. Failures:
//!
//! | code | when | retried |
//! |---|---|---|
//! | `command_failed` | a non-zero exit status (or death by a signal), with a stderr excerpt | statuses in `retry_on_exit` |
//! | `command_bad_output` | exit 0 but stdout is not one JSON value (with an excerpt) | no |
//! | `command_output_too_large` | stdout over `max_output_bytes`: the child is killed at once | no |
//! | `command_not_found`, `command_spawn_failed` | the program could not be started | no |
//!
//! **Limits.** The child runs in a process group of its own; when the call ends early — the
//! tool's `timeout_ms` passes, the output cap is hit, or the step is abandoned — the whole
//! group is killed (`SIGKILL`), so neither the program nor what it started lives on.
//! stderr is read to its end but only its last 4 KiB are kept. `memory_mb` and
//! `cpu_seconds` become `RLIMIT_AS` and `RLIMIT_CPU` of the child, set by the child itself
//! before it executes the program (`weft-spawn`): no helper program, no extra process.
//!
//! **The sandbox** (the step security profile of a command, enforced; the mechanics are in
//! `sandbox.rs`). A command tool is confined by default, because a demanding operator expects
//! a program an LLM-written plan can call to reach no more than it was given:
//! - *Network*: `network = false` (the default) cuts the child off every network: no host, not
//!   even loopback, TCP and UDP alike, nor abstract Unix sockets outside it. The child joins a
//!   network namespace without interfaces ("Network is unreachable"), made once per process
//!   with a user namespace that maps weft's user and group to themselves (so its ids and file
//!   access are unchanged; as root, it loses the machine-wide capabilities). Where user
//!   namespaces are off, a seccomp filter refuses it any socket but a Unix one ("Permission
//!   denied") and Landlock's scope the abstract sockets (Linux 6.12). A Unix socket at a path
//!   it may see stays reachable either way. `network = true` gives it weft's network,
//!   and `connect_ports = [443]` with it the TCP ports it may connect to (Landlock, Linux
//!   6.7; UDP is not restricted). A command cannot be limited to some hosts (the kernel cannot
//!   tell hosts apart below a proxy): let it call an `http` tool's endpoint, or give it the
//!   network.
//! - *Filesystem* (Landlock): everything is readable unless `read_paths` lists what is
//!   (then the program, `cwd`, the write paths and what programs need to start — `/usr`,
//!   `/bin`, `/lib*`, the loader's cache, `/dev/null` and the random devices — are readable
//!   too); writes go only to `write_paths`, by default `cwd` (when set) and the temporary
//!   directory (`$TMPDIR`, else `/tmp`; not with `read_paths`, since a writable path is
//!   readable too), plus `/dev/null`. `write_paths = []` makes it read-only,
//!   `write_paths = ["/"]` without `read_paths` lifts the restriction. Paths must exist when
//!   the tool is built (relative ones are against `cwd`).
//!
//! Landlock needs Linux 5.13 with `landlock` among its LSMs; the network cut needs user
//! namespaces, or else Linux 6.12 (Landlock ABI 6) and seccomp.
//! A machine that cannot enforce what the definition implies refuses to build the tool
//! (`invalid_tool`, naming the setting that would lift the restriction) — it never runs the
//! command less confined than its profile says.
//! Failures of the confinement at call time are `command_sandbox_failed`. Landlock's TCP rules
//! are not what cuts the network: they cover TCP only.

use std::ffi::{CString, OsString};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use weft_tools::{BoxFuture, ToolContext, ToolError};

use crate::Error;
use crate::declared::Source;
use crate::http::excerpt;
use crate::sandbox::{Confinement, NetCut, Prepared};

/// The `command` source's settings (`source = { kind = "command", … }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandDef {
    /// The program: a name looked up on weft's `PATH`, or a path. Run directly, no shell.
    pub program: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Names of environment variables passed through from weft's environment; nothing else
    /// is inherited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Working directory of the child (default: weft's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Exit statuses after which the call may be retried (default: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_on_exit: Vec<i32>,
    /// Largest stdout accepted, in bytes (default 1 MiB); past it the child is killed.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
    /// Address-space limit of the child in MiB (`RLIMIT_AS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// CPU-time limit of the child in seconds (`RLIMIT_CPU`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Whether the child has weft's network (default `false`: a namespace without
    /// interfaces).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// With `network = true`: the only TCP ports the child may connect to (Landlock, Linux
    /// 6.7 or later; UDP, DNS included, is not restricted). Default: every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_ports: Option<Vec<u16>>,
    /// What the child may read (default: everything); see the module docs for what is
    /// always readable beside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_paths: Option<Vec<PathBuf>>,
    /// Where the child may write (default: `cwd` when set, and the temporary directory
    /// unless `read_paths` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_paths: Option<Vec<PathBuf>>,
}

fn default_max_output_bytes() -> u64 {
    1024 * 1024
}

impl CommandDef {
    /// The paths the child may write, as configured or by default (not resolved). Writable
    /// is readable too, so with `read_paths` the temporary directory (everyone's files) is
    /// not among the defaults.
    fn writable(&self) -> Vec<PathBuf> {
        match &self.write_paths {
            Some(p) => p.clone(),
            None => self
                .cwd
                .iter()
                .cloned()
                .chain(self.read_paths.is_none().then(std::env::temp_dir))
                .collect(),
        }
    }

    /// What its calls need: its network, paths and limits, sandboxed.
    pub fn needs(&self) -> weft_tools::Needs {
        let write = self.writable();
        let read = match &self.read_paths {
            None => vec![PathBuf::from("/")],
            Some(p) => {
                // A program named by path (a bare name comes from PATH, the runtime paths).
                let program = self.program.contains('/').then(|| match &self.cwd {
                    Some(cwd) => cwd.join(&self.program),
                    None => PathBuf::from(&self.program),
                });
                let mut read: Vec<PathBuf> = Vec::new();
                for path in p
                    .iter()
                    .chain(&program)
                    .chain(&self.cwd)
                    .chain(&write)
                    .cloned()
                    .chain(crate::sandbox::RUNTIME_PATHS.iter().map(PathBuf::from))
                {
                    if !read.contains(&path) {
                        read.push(path);
                    }
                }
                read
            }
        };
        weft_tools::Needs {
            network: match (&self.connect_ports, self.network) {
                (_, false) => Vec::new(),
                (None, true) => vec!["*".into()],
                (Some(ports), true) => ports.iter().map(|p| format!("*:{p}")).collect(),
            },
            read,
            write,
            memory_mb: self.memory_mb,
            cpu_seconds: self.cpu_seconds,
            isolation: weft_tools::Isolation::Sandboxed,
            ..weft_tools::Needs::nothing("command")
        }
    }
}

/// Bytes of stderr kept (the end of it).
const STDERR_KEEP: usize = 4096;
/// Length of the excerpts in failure messages, in characters.
const EXCERPT_CHARS: usize = 512;

/// The `command` source, built from a [`CommandDef`].
pub(crate) struct CommandSource {
    inner: Arc<Inner>,
}

struct Inner {
    /// The program (a path).
    exec: CString,
    /// The whole argument vector, `argv[0]` (the path of `exec`) included.
    argv: Vec<CString>,
    env: Vec<String>,
    cwd: Option<CString>,
    /// `RLIMIT_AS` and `RLIMIT_CPU` of the child.
    limits: Vec<weft_spawn::Limit>,
    retry_on_exit: Vec<i32>,
    max_output: usize,
    /// `python3 tool.py`, as configured.
    shown: String,
    /// The child's confinement (its Landlock ruleset; without network, the seccomp spawner).
    confinement: Option<Prepared>,
    /// Without network: the namespaces the child joins ([`NetCut::Namespace`]).
    namespaces: Option<&'static weft_spawn::Namespaces>,
}

impl CommandSource {
    /// The source `def` describes for tool `name`: resolves the program, builds its sandbox.
    pub(crate) fn open(name: &str, def: &CommandDef) -> Result<Self, Error> {
        Self::open_with(name, def, crate::sandbox::net_cut)
    }

    /// [`CommandSource::open`], with `net_cut` saying how to cut the network when the command
    /// has none.
    fn open_with(
        name: &str,
        def: &CommandDef,
        net_cut: impl FnOnce() -> Result<NetCut, String>,
    ) -> Result<Self, Error> {
        let invalid = |message: String| Error::Invalid {
            name: name.to_string(),
            message,
        };
        if def.program.trim().is_empty() {
            return Err(invalid("source.program is empty".into()));
        }
        if def.program.contains('\0') || def.args.iter().any(|a| a.contains('\0')) {
            return Err(invalid(
                "source.program and source.args must not contain NUL".into(),
            ));
        }
        for k in &def.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(invalid(format!(
                    "source.env: `{}` is not a variable name",
                    excerpt(k, 60)
                )));
            }
        }
        if let Some(dir) = &def.cwd
            && !dir.is_dir()
        {
            return Err(invalid(format!(
                "source.cwd `{}` is not a directory",
                dir.display()
            )));
        }
        if def.max_output_bytes == 0 {
            return Err(invalid("source.max_output_bytes must be at least 1".into()));
        }
        let program = resolve_program(&def.program, def.cwd.as_deref()).map_err(invalid)?;

        let mut limits = Vec::new();
        if let Some(mb) = def.memory_mb {
            let bytes = mb
                .checked_mul(1024 * 1024)
                .filter(|b| *b > 0)
                .ok_or_else(|| invalid("source.memory_mb must be between 1 and 2^44".into()))?;
            limits.push(weft_spawn::Limit::AddressSpace(bytes));
        }
        if let Some(s) = def.cpu_seconds {
            if s == 0 {
                return Err(invalid("source.cpu_seconds must be at least 1".into()));
            }
            limits.push(weft_spawn::Limit::CpuSeconds(s));
        }
        let cut = if def.network {
            None
        } else {
            Some(net_cut().map_err(|e| {
                invalid(format!(
                    "source.network = false (the default) cuts the command off the network, \
                     which this machine cannot do: {e}; set `network = true` to give it weft's \
                     network"
                ))
            })?)
        };
        let confinement =
            confinement(def, &program, matches!(cut, Some(NetCut::Filter))).map_err(invalid)?;
        let confinement = confinement
            .map(|c| crate::sandbox::prepare(&c))
            .transpose()
            .map_err(|e| invalid(format!("the command's sandbox cannot be built: {e}")))?;
        let namespaces = match cut {
            Some(NetCut::Namespace(ns)) => Some(ns),
            _ => None,
        };
        let exec = program;
        let exec_c = c_string(exec.as_os_str()).map_err(invalid)?;
        let argv = std::iter::once(Ok(exec_c.clone()))
            .chain(def.args.iter().map(|a| c_string(std::ffi::OsStr::new(a))))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let cwd = def
            .cwd
            .as_ref()
            .map(|d| c_string(d.as_os_str()))
            .transpose()
            .map_err(invalid)?;
        let shown = std::iter::once(def.program.as_str())
            .chain(def.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        Ok(CommandSource {
            inner: Arc::new(Inner {
                exec: exec_c,
                argv,
                env: def.env.clone(),
                cwd,
                limits,
                retry_on_exit: def.retry_on_exit.clone(),
                max_output: usize::try_from(def.max_output_bytes).unwrap_or(usize::MAX),
                shown,
                confinement,
                namespaces,
            }),
        })
    }
}

/// The confinement of `def`'s child (`None`: unrestricted), its paths
/// resolved and checked; `offline`: the network cut there too ([`NetCut::Filter`]).
fn confinement(
    def: &CommandDef,
    program: &Path,
    offline: bool,
) -> Result<Option<Confinement>, String> {
    let resolve = |key: &str, p: &PathBuf| -> Result<PathBuf, String> {
        let full = match (&def.cwd, p.is_absolute()) {
            (Some(cwd), false) => cwd.join(p),
            _ => p.clone(),
        };
        std::fs::canonicalize(&full).map_err(|e| {
            format!(
                "source.{key}: `{}` cannot be used ({e}); the paths must exist when the tool \
                 is built",
                full.display()
            )
        })
    };
    let write = def
        .writable()
        .iter()
        .map(|p| resolve("write_paths", p))
        .collect::<Result<Vec<_>, _>>()?;
    let read = match &def.read_paths {
        None => None,
        Some(paths) => {
            let mut read = paths
                .iter()
                .map(|p| resolve("read_paths", p))
                .collect::<Result<Vec<_>, _>>()?;
            read.push(program.to_path_buf());
            read.extend(def.cwd.iter().cloned());
            Some(read)
        }
    };
    if def.connect_ports.is_some() {
        if !def.network {
            return Err(
                "source.connect_ports limits the network, but the command has none \
                 (`network = false`, the default): set `network = true` with it"
                    .into(),
            );
        }
        crate::sandbox::landlock_ports_available().map_err(|e| {
            format!("source.connect_ports cannot be enforced: {e}; remove it to allow every port")
        })?;
    }
    let rules = Confinement {
        read,
        write,
        connect_ports: def.connect_ports.clone(),
        offline,
    };
    if rules.is_unrestricted() {
        return Ok(None);
    }
    if rules.fs_unrestricted() {
        // Only the network (checked by `net_cut`) or the ports (checked above).
        return Ok(Some(rules));
    }
    crate::sandbox::landlock_available().map_err(|e| {
        format!(
            "the command's filesystem is restricted (read_paths, write_paths; by default it \
             writes only in its cwd and the temporary directory), and {e}; set \
             `write_paths = [\"/\"]` without `read_paths` to run it unrestricted"
        )
    })?;
    Ok(Some(rules))
}

/// `program` as an executable file's path: a bare name from weft's `PATH`, a relative path
/// against `cwd` (or weft's working directory).
fn resolve_program(program: &str, cwd: Option<&Path>) -> Result<PathBuf, String> {
    if !program.contains('/') {
        return find_on_path(program)
            .ok_or_else(|| format!("source.program `{program}` was not found on weft's PATH"));
    }
    let p = Path::new(program);
    let path = if p.is_absolute() {
        p.to_path_buf()
    } else {
        let base = match cwd {
            Some(d) => d.to_path_buf(),
            None => std::env::current_dir()
                .map_err(|e| format!("source.program `{program}`: no working directory: {e}"))?,
        };
        base.join(p)
    };
    if !path.exists() {
        return Err(format!(
            "source.program `{}` does not exist",
            path.display()
        ));
    }
    if !is_executable_file(&path) {
        return Err(format!(
            "source.program `{}` is not an executable file",
            path.display()
        ));
    }
    Ok(path)
}

/// `s` for a system call (paths and arguments were checked for NUL before).
fn c_string(s: &std::ffi::OsStr) -> Result<CString, String> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(s.as_bytes()).map_err(|_| format!("`{}` contains NUL", s.display()))
}

/// The first executable `name` on weft's `PATH` (`/usr/bin:/bin` when it is unset).
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|c| is_executable_file(c))
}

fn is_executable_file(p: &Path) -> bool {
    let Ok(m) = std::fs::metadata(p) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        m.is_file() && m.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        m.is_file()
    }
}

impl Source for CommandSource {
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.run(&ctx, &args).await })
    }

    fn describe(&self) -> String {
        format!("command {}", self.inner.shown)
    }
}

impl Inner {
    async fn run(&self, ctx: &ToolContext, args: &Value) -> Result<Value, ToolError> {
        let input = serde_json::to_vec(args).map_err(|e| {
            ToolError::fatal("args_invalid", format!("command {}: {e}", self.shown))
        })?;
        let mut env: Vec<CString> = Vec::with_capacity(self.env.len() + 4);
        for k in &self.env {
            if let Some(v) = std::env::var_os(k) {
                let mut pair = OsString::from(k);
                pair.push("=");
                pair.push(v);
                // A variable's value cannot hold NUL; one that did is left out.
                env.extend(c_string(&pair).ok());
            }
        }
        for (k, v) in [
            ("WEFT_INSTANCE", &*ctx.instance),
            ("WEFT_STEP", &*ctx.step),
            ("WEFT_IDEMPOTENCY_KEY", &*ctx.idempotency_key),
            ("WEFT_ATTEMPT", &ctx.attempt.to_string()),
        ] {
            env.push(CString::new(format!("{k}={v}")).map_err(|_| {
                ToolError::fatal(
                    "args_invalid",
                    format!("{k} of `{}` contains NUL", self.shown),
                )
            })?);
        }
        let conf = self.confinement.as_ref();
        let landlock = conf.and_then(|c| c.landlock.clone());
        let started = if let Some(spawner) = conf.and_then(|c| c.spawner) {
            spawner.spawn(weft_spawn::OwnedSpec {
                program: self.exec.clone(),
                argv: self.argv.clone(),
                env,
                cwd: self.cwd.clone(),
                limits: self.limits.clone(),
                landlock,
                input: Some(input.clone()),
            })
        } else {
            weft_spawn::spawn(&weft_spawn::Spec {
                program: &self.exec,
                argv: &self.argv,
                env: &env,
                cwd: self.cwd.as_deref(),
                limits: &self.limits,
                landlock: landlock.as_deref().map(AsFd::as_fd),
                namespaces: self.namespaces,
                input: Some(&input),
            })
        };
        let not_started = |e: weft_spawn::Error| {
            let code = match e.stage {
                weft_spawn::Stage::Confine => "command_sandbox_failed",
                weft_spawn::Stage::Exec if e.source.kind() == std::io::ErrorKind::NotFound => {
                    "command_not_found"
                }
                _ => "command_spawn_failed",
            };
            ToolError::fatal(code, format!("starting `{}`: {e}", self.shown))
        };
        let mut child = started.map_err(not_started)?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();

        // The input is in the pipe already, as much as it holds (and stdin closed when that
        // was all): the rest is written here.
        let rest = input.get(child.input_written..).unwrap_or_default();
        let feed = async {
            if let Some(mut w) = stdin {
                // A child that exits without reading its stdin is not an error here; its
                // exit status says what happened.
                if !rest.is_empty() {
                    let _ = w.write_all(rest).await;
                }
                drop(w);
            }
            Ok(())
        };
        let out = read_limited(stdout, self.max_output, &self.shown);
        let err = async { Ok(read_tail(stderr, STDERR_KEEP).await) };
        let wait = async {
            // From the offline spawner the start is known here: the pipes work meanwhile.
            child.started().await.map_err(not_started)?;
            child.wait().await.map_err(|e| {
                ToolError::retryable("command_io", format!("waiting for `{}`: {e}", self.shown))
            })
        };
        let ended = tokio::try_join!(feed, out, err, wait);
        let ((), stdout, stderr, status) = match ended {
            Ok(r) => r,
            Err(e) => {
                child.kill();
                let _ = child.wait().await;
                return Err(e);
            }
        };
        self.answer(status, &stdout, &stderr)
    }

    fn answer(&self, status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Result<Value, ToolError> {
        let err_text = String::from_utf8_lossy(stderr);
        let err_tail = tail(err_text.trim(), EXCERPT_CHARS);
        if !status.success() {
            return Err(match status.code() {
                Some(code) => {
                    let msg = format!("`{}` exited with status {code}: {err_tail}", self.shown);
                    if self.retry_on_exit.contains(&code) {
                        ToolError::retryable("command_failed", msg)
                    } else {
                        ToolError::fatal("command_failed", msg)
                    }
                }
                None => ToolError::fatal(
                    "command_failed",
                    format!("`{}` was killed ({status}): {err_tail}", self.shown),
                ),
            });
        }
        serde_json::from_slice(stdout).map_err(|e| {
            let text = String::from_utf8_lossy(stdout);
            ToolError::fatal(
                "command_bad_output",
                format!(
                    "`{}` did not print one JSON value ({e}): {}",
                    self.shown,
                    excerpt(text.trim(), EXCERPT_CHARS)
                ),
            )
        })
    }
}

/// Reads `pipe` to its end; more than `max` bytes is a fatal `command_output_too_large`
/// (the caller kills the child). Reads straight into the result: no zeroed buffer per call.
async fn read_limited<R: AsyncRead + Unpin>(
    pipe: Option<R>,
    max: usize,
    shown: &str,
) -> Result<Vec<u8>, ToolError> {
    let Some(pipe) = pipe else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    pipe.take(limit).read_to_end(&mut out).await.map_err(|e| {
        ToolError::retryable(
            "command_io",
            format!("reading the output of `{shown}`: {e}"),
        )
    })?;
    if out.len() > max {
        return Err(ToolError::fatal(
            "command_output_too_large",
            format!(
                "`{shown}` printed more than {max} bytes (source.max_output_bytes) and was \
                 killed"
            ),
        ));
    }
    Ok(out)
}

/// Reads `pipe` to its end, keeping its last `keep` bytes (so the child never blocks on a
/// full pipe and a flood costs no memory). Reads into the kept bytes' spare room, twice
/// `keep` at most: no zeroed buffer per call.
async fn read_tail<R: AsyncRead + Unpin>(pipe: Option<R>, keep: usize) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let room = keep.max(1) * 2;
    let mut kept: Vec<u8> = Vec::with_capacity(room);
    loop {
        if kept.len() > keep {
            let cut = kept.len() - keep;
            kept.drain(..cut);
        }
        let spare = room - kept.len();
        match (&mut pipe).take(spare as u64).read_buf(&mut kept).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    if kept.len() > keep {
        let cut = kept.len() - keep;
        kept.drain(..cut);
    }
    kept
}

/// At most `max` characters of the end of `s`: `…` and the last `max - 1` when longer.
fn tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let mut out = String::from("…");
    out.extend(s.chars().skip(n - max.saturating_sub(1)));
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weft_tools::ToolContext;

    use super::{CommandDef, CommandSource, NetCut};
    use crate::Source;

    /// Tries a TCP connection, a UDP datagram and an abstract Unix socket, each to the peer
    /// the args name; says of each "reached" or the system's error.
    const REACH: &str = r#"
import json, socket, sys
a = json.load(sys.stdin)
def tcp():
    socket.create_connection(("127.0.0.1", a["tcp"]), timeout=5).close()
def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"x", ("127.0.0.1", a["udp"]))
def abstract():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("\0" + a["abstract"])
out = {}
for name, f in [("tcp", tcp), ("udp", udp), ("abstract", abstract)]:
    try:
        f()
        out[name] = "reached"
    except OSError as e:
        out[name] = e.strerror
print(json.dumps(out))
"#;

    /// stderr keeps exactly its last bytes however much comes; stdout is refused one byte
    /// over its cap and kept whole at it.
    #[tokio::test]
    async fn output_is_read_whole_up_to_its_cap_and_stderr_to_its_tail() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for keep in [1, 7, 4096, 99_999, 100_000, 200_000] {
            let kept = super::read_tail(Some(&data[..]), keep).await;
            assert_eq!(kept, data[data.len().saturating_sub(keep)..], "keep {keep}");
        }
        let whole = super::read_limited(Some(&data[..]), data.len(), "t").await;
        assert_eq!(whole.unwrap(), data);
        let over = super::read_limited(Some(&data[..]), data.len() - 1, "t").await;
        assert_eq!(over.unwrap_err().code, "command_output_too_large");
        assert!(
            super::read_limited(Some(&b""[..]), 0, "t")
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// Both ways of cutting the network refuse TCP, UDP and abstract Unix sockets, each with
    /// its own errors: the namespace (what `open` picks here) and the filter that stands in for
    /// it where user namespaces are off. Given the network, the same program reaches all three.
    #[tokio::test]
    async fn the_namespace_and_the_filter_both_cut_the_network() {
        use std::os::linux::net::SocketAddrExt;
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 is on the machine");
        let python = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let name = format!("weft-command-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let unix = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        unix.set_nonblocking(true).unwrap();
        // What reached the three peers since last asked.
        let arrived = || {
            let mut buf = [0u8; 8];
            let n = |mut f: Box<dyn FnMut() -> bool + '_>| (0..).take_while(|_| f()).count();
            [
                n(Box::new(|| tcp.accept().is_ok())),
                n(Box::new(|| udp.recv(&mut buf).is_ok())),
                n(Box::new(|| unix.accept().is_ok())),
            ]
        };
        let args = json!({"tcp": tcp.local_addr().unwrap().port(),
            "udp": udp.local_addr().unwrap().port(), "abstract": name});
        let def = |network: bool| -> CommandDef {
            serde_json::from_value(json!({"program": &python, "args": ["-c", REACH],
                "network": network}))
            .unwrap()
        };
        let namespace = || crate::sandbox::namespaces().map(NetCut::Namespace);
        assert!(
            matches!(crate::sandbox::net_cut(), Ok(NetCut::Namespace(_))),
            "this machine makes user namespaces, so the namespace is the default"
        );
        let unreachable = "Network is unreachable";
        let cuts = [
            (
                "namespace",
                namespace().unwrap(),
                // The machine's abstract sockets are not in the namespace.
                [unreachable, unreachable, "Connection refused"],
            ),
            (
                "filter",
                NetCut::Filter,
                // Landlock's scope refuses the abstract socket.
                [
                    "Permission denied",
                    "Permission denied",
                    "Operation not permitted",
                ],
            ),
        ];
        for (cut_name, cut, errors) in cuts {
            let tool = CommandSource::open_with("t", &def(false), || Ok(cut)).unwrap();
            let conf = tool.inner.confinement.as_ref();
            assert_eq!(
                (
                    tool.inner.namespaces.is_some(),
                    conf.is_some_and(|c| c.spawner.is_some())
                ),
                (cut_name == "namespace", cut_name == "filter"),
                "{cut_name}: what the child starts with"
            );
            let got = tool
                .call(ToolContext::detached("t"), args.clone())
                .await
                .unwrap();
            assert_eq!(
                got,
                json!({"tcp": errors[0], "udp": errors[1], "abstract": errors[2]}),
                "{cut_name}"
            );
            assert_eq!(arrived(), [0, 0, 0], "{cut_name}: nothing arrived");
        }

        // The same program with the network reaches all three: the refusals above are the
        // cuts'.
        let open = CommandSource::open_with("t", &def(true), namespace).unwrap();
        assert_eq!(
            open.call(ToolContext::detached("t"), args.clone())
                .await
                .unwrap(),
            json!({"tcp": "reached", "udp": "reached", "abstract": "reached"})
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(arrived(), [1, 1, 1], "each peer reached once");
    }
}
