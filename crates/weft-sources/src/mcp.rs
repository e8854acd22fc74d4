//! The `mcp` source: the tools of MCP servers (Model Context Protocol), through the official
//! Rust SDK `rmcp`, client side only.
//!
//! An MCP server is not one tool but a set, discovered when weft starts. `weft.toml` names
//! each server once; its tools join the registry as `<name>.<tool>`:
//!
//! ```toml
//! [[tools.mcp]]                    # stdio: weft runs the server as a child process
//! name = "notes"                   # the prefix: `notes.add`, `notes.write_note`, …
//! command = ["python3", "server.py"]
//! env = ["PATH", "NOTES_DIR"]      # passed through; nothing else is inherited
//! cwd = "/srv/notes"               # default: weft's working directory
//! timeout_ms = 30000               # per call, retries included (default 30 s)
//! retry = { max = 2, backoff_ms = 200 }
//!
//! [[tools.mcp]]                    # streamable HTTP: the server runs on its own
//! name = "search"
//! url = "http://127.0.0.1:8931/mcp"
//! ```
//!
//! **Each tool** becomes a [`DeclaredTool`] (timeout, retries with the same idempotency key)
//! whose spec has the server's `description` and `inputSchema` as its args schema, and an
//! effect class read from the tool's annotations: `readOnlyHint: true` is `read`, anything
//! else (`destructiveHint`, or no annotations at all) is `write`; it is idempotent only when
//! `idempotentHint: true`.
//!
//! A stdio server's stderr is weft's (its logs land in weft's log stream); its stdin and
//! stdout carry the protocol.
//!
//! **A call** is one `tools/call` with the args (a JSON object) as its arguments. The result
//! is the structured content when the server sends one, else the text content: one text item
//! is parsed as JSON when it parses and returned as a string when not; several items are a
//! list of those. An `isError` result is a fatal `mcp_tool_error` with the server's text.
//!
//! **Where HTTP calls go.** Only to the server's `url`, which the operator names exactly in
//! `weft.toml` (plans cannot change it): like an exact `allow_hosts` entry of the `http`
//! source, it may be a loopback or private address, the usual place of a local MCP server.
//! The client follows no redirects, so a server cannot send weft's requests elsewhere.
//!
//! **Failures.** A server that cannot be reached at start fails [`discover`] (weft does not
//! start with tools it cannot describe). A server that dies later (its process exits, its
//! HTTP endpoint stops answering) fails the calls in flight and every call until it is back
//! with a retryable `mcp_unavailable` naming the server — at once, never after a timeout —
//! while a background task restarts it (stdio: runs the command again; HTTP: connects
//! again) with exponential backoff (100 ms doubling to 10 s). The tool list is the one read
//! at start; a restarted server is assumed to offer the same tools (a tool it dropped fails
//! its calls with the server's own error).
//!
//! | code | when | retryable |
//! |---|---|---|
//! | `mcp_unavailable` | the server is down or restarting, or the connection broke | yes |
//! | `mcp_tool_error` | the tool answered with `isError` | no |
//! | `mcp_error` | the server refused the request (JSON-RPC error: unknown tool, bad arguments) | no |
//! | `args_invalid` | the args are not a JSON object | no |

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceError, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;
use weft_core::Effect;
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError};

use crate::Error;
use crate::declared::{DeclaredTool, Source};
use crate::def::{RetryDef, SourceDef, ToolDef};

/// One MCP server (`[[tools.mcp]]`): either `command` (stdio) or `url` (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerDef {
    /// The prefix of its tools' names: `<name>.<tool>`.
    pub name: String,
    /// The program and its arguments (no shell), for a server over stdio.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Names of environment variables passed through to the `command`; nothing else is
    /// inherited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The `command`'s working directory (default: weft's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// The endpoint of a server over streamable HTTP (`http://127.0.0.1:8931/mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Whole-call timeout in milliseconds of each of its tools, retries included (default
    /// 30 s).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Retries of retryable failures (`mcp_unavailable`) inside one call, with the same
    /// idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryDef>,
}

