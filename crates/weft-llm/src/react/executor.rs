//! How the ReAct loop runs a tool: the small [`ReactToolExecutor`] trait (the seed's
//! "Cortex-Orch" seam), with an adapter over `weft_tools::Registry` so `agent.react` can use
//! any registered weft tool.

use std::sync::Arc;

use serde_json::Value;
use weft_tools::{Registry, ToolContext};

use super::types::ToolDescriptor;
use crate::provider::BoxFuture;

/// Runs tools for the ReAct loop.
pub trait ReactToolExecutor: Send + Sync {
    /// Calls `tool_id` with `input`; `Err` carries a message the model will see.
    fn call<'a>(&'a self, tool_id: &'a str, input: Value) -> BoxFuture<'a, Result<Value, String>>;

    /// This executor for a loop run by the tool call `ctx` (`agent.react` in a step): its
    /// calls then act as that call's tenant, instance and step. Default: itself.
    fn for_call(&self, ctx: &ToolContext) -> Option<Arc<dyn ReactToolExecutor>> {
        let _ = ctx;
        None
    }
}

/// Runs weft tools from a registry, with a context derived from the caller's.
#[derive(Clone, Debug)]
pub struct RegistryExecutor {
    registry: Arc<Registry>,
    ctx: ToolContext,
}

impl RegistryExecutor {
    /// Tools of `registry`, called with copies of `ctx` (the step name becomes `react:<tool>`).
    pub fn new(registry: Arc<Registry>, ctx: ToolContext) -> Self {
        RegistryExecutor { registry, ctx }
    }

    /// Seed-004 descriptors of the named tools (all registered tools when `names` is empty);
    /// unknown names are skipped.
    pub fn descriptors(&self, names: &[String]) -> Vec<ToolDescriptor> {
        self.registry
            .iter()
            .filter(|t| names.is_empty() || names.contains(&t.spec().name))
            .map(|t| {
                let s = t.spec();
                ToolDescriptor {
                    tool_id: s.name.clone(),
                    description: s.description.clone(),
                    input_schema: s.args_schema.clone(),
                    output_schema: None,
                }
            })
            .collect()
    }
}

impl ReactToolExecutor for RegistryExecutor {
    fn for_call(&self, ctx: &ToolContext) -> Option<Arc<dyn ReactToolExecutor>> {
        Some(Arc::new(RegistryExecutor {
            registry: Arc::clone(&self.registry),
            ctx: ctx.clone(),
        }))
    }

    fn call<'a>(&'a self, tool_id: &'a str, input: Value) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            let tool = self
                .registry
                .get(tool_id)
                .ok_or_else(|| format!("no tool named `{tool_id}`"))?
                .clone();
            let mut ctx = self.ctx.clone();
            ctx.step = Arc::from(format!("{}:react:{tool_id}", self.ctx.step));
            tool.call(ctx, input).await.map_err(|e| e.to_string())
        })
    }
}
