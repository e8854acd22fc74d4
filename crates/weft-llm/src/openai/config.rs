//! Configuration of the OpenAI-compatible client, from code or from `WEFT_LLM_*` variables,
//! so OpenAI, Azure OpenAI, vLLM, Ollama and llama.cpp's server all work by configuration.

use std::time::Duration;

use crate::error::{Error, Result};

/// How to reach an OpenAI-compatible chat-completions endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Base URL up to and including the version segment, e.g. `http://127.0.0.1:11434/v1` (Ollama)
    /// (Azure: `https://NAME.openai.azure.com/openai/deployments/DEPLOYMENT`).
    pub base_url: String,
    /// Model name sent in the body.
    pub model: String,
    /// API key (`Authorization: Bearer`, or the `api-key` header for Azure).
    pub api_key: Option<String>,
    /// Azure style: adds `?api-version=` and sends the key as `api-key`.
    pub azure_api_version: Option<String>,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Retries after the first attempt, for 429, 5xx, timeouts and connection errors.
    pub max_retries: u32,
    /// First backoff; doubled per retry.
    pub backoff_base: Duration,
    /// Longest backoff, and the longest `Retry-After` honoured (a longer one fails at once).
    pub backoff_max: Duration,
    /// llama.cpp + small-model mode: forced tool calls are sent as `tool_choice: "required"`
    /// with an assistant prefill `<tool_call>\n` and `stop: ["</tool_call>"]`.
    pub prefill_tool_call: bool,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key: None,
            azure_api_version: None,
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            max_retries: 3,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            prefill_tool_call: false,
        }
    }
}

impl OpenAiConfig {
    /// A config for `base_url` and `model` with default timeouts and retries.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            ..Self::default()
        }
    }

    /// Reads `WEFT_LLM_BASE_URL` (required), `WEFT_LLM_MODEL`, `WEFT_LLM_API_KEY`,
    /// `WEFT_LLM_AZURE_API_VERSION`, `WEFT_LLM_TIMEOUT_MS`, `WEFT_LLM_MAX_RETRIES` and
    /// `WEFT_LLM_PREFILL_TOOL_CALL` (`1`/`true`).
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) over any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let base_url = get("WEFT_LLM_BASE_URL")
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                Error::Config("WEFT_LLM_BASE_URL (llm.base_url in weft.toml) is not set: the OpenAI-compatible server's base URL, e.g. http://127.0.0.1:11434/v1 for a local Ollama".into())
            })?;
        let mut c = Self::new(base_url.trim(), "default");
        if let Some(m) = get("WEFT_LLM_MODEL").filter(|s| !s.is_empty()) {
            c.model = m;
        }
        c.api_key = get("WEFT_LLM_API_KEY").filter(|s| !s.is_empty());
        c.azure_api_version = get("WEFT_LLM_AZURE_API_VERSION").filter(|s| !s.is_empty());
        if let Some(t) = get("WEFT_LLM_TIMEOUT_MS") {
            let ms: u64 = t
                .parse()
                .map_err(|_| Error::Config(format!("WEFT_LLM_TIMEOUT_MS={t:?} is not a number")))?;
            c.timeout = Duration::from_millis(ms);
        }
        if let Some(r) = get("WEFT_LLM_MAX_RETRIES") {
            c.max_retries = r.parse().map_err(|_| {
                Error::Config(format!("WEFT_LLM_MAX_RETRIES={r:?} is not a number"))
            })?;
        }
        if let Some(p) = get("WEFT_LLM_PREFILL_TOOL_CALL") {
            c.prefill_tool_call = matches!(p.as_str(), "1" | "true" | "yes" | "on");
        }
        Ok(c)
    }

    /// The chat-completions URL.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        match &self.azure_api_version {
            Some(v) => format!("{base}/chat/completions?api-version={v}"),
            None => format!("{base}/chat/completions"),
        }
    }
}
