//! `plan.run`: runs a child instance of another plan (nested tasks) and returns its result.
//!
//! The engine owns instances, so this tool only decides *which* plan (a registered name with
//! an optional version, or an inline document) and hands it to `services.run_child`, whose
//! result (the child's output tokens by event) becomes this step's result.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::support::{invalid, parse_args};
use crate::{BoxFuture, ChildPlan, Tool, ToolContext, ToolError, ToolSpec};

const NAME: &str = "plan.run";

/// The `plan.run` tool.
pub struct PlanRunTool {
    spec: ToolSpec,
}

impl PlanRunTool {
    /// The tool with its built-in spec.
    pub fn new() -> Self {
        PlanRunTool {
            spec: crate::builtin::builtin_spec(NAME),
        }
    }
}

impl Default for PlanRunTool {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default)]
    plan: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    inline: Option<Value>,
    #[serde(default)]
    input: Option<Value>,
}

/// Which child plan the args name.
fn child_plan(args: Value) -> Result<(ChildPlan, Value), ToolError> {
    let a: Args = parse_args(NAME, args)?;
    let plan = match (a.plan, a.inline) {
        (Some(_), Some(_)) => {
            return Err(invalid(NAME, "give either `plan` or `inline`, not both"));
        }
        (None, None) => {
            return Err(invalid(
                NAME,
                "give `plan` (a plan name) or `inline` (a plan)",
            ));
        }
        (Some(name), None) => {
            if name.trim().is_empty() {
                return Err(invalid(NAME, "plan: must not be empty"));
            }
            ChildPlan::Named {
                name,
                version: a.version,
            }
        }
        (None, Some(doc)) => {
            if a.version.is_some() {
                return Err(invalid(NAME, "version: only applies to a named `plan`"));
            }
            if !doc.is_object() {
                return Err(invalid(NAME, "inline: must be a plan object"));
            }
            ChildPlan::Inline(doc)
        }
    };
    let input = a
        .input
        .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
    Ok((plan, input))
}

impl Tool for PlanRunTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        crate::profile::needs(NAME, &crate::ToolsConfig::default())
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        match child_plan(args) {
            Ok((plan, input)) => {
                let services = Arc::clone(&ctx.services);
                services.run_child(&ctx, plan, input)
            }
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}