fn default_timeout_ms() -> u64 {
    30_000
}

/// How to reach a server, checked.
#[derive(Debug, Clone)]
enum Endpoint {
    Stdio {
        argv: Vec<String>,
        env: Vec<String>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        client: reqwest::Client,
    },
}

impl McpServerDef {
    /// What its tools' calls need: a server over stdio is a child process of weft's, not
    /// confined (anything it reaches is its own); one over HTTP runs elsewhere, and weft
    /// reaches its URL only.
    pub fn needs(&self) -> weft_tools::Needs {
        let time_ms = Some(self.timeout_ms);
        match &self.url {
            Some(url) => weft_tools::Needs {
                network: reqwest::Url::parse(url)
                    .ok()
                    .and_then(|u| Some(format!("{}:{}", u.host_str()?, u.port_or_known_default()?)))
                    .into_iter()
                    .collect(),
                time_ms,
                isolation: weft_tools::Isolation::Remote,
                ..weft_tools::Needs::nothing("mcp")
            },
            None => weft_tools::Needs {
                time_ms,
                isolation: weft_tools::Isolation::Process,
                ..weft_tools::Needs::anything("mcp")
            },
        }
    }

    fn endpoint(&self) -> Result<Endpoint, Error> {
        // Named as its tools are: `<name>.*`.
        let invalid = |message: String| Error::Invalid {
            name: format!("{}.*", self.name),
            message: format!("[[tools.mcp]] {message}"),
        };
        if self.name.trim().is_empty() || self.name.contains(char::is_whitespace) {
            return Err(invalid("name must be a non-empty word".into()));
        }
        if self.timeout_ms == 0 {
            return Err(invalid("timeout_ms must be at least 1".into()));
        }
        match (&self.url, self.command.is_empty()) {
            (Some(_), false) => Err(invalid("set either `command` or `url`, not both".into())),
            (None, true) => Err(invalid("set `command` (stdio) or `url` (HTTP)".into())),
            (None, false) => {
                if let Some(dir) = &self.cwd
                    && !dir.is_dir()
                {
                    return Err(invalid(format!(
                        "cwd `{}` is not a directory",
                        dir.display()
                    )));
                }
                Ok(Endpoint::Stdio {
                    argv: self.command.clone(),
                    env: self.env.clone(),
                    cwd: self.cwd.clone(),
                })
            }
            (Some(url), true) => {
                if !self.env.is_empty() || self.cwd.is_some() {
                    return Err(invalid("`env` and `cwd` apply to `command` only".into()));
                }
                let parsed =
                    reqwest::Url::parse(url).map_err(|e| invalid(format!("url `{url}`: {e}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(invalid(format!("url `{url}` is not http(s)")));
                }
                Ok(Endpoint::Http {
                    url: url.clone(),
                    client: crate::http::build_client(Duration::from_secs(10), None)
                        .map_err(invalid)?,
                })
            }
        }
    }
}

type Client = RunningService<RoleClient, ()>;

/// How long connecting (stdio: starting) a server and its handshake, or listing its tools,
/// may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects to (stdio: starts) the server and completes the MCP handshake, within
/// [`CONNECT_TIMEOUT`].
async fn connect(endpoint: &Endpoint) -> Result<Client, String> {
    tokio::time::timeout(CONNECT_TIMEOUT, connect_now(endpoint))
        .await
        .map_err(|_| format!("no handshake within {CONNECT_TIMEOUT:?}"))?
}

async fn connect_now(endpoint: &Endpoint) -> Result<Client, String> {
    match endpoint {
        Endpoint::Stdio { argv, env, cwd } => {
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]).env_clear();
            for k in env {
                if let Some(v) = std::env::var_os(k) {
                    cmd.env(k, v);
                }
            }
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|e| format!("could not start `{}`: {e}", argv[0]))?;
            ().serve(transport).await.map_err(|e| e.to_string())
        }
        Endpoint::Http { url, client } => {
            let transport = StreamableHttpClientTransport::with_client(
                client.clone(),
                StreamableHttpClientTransportConfig::with_uri(url.as_str()),
            );
            ().serve(transport).await.map_err(|e| e.to_string())
        }
    }
}

