//! Which language model a command talks to: a scripted provider file (`--script`, offline
//! demos and tests), else the one the configuration's `[llm]` section describes
//! (`WEFT_LLM_*`), else an error saying what to set.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use weft_llm::{ChatProvider, ScriptedProvider};

use crate::cmd::Ctx;

/// A scripted provider read from `path`.
pub fn scripted(path: &Path) -> anyhow::Result<Arc<dyn ChatProvider>> {
    let p = ScriptedProvider::from_file(path)
        .with_context(|| format!("cannot use script `{}`", path.display()))?;
    Ok(Arc::new(p))
}

/// The model for a command: `script` when given, else the configured one.
pub fn model(ctx: &Ctx, script: Option<&Path>) -> anyhow::Result<Arc<dyn ChatProvider>> {
    if let Some(path) = script {
        return scripted(path);
    }
    weft_node::llm::provider(&ctx.config.config.llm)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .ok_or_else(|| anyhow::anyhow!("{}", weft_node::llm::NOT_CONFIGURED))
}
