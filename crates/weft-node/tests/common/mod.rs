//! What several node tests share: `Counting`, a link that notes the name of every tool called
//! through it and otherwise is the tool it wraps (same spec, same immediacy, so the engine's
//! fast paths are kept).

#![allow(dead_code, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use serde_json::Value;
use weft_tools::{
    BoxFuture, InlineArgs, InlineContext, Interceptor, Tool, ToolContext, ToolError, ToolSpec,
};

/// The names of the tools called, in order.
pub(crate) type Log = Arc<Mutex<Vec<String>>>;

/// The link under test: logs the tool's name, then calls the tool it wraps the same way.
pub(crate) struct Counting(pub(crate) Log);

struct Counted {
    inner: Arc<dyn Tool>,
    log: Log,
}

impl Counted {
    fn note(&self) {
        self.log
            .lock()
            .unwrap()
            .push(self.inner.spec().name.clone());
    }
}

impl Tool for Counted {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.note();
        self.inner.call(ctx, args)
    }
    fn is_immediate(&self) -> bool {
        self.inner.is_immediate()
    }
    fn waits_for_journal(&self) -> bool {
        self.inner.waits_for_journal()
    }
    fn call_inline(
        &self,
        ctx: InlineContext<'_>,
        args: InlineArgs<'_>,
    ) -> Result<Value, ToolError> {
        self.note();
        self.inner.call_inline(ctx, args)
    }
    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        self.note();
        self.inner.call_now(ctx, args)
    }
}

impl Interceptor for Counting {
    fn describe(&self) -> String {
        "counting".into()
    }
    fn wrap(&self, tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
        Arc::new(Counted {
            inner: tool,
            log: Arc::clone(&self.0),
        })
    }
}
