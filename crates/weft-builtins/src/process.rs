//! `process.run`: runs an allowlisted command (no shell) with args, stdin and a timeout.
//!
//! Off by default: it is only registered when `process.enabled` is set, and then only runs
//! commands listed exactly in `process.allow`. The child gets a cleared environment (plus a
//! configured passthrough list), is killed on timeout and when the call is dropped, and its
//! output is capped so a chatty command cannot exhaust memory.

use std::process::Stdio;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::builtin::builtin_spec;
use crate::config::ProcessConfig;
use crate::support::{budget, invalid, parse_args, snippet};
use crate::{BoxFuture, Tool, ToolContext, ToolError, ToolSpec};

const NAME: &str = "process.run";

/// The `process.run` tool.
pub struct ProcessTool {
    spec: ToolSpec,
    cfg: Arc<ProcessConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

impl ProcessTool {
    /// The tool with `cfg`'s allowlist and limits (registered only when `cfg.enabled`).
    pub fn new(cfg: &ProcessConfig) -> Self {
        ProcessTool {
            spec: builtin_spec(NAME),
            cfg: Arc::new(cfg.clone()),
        }
    }
}

impl Tool for ProcessTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        crate::profile::needs(
            NAME,
            &crate::ToolsConfig {
                process: (*self.cfg).clone(),
                ..crate::ToolsConfig::default()
            },
        )
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let cfg = Arc::clone(&self.cfg);
        Box::pin(async move { run(&cfg, &ctx, args).await })
    }
}

async fn run(cfg: &ProcessConfig, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    let a: Args = parse_args(NAME, args)?;
    if !cfg.enabled {
        return Err(ToolError::fatal("denied", "process.run is disabled"));
    }
    if !cfg.allow.contains(&a.command) {
        return Err(ToolError::fatal(
            "denied",
            format!(
                "command `{}` is not in process.allow",
                snippet(&a.command, 80)
            ),
        ));
    }
    if a.command.contains('\0') || a.args.iter().any(|s| s.contains('\0')) {
        return Err(invalid(NAME, "command and args must not contain NUL bytes"));
    }
    let mut cmd = Command::new(&a.command);
    cmd.args(&a.args)
        .env_clear()
        .stdin(if a.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for k in &cfg.env_passthrough {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    if let Some(dir) = &cfg.cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|e| {
        ToolError::fatal(
            "spawn_failed",
            format!("starting `{}`: {e}", snippet(&a.command, 80)),
        )
    })?;

    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let cap = cfg.max_output_bytes;
    let input = a.stdin.unwrap_or_default();
    let work = async {
        let feed = async {
            if let Some(mut w) = stdin {
                // A child that exits without reading its stdin is not an error.
                let _ = w.write_all(input.as_bytes()).await;
                drop(w);
            }
        };
        let ((), out, err, status) = tokio::join!(
            feed,
            read_capped(stdout, cap),
            read_capped(stderr, cap),
            child.wait()
        );
        (out, err, status)
    };
    let limit = budget(ctx, a.timeout_ms, cfg.default_timeout_ms);
    let (out, err, status) = match tokio::time::timeout(limit, work).await {
        Ok(r) => r,
        Err(_) => {
            let _ = child.kill().await;
            return Err(ToolError::retryable(
                "timeout",
                format!(
                    "`{}` did not finish within {} ms and was killed",
                    snippet(&a.command, 80),
                    limit.as_millis()
                ),
            ));
        }
    };
    let status = status
        .map_err(|e| ToolError::retryable("io", format!("waiting for `{}`: {e}", a.command)))?;
    let (stdout, stdout_truncated) = out;
    let (stderr, stderr_truncated) = err;
    let Some(code) = status.code() else {
        return Err(ToolError::fatal(
            "process_exit",
            format!("`{}` was killed by a signal ({status})", a.command),
        ));
    };
    if code != 0 {
        return Err(ToolError::fatal(
            "process_exit",
            format!(
                "`{}` exited with status {code}: {}",
                a.command,
                snippet(stderr.trim(), 500)
            ),
        ));
    }
    Ok(serde_json::json!({
        "status": code,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": stdout_truncated,
        "stderr_truncated": stderr_truncated,
    }))
}

/// Reads a pipe to its end, keeping the first `cap` bytes (lossy UTF-8) and dropping the
/// rest so the child never blocks on a full pipe.
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>, cap: usize) -> (String, bool) {
    let Some(mut pipe) = pipe else {
        return (String::new(), false);
    };
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), truncated)
}
