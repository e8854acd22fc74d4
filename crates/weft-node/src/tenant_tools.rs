//! The tools tenants declare for themselves through the API (`PUT /v1/tools/{name}`): which
//! definitions an API caller may declare, and [`Toolbox`], the directory of every tenant's
//! tools that the engine compiles that tenant's plans against.
//!
//! The store keeps the definitions with their versions (`Store::put_tool`); the toolbox
//! holds the latest live version of each, built into tools, and rebuilds a tenant's set
//! only when its versions changed, so a process sharing the store with others catches up
//! with [`Toolbox::refresh`].
//!
//! What an API caller may declare is narrower than what `weft.toml` may: whatever runs on
//! the weft host or reads its secrets stays the operator's. So `command` tools are refused,
//! an `http` tool must call a host `tools.http.allow_hosts` lists and may not read the
//! node's environment, and a `worker` tool always asks the tenant's own subject
//! (`weft.tool.<tenant>.<name>`) on the node's NATS server (`tools.worker_url`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;
use weft_sources::{SourceDef, ToolDef};
use weft_store::{Store, ToolRecord};
use weft_tools::{Registry, TenantTools, Tool};

/// Why a definition sent through the API is refused: a stable code, what is wrong and a
/// hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `invalid_tool`, `tool_exists`, `source_not_allowed`, `host_not_allowed` or
    /// `env_not_allowed`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to do instead.
    pub hint: String,
}

fn refuse(code: &'static str, message: impl Into<String>, hint: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
        hint: hint.into(),
    }
}

/// What API-declared tools may reach.
#[derive(Debug, Clone)]
struct Policy {
    /// `tools.http.allow_hosts`.
    allow_hosts: Vec<String>,
    /// `tools.worker_url`.
    worker_url: String,
    /// `tools.api_max_tools`.
    max_tools: usize,
}

/// One tenant's tools: the live records and the registry built from them.
struct Set {
    /// (name, version) of each live tool, by name: what the registry was built from.
    versions: Vec<(String, u32)>,
    records: Vec<ToolRecord>,
    registry: Arc<Registry>,
}

/// Every tenant's declared tools (see the module docs). Cheap to share.
pub struct Toolbox {
    policy: Policy,
    tenants: RwLock<HashMap<String, Arc<Set>>>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Toolbox {
    /// An empty toolbox under `config`'s rules.
    pub fn new(config: &crate::Config) -> Self {
        Toolbox {
            policy: Policy {
                allow_hosts: config.tools.http.allow_hosts.clone(),
                worker_url: config.tools.worker_url.clone(),
                max_tools: config.tools.api_max_tools,
            },
            tenants: RwLock::new(HashMap::new()),
        }
    }

    /// Checks a definition sent through the API for `name` and returns it as it will be
    /// stored (a `worker` source pointed at the node's NATS server). `node` is the node's
    /// own registry: a tenant may not take the name of one of its tools.
    pub fn admit(
        &self,
        name: &str,
        definition: Value,
        node: &Registry,
    ) -> Result<ToolDef, Refusal> {
        let mut def: ToolDef = serde_json::from_value(definition).map_err(|e| {
            refuse(
                "invalid_tool",
                format!("the tool definition is not valid: {e}"),
                "send name, description, input_schema, effect, idempotent, timeout_ms and \
                 source {kind = http | worker | fixed, …}, as in weft.toml's [[tools.declared]]",
            )
        })?;
        if def.name != name {
            return Err(refuse(
                "invalid_tool",
                format!(
                    "the definition names `{}` but the path names `{name}`",
                    def.name
                ),
                "send the definition to /v1/tools/{its name}",
            ));
        }
        if !crate::tokens::valid_name(name) {
            return Err(refuse(
                "invalid_tool",
                format!("`{name}` is not a tool name"),
                "use 1-128 letters, digits, `.`, `_` or `-`, starting with a letter or digit",
            ));
        }
        if node.get(name).is_some() {
            return Err(refuse(
                "tool_exists",
                format!("`{name}` is one of the node's own tools"),
                "choose another name; the node's tools cannot be replaced through the API",
            ));
        }
        match &mut def.source {
            SourceDef::Command(_) => {
                return Err(refuse(
                    "source_not_allowed",
                    "a `command` tool runs a program on the weft host; it cannot be declared \
                     through the API",
                    "declare it in weft.toml ([[tools.declared]]), or serve the function as a \
                     `worker` tool",
                ));
            }
            SourceDef::Http(h) => {
                let host = h
                    .host()
                    .map_err(|m| refuse("invalid_tool", m, "give an http:// or https:// URL"))?;
                weft_builtins::host_allowed(&self.policy.allow_hosts, &host).map_err(|m| {
                    refuse(
                        "host_not_allowed",
                        m,
                        "the operator lists the hosts tools may call in tools.http.allow_hosts",
                    )
                })?;
                // `allow_hosts` lets a name reach loopback, private and metadata addresses:
                // only hosts the operator named exactly (not through `*`) may be listed.
                if let Some(bad) = h
                    .allow_hosts
                    .iter()
                    .find(|a| !self.policy.allow_hosts.iter().any(|o| o == *a))
                {
                    return Err(refuse(
                        "host_not_allowed",
                        format!(
                            "`allow_hosts` names `{bad}`, which tools.http.allow_hosts does not name exactly; it would let the tool reach private or metadata addresses"
                        ),
                        "leave `allow_hosts` out, or ask the operator to list the host exactly in tools.http.allow_hosts",
                    ));
                }
                if h.reads_environment() {
                    return Err(refuse(
                        "env_not_allowed",
                        "`bearer_env` and `env:` headers read the weft host's environment",
                        "put the credential in `headers` (stored with the tool, shown redacted)",
                    ));
                }
            }
            SourceDef::Worker(w) => {
                if w.subject.is_some() {
                    return Err(refuse(
                        "invalid_tool",
                        "a tool declared through the API always uses its tenant's subject \
                         `weft.tool.<tenant>.<name>`",
                        "leave `subject` out and serve that subject",
                    ));
                }
                if w.url != weft_sources::worker::DEFAULT_URL && w.url != self.policy.worker_url {
                    return Err(refuse(
                        "invalid_tool",
                        format!("`{}` is not this node's NATS server", w.url),
                        "leave `url` out: the node's tools.worker_url is used",
                    ));
                }
                w.url = self.policy.worker_url.clone();
            }
            SourceDef::Fixed { .. } => {}
        }
        weft_sources::declare(&def)
            .map_err(|e| refuse("invalid_tool", e.to_string(), "fix the definition"))?;
        Ok(def)
    }

    /// Reads `tenant`'s tools (every tenant's when `None`) from `store` and rebuilds the
    /// sets whose versions changed. A stored definition that no longer builds (the rules
    /// changed since) is left out with a warning.
    pub async fn refresh(
        &self,
        store: &dyn Store,
        tenant: Option<&str>,
    ) -> Result<(), weft_store::Error> {
        let mut latest: HashMap<String, Vec<ToolRecord>> = HashMap::new();
        if let Some(t) = tenant {
            latest.insert(t.to_string(), Vec::new());
        }
        for r in live(store.list_tools(tenant).await?) {
            latest.entry(r.tenant.clone()).or_default().push(r);
        }
        for (tenant, list) in latest {
            let versions: Vec<(String, u32)> =
                list.iter().map(|r| (r.name.clone(), r.version)).collect();
            if self.set(&tenant).is_some_and(|s| s.versions == versions) {
                continue;
            }
            let mut registry = Registry::new();
            for r in &list {
                match self.build(r) {
                    Ok(tool) => registry.register(tool),
                    Err(m) => tracing::warn!(
                        tenant = %r.tenant, tool = %r.name, version = r.version,
                        "a stored tool is left out: {m}"
                    ),
                }
            }
            let set = Arc::new(Set {
                versions,
                records: list,
                registry: Arc::new(registry),
            });
            self.tenants
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tenant, set);
        }
        Ok(())
    }

