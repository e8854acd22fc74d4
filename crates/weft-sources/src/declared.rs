//! [`DeclaredTool`]: a source wrapped in the rules every declared tool follows — its spec,
//! a timeout over the whole call, retries of retryable failures with the same idempotency
//! key, and the output schema checked on every result.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use weft_core::ToolSpec;
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError};

use crate::Error;
use crate::def::ToolDef;

/// What performs a declared tool's calls: one implementation per kind of source.
pub trait Source: Send + Sync {
    /// Calls the tool once. Failures the caller may retry are `retryable`.
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>>;

    /// Where calls go, for people (`weft tools`): `http POST https://…`, `command python3`.
    fn describe(&self) -> String;
}

/// A declared tool: its spec and rules around its source.
pub struct DeclaredTool {
    spec: ToolSpec,
    output: Option<Arc<weft_core::schema::Schema>>,
    timeout: Duration,
    retry: Option<(u32, u64)>,
    source: Arc<dyn Source>,
    needs: weft_tools::Needs,
}

impl std::fmt::Debug for DeclaredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeclaredTool")
            .field("name", &self.spec.name)
            .field("source", &self.source.describe())
            .finish_non_exhaustive()
    }
}

impl DeclaredTool {
    /// `def` around `source`. Fails when a schema does not compile.
    pub fn new(def: &ToolDef, source: Arc<dyn Source>) -> Result<Self, Error> {
        Self::build(def, source, true)
    }

    /// [`DeclaredTool::new`] for a definition that is not the user's to fix (an MCP server's):
    /// an input schema that does not compile here (a pattern with a lookaround, say) is kept
    /// as published, for planners to read, and checks nothing on weft's side (the server
    /// checks its own input), with a warning, rather than losing the tool.
    pub fn published(def: &ToolDef, source: Arc<dyn Source>) -> Result<Self, Error> {
        Self::build(def, source, false)
    }

    fn build(def: &ToolDef, source: Arc<dyn Source>, strict: bool) -> Result<Self, Error> {
        let invalid = |message: String| Error::Invalid {
            name: def.name.clone(),
            message,
        };
        if def.name.trim().is_empty() {
            return Err(invalid("the name is empty".into()));
        }
        if let Err(e) = weft_core::schema::compile(&def.input_schema) {
            if strict {
                return Err(invalid(format!("input_schema does not compile: {e}")));
            }
            tracing::warn!(
                tool = %def.name,
                "the tool's input schema does not compile and its args are not checked: {e}"
            );
        }
        let output = def
            .output_schema
            .as_ref()
            .map(|s| {
                weft_core::schema::compile(s)
                    .map(Arc::new)
                    .map_err(|e| invalid(format!("output_schema does not compile: {e}")))
            })
            .transpose()?;
        if def.timeout_ms == 0 {
            return Err(invalid("timeout_ms must be at least 1".into()));
        }
        Ok(DeclaredTool {
            spec: def.spec(),
            output,
            timeout: Duration::from_millis(def.timeout_ms),
            retry: def.retry.as_ref().map(|r| (r.max, r.backoff_ms)),
            source,
            needs: def.needs(),
        })
    }

    /// The same tool stating `needs` instead of what its definition implies (an MCP
    /// server's tools, whose definition is the server's).
    pub fn with_needs(mut self, needs: weft_tools::Needs) -> Self {
        self.needs = weft_tools::Needs {
            time_ms: needs.time_ms.or(self.needs.time_ms),
            ..needs
        };
        self
    }

    /// Where its calls go.
    pub fn source(&self) -> String {
        self.source.describe()
    }
}

impl Tool for DeclaredTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        Some(self.needs.clone())
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let source = Arc::clone(&self.source);
        let output = self.output.clone();
        let (max, backoff) = self.retry.unwrap_or((0, 0));
        let timeout = self.timeout;
        let name = self.spec.name.clone();
        Box::pin(async move {
            let attempts = async {
                let mut delay = backoff;
                let mut n = 0;
                loop {
                    match source.call(ctx.clone(), args.clone()).await {
                        Err(e) if e.retryable && n < max => {
                            n += 1;
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                            delay = delay.saturating_mul(2);
                        }
                        other => return other,
                    }
                }
            };
            let result = tokio::time::timeout(timeout, attempts)
                .await
                .map_err(|_| {
                    ToolError::retryable(
                        "timeout",
                        format!(
                            "tool `{name}` did not answer within {} ms",
                            timeout.as_millis()
                        ),
                    )
                })??;
            if let Some(v) = &output
                && let Err(first) = v.check(&result)
            {
                return Err(ToolError::fatal(
                    "output_invalid",
                    format!(
                        "tool `{name}` returned a result that does not match its output_schema: \
                         {first} (at `{}`)",
                        first.at()
                    ),
                ));
            }
            Ok(result)
        })
    }
}