/// What a server's tools share with its supervisor: the live connection (none while the
/// server is down) and a way to report a broken one.
struct Shared {
    name: String,
    peer: RwLock<Option<Peer<RoleClient>>>,
    broken: Notify,
}

impl Shared {
    fn set(&self, peer: Option<Peer<RoleClient>>) {
        *self.peer.write().unwrap_or_else(|p| p.into_inner()) = peer;
    }
    fn get(&self) -> Option<Peer<RoleClient>> {
        self.peer.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn unavailable(&self, why: impl std::fmt::Display) -> ToolError {
        ToolError::retryable(
            "mcp_unavailable",
            format!("MCP server `{}` is unavailable: {why}", self.name),
        )
    }
}

/// One server: its shared state and the supervisor task that keeps it connected (aborted,
/// with the connection and the child process, when the last of its tools is dropped).
struct Server {
    shared: Arc<Shared>,
    what: String,
    supervisor: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.supervisor.abort();
    }
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Waits for the connection to end (or be reported broken), then reconnects with
/// exponential backoff, forever.
async fn supervise(shared: Arc<Shared>, endpoint: Endpoint, mut client: Client) {
    loop {
        let token = client.cancellation_token();
        tokio::select! {
            _ = client.waiting() => {}
            _ = shared.broken.notified() => token.cancel(),
        }
        shared.set(None);
        let mut delay = FIRST_BACKOFF;
        client = loop {
            tokio::time::sleep(delay).await;
            match connect(&endpoint).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(server = %shared.name, error = %e, "MCP server restart failed");
                    delay = (delay * 2).min(MAX_BACKOFF);
                }
            }
        };
        shared.set(Some(client.peer().clone()));
        tracing::info!(server = %shared.name, "MCP server reconnected");
    }
}

/// The tools of the servers `defs` name, each as a [`DeclaredTool`] named `<name>.<tool>`:
/// connects to every server (stdio: starts it), lists its tools, and keeps it connected in
/// the background (restarted with backoff when it dies). Must run inside a Tokio runtime,
/// which then hosts the connections. Fails when a definition is wrong, two servers share a
/// name, or a server cannot be reached or listed.
pub async fn discover(defs: &[McpServerDef]) -> Result<Vec<Arc<dyn Tool>>, Error> {
    let mut seen = std::collections::BTreeSet::new();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for def in defs {
        let endpoint = def.endpoint()?;
        if !seen.insert(def.name.as_str()) {
            return Err(Error::Invalid {
                name: format!("{}.*", def.name),
                message: "[[tools.mcp]] two servers have this name".into(),
            });
        }
        let unreachable = |message: String| Error::McpUnavailable {
            server: def.name.clone(),
            message,
        };
        let client = connect(&endpoint)
            .await
            .map_err(|e| unreachable(format!("could not connect: {e}")))?;
        let listed = tokio::time::timeout(CONNECT_TIMEOUT, client.peer().list_all_tools())
            .await
            .map_err(|_| unreachable(format!("tools/list: no answer within {CONNECT_TIMEOUT:?}")))?
            .map_err(|e| unreachable(format!("tools/list failed: {e}")))?;
        let what = match &endpoint {
            Endpoint::Stdio { argv, .. } => format!("mcp stdio {}", argv[0]),
            Endpoint::Http { url, .. } => format!("mcp {url}"),
        };
        let shared = Arc::new(Shared {
            name: def.name.clone(),
            peer: RwLock::new(Some(client.peer().clone())),
            broken: Notify::new(),
        });
        let server = Arc::new(Server {
            shared: Arc::clone(&shared),
            what,
            supervisor: tokio::spawn(supervise(shared, endpoint, client)),
        });
        for t in listed {
            let ann = t.annotations.as_ref();
            let tool_def = ToolDef {
                name: format!("{}.{}", def.name, t.name),
                description: t.description.as_deref().unwrap_or_default().to_string(),
                input_schema: Value::Object((*t.input_schema).clone()),
                output_schema: output_schema(&def.name, &t),
                effect: if ann.and_then(|a| a.read_only_hint) == Some(true) {
                    Effect::Read
                } else {
                    Effect::Write
                },
                idempotent: ann.and_then(|a| a.idempotent_hint) == Some(true),
                timeout_ms: def.timeout_ms,
                retry: def.retry.clone(),
                cost: None,
                // Not used: the source is the server below.
                source: SourceDef::Fixed {
                    result: Value::Null,
                },
            };
            let source = Arc::new(McpTool {
                server: Arc::clone(&server),
                tool: t.name.to_string(),
            });
            tools.push(Arc::new(
                DeclaredTool::published(&tool_def, source)?.with_needs(def.needs()),
            ));
        }
    }
    Ok(tools)
}