    fn build(&self, r: &ToolRecord) -> Result<Arc<dyn Tool>, String> {
        let tool = weft_sources::declare(&definition(r)?).map_err(|e| e.to_string())?;
        Ok(Arc::new(tool))
    }

    fn set(&self, tenant: &str) -> Option<Arc<Set>> {
        self.tenants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant)
            .cloned()
    }

    /// Most tools one tenant may declare (`tools.api_max_tools`).
    pub fn max_tools(&self) -> usize {
        self.policy.max_tools
    }

    /// `tenant`'s live tool records (latest version of each), by name, as last refreshed.
    pub fn records(&self, tenant: &str) -> Vec<ToolRecord> {
        self.set(tenant)
            .map(|s| s.records.clone())
            .unwrap_or_default()
    }
}

impl TenantTools for Toolbox {
    fn tools(&self, tenant: &str) -> Option<Arc<Registry>> {
        self.set(tenant)
            .filter(|s| !s.versions.is_empty())
            .map(|s| Arc::clone(&s.registry))
    }
}

/// The latest version of each (tenant, name) of `records` (as `Store::list_tools` orders
/// them), without the deleted ones.
pub fn live(records: Vec<ToolRecord>) -> Vec<ToolRecord> {
    let mut out: Vec<ToolRecord> = Vec::new();
    for r in records {
        match out.last_mut() {
            Some(last) if last.tenant == r.tenant && last.name == r.name => *last = r,
            _ => out.push(r),
        }
    }
    out.retain(|r| r.definition.is_some());
    out
}

/// The definition a stored version holds (a deleted version holds none).
pub fn definition(r: &ToolRecord) -> Result<ToolDef, String> {
    let def = r
        .definition
        .clone()
        .ok_or_else(|| format!("tool `{}` version {} is a deletion", r.name, r.version))?;
    serde_json::from_value(def).map_err(|e| {
        format!(
            "stored tool `{}` version {} is not a definition: {e}",
            r.name, r.version
        )
    })
}

/// `definition` as shown to API callers: header values redacted (they may hold the
/// tenant's credentials).
pub fn redacted(mut definition: Value) -> Value {
    if let Some(headers) = definition
        .pointer_mut("/source/headers")
        .and_then(Value::as_object_mut)
    {
        for v in headers.values_mut() {
            *v = Value::String("<redacted>".into());
        }
    }
    definition
}
