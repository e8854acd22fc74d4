//! Which language model the CLI talks to: the OpenAI-compatible provider configured from the
//! `WEFT_LLM_*` environment variables, a scripted provider file (offline demos and tests), or
//! nothing, in which case `llm.complete` still exists (so plans using it register and run up
//! to that step) but fails with a message saying what to set.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use weft_llm::{
    ChatProvider, ChatRequest, ChatResponse, Llm, OpenAiConfig, OpenAiProvider, ScriptedProvider,
};

/// What to tell people when no provider is configured.
pub const NOT_CONFIGURED: &str = "no LLM provider is configured: set WEFT_LLM_BASE_URL (e.g. \
     http://127.0.0.1:8080/v1) and optionally WEFT_LLM_MODEL and WEFT_LLM_API_KEY, or use a \
     scripted provider file (--script FILE)";

/// Is `WEFT_LLM_BASE_URL` set (non-empty)?
pub fn env_configured() -> bool {
    std::env::var("WEFT_LLM_BASE_URL").is_ok_and(|v| !v.trim().is_empty())
}

/// The provider from the environment; `Ok(None)` when `WEFT_LLM_BASE_URL` is unset, `Err`
/// when it is set but the rest of the configuration is wrong.
pub fn from_env() -> anyhow::Result<Option<Arc<dyn ChatProvider>>> {
    if !env_configured() {
        return Ok(None);
    }
    let cfg = OpenAiConfig::from_env().context("invalid WEFT_LLM_* configuration")?;
    let provider = OpenAiProvider::new(cfg).context("cannot set up the LLM client")?;
    Ok(Some(Arc::new(provider)))
}

/// A scripted provider read from `path`.
pub fn scripted(path: &Path) -> anyhow::Result<Arc<dyn ChatProvider>> {
    let p = ScriptedProvider::from_file(path)
        .with_context(|| format!("cannot use script `{}`", path.display()))?;
    Ok(Arc::new(p))
}

/// The provider for tools inside running plans: the environment's, else one that refuses.
pub fn for_tools() -> anyhow::Result<Arc<Llm>> {
    let provider = from_env()?.unwrap_or_else(|| Arc::new(Unconfigured));
    Ok(Arc::new(Llm::new(provider)))
}

/// A provider that fails every call with [`NOT_CONFIGURED`].
#[derive(Debug)]
struct Unconfigured;

impl ChatProvider for Unconfigured {
    fn name(&self) -> &str {
        "unconfigured"
    }

    fn chat<'a>(
        &'a self,
        _request: &'a ChatRequest,
    ) -> weft_llm::BoxFuture<'a, weft_llm::Result<ChatResponse>> {
        Box::pin(std::future::ready(Err(weft_llm::Error::Config(
            NOT_CONFIGURED.to_string(),
        ))))
    }
}
