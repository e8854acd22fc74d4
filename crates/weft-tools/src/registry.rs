//! The tool registry: the one table of tools that both the validator (through its
//! [`ToolCatalog`] view) and the runtime (to call them) use, and [`TenantTools`], the
//! tools one tenant adds to it (declared through the API).

use std::collections::HashMap;
use std::sync::Arc;

use weft_core::catalog::{ToolCatalog, ToolSpec};

use crate::Tool;

/// Tools by name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: HashMap<String, Arc<dyn Tool>>,
    order: Vec<String>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.order)
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool, replacing one with the same name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let name = tool.spec().name.clone();
        if self.tools.insert(name.clone(), tool).is_none() {
            self.order.push(name);
        }
    }

    /// Removes a tool (e.g. to switch `process.run` off).
    pub fn remove(&mut self, name: &str) {
        self.tools.remove(name);
        self.order.retain(|n| n != name);
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// All tools in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.order.iter().filter_map(|n| self.tools.get(n))
    }

    /// This registry with `extra`'s tools added after its own; a tool of `extra` whose name
    /// this registry already has is left out (the node's tools cannot be shadowed).
    pub fn overlaid(&self, extra: &Registry) -> Registry {
        let mut out = self.clone();
        for t in extra.iter() {
            if !out.tools.contains_key(&t.spec().name) {
                out.register(Arc::clone(t));
            }
        }
        out
    }
}

/// The tools each tenant declared for itself (`PUT /v1/tools/{name}`), beside the node's
/// own: the engine compiles a tenant's plans against the node's tools overlaid with these.
pub trait TenantTools: Send + Sync {
    /// `tenant`'s tools as registered (outside the tool-call chain), or `None` when it has
    /// none. A changed set is a new `Arc`, so callers may cache by pointer.
    fn tools(&self, tenant: &str) -> Option<Arc<Registry>>;
}

impl ToolCatalog for Registry {
    fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|t| t.spec())
    }
    fn names(&self) -> Vec<&str> {
        self.order.iter().map(String::as_str).collect()
    }
}