/// The output schema `t` publishes, checked against every result as a declared tool's is;
/// one that does not compile is left out (with a warning) rather than losing the server.
fn output_schema(server: &str, t: &rmcp::model::Tool) -> Option<Value> {
    let schema = Value::Object((**t.output_schema.as_ref()?).clone());
    match weft_core::schema::compile(&schema) {
        Ok(_) => Some(schema),
        Err(e) => {
            tracing::warn!(
                server, tool = %t.name,
                "the tool's outputSchema does not compile and is not checked: {e}"
            );
            None
        }
    }
}

/// One tool of one server.
struct McpTool {
    server: Arc<Server>,
    tool: String,
}

impl Source for McpTool {
    fn call(&self, _ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let shared = Arc::clone(&self.server.shared);
        let tool = self.tool.clone();
        Box::pin(async move {
            let arguments = match args {
                Value::Object(m) => Some(m),
                Value::Null => None,
                other => {
                    return Err(ToolError::fatal(
                        "args_invalid",
                        format!("MCP tool arguments must be a JSON object, not {other}"),
                    ));
                }
            };
            let Some(peer) = shared.get() else {
                return Err(shared.unavailable("it is restarting"));
            };
            let mut params = CallToolRequestParams::new(tool.clone());
            params.arguments = arguments;
            match peer.call_tool(params).await {
                Ok(result) => outcome(&shared.name, &tool, result),
                Err(ServiceError::McpError(e)) => Err(ToolError::fatal(
                    "mcp_error",
                    format!(
                        "MCP server `{}` refused `{tool}`: {} (code {})",
                        shared.name, e.message, e.code.0
                    ),
                )),
                Err(e @ ServiceError::Timeout { .. }) => {
                    Err(ToolError::retryable("timeout", e.to_string()))
                }
                Err(e) => {
                    // The connection broke: have the supervisor restart the server.
                    shared.broken.notify_waiters();
                    Err(shared.unavailable(e))
                }
            }
        })
    }

    fn describe(&self) -> String {
        self.server.what.clone()
    }
}

/// The weft result of a `tools/call` result.
fn outcome(server: &str, tool: &str, result: CallToolResult) -> Result<Value, ToolError> {
    let text = |content: &[ContentBlock]| -> Vec<String> {
        content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect()
    };
    if result.is_error == Some(true) {
        let message = text(&result.content).join("\n");
        return Err(ToolError::fatal(
            "mcp_tool_error",
            format!("MCP tool `{server}.{tool}` failed: {message}"),
        ));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    let parse = |s: String| serde_json::from_str(&s).unwrap_or(Value::String(s));
    let mut items: Vec<Value> = text(&result.content).into_iter().map(parse).collect();
    Ok(match items.len() {
        0 => Value::Null,
        1 => items.remove(0),
        _ => Value::Array(items),
    })
}
