//! Which language model a weft talks to: the OpenAI-compatible provider `[llm]` configures
//! (file, `WEFT_LLM_*` or flags), or none, in which case `llm.complete` still exists (so plans
//! using it register and run up to that step) but fails with a message saying what to set.

use std::sync::Arc;

use weft_llm::{ChatProvider, ChatRequest, ChatResponse, Llm, OpenAiConfig, OpenAiProvider};

use crate::Error;
use crate::config::LlmConfig;

/// What to tell people when no provider is configured (commands with a `--script` flag add
/// that choice themselves: `weft run` and the server have none).
pub const NOT_CONFIGURED: &str = "no LLM provider is configured: set llm.base_url in weft.toml \
     or WEFT_LLM_BASE_URL (the OpenAI-compatible server's base URL, e.g. \
     http://127.0.0.1:11434/v1 for a local Ollama) and optionally llm.model / WEFT_LLM_MODEL \
     and WEFT_LLM_API_KEY";

/// The provider `[llm]` configures; `Ok(None)` when `base_url` is unset.
pub fn provider(cfg: &LlmConfig) -> Result<Option<Arc<dyn ChatProvider>>, Error> {
    if cfg.base_url.as_deref().is_none_or(|u| u.trim().is_empty()) {
        return Ok(None);
    }
    let c = openai_config(cfg)?;
    let p =
        OpenAiProvider::new(c).map_err(|e| Error::Llm(format!("cannot set up the client: {e}")))?;
    Ok(Some(Arc::new(p)))
}

/// The client configuration `[llm]` describes (the same rules as the `WEFT_LLM_*`
/// variables, which are the keys' environment names).
pub fn openai_config(cfg: &LlmConfig) -> Result<OpenAiConfig, Error> {
    let get = |k: &str| -> Option<String> {
        match k {
            "WEFT_LLM_BASE_URL" => cfg.base_url.clone(),
            "WEFT_LLM_MODEL" => cfg.model.clone(),
            "WEFT_LLM_API_KEY" => cfg.api_key.clone(),
            "WEFT_LLM_AZURE_API_VERSION" => cfg.azure_api_version.clone(),
            "WEFT_LLM_TIMEOUT_MS" => cfg.timeout_ms.map(|v| v.to_string()),
            "WEFT_LLM_MAX_RETRIES" => cfg.max_retries.map(|v| v.to_string()),
            "WEFT_LLM_PREFILL_TOOL_CALL" => cfg.prefill_tool_call.map(|v| v.to_string()),
            _ => None,
        }
    };
    OpenAiConfig::from_lookup(get).map_err(|e| Error::Llm(e.to_string()))
}

/// The model for tools inside running plans (`llm.complete`, `agent.react`): `provider`,
/// else one that fails every call with [`NOT_CONFIGURED`]. With a `store` (and a tokio
/// runtime), every exchange is kept in its transcripts, filed under the instance
/// (`weft transcript`, `GET /v1/instances/{id}/transcripts`).
pub fn for_tools(
    provider: Option<Arc<dyn ChatProvider>>,
    store: Option<&Arc<dyn weft_store::Store>>,
) -> Arc<Llm> {
    let llm = Llm::new(provider.unwrap_or_else(|| Arc::new(Unconfigured)));
    let rt = tokio::runtime::Handle::try_current().ok();
    Arc::new(match (store, rt) {
        (Some(store), Some(rt)) => llm.with_transcripts(Arc::new(weft_llm::StoreTranscript::new(
            Arc::clone(store),
            &rt,
        ))),
        _ => llm,
    })
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
