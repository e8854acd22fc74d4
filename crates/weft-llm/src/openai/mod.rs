//! The OpenAI-compatible chat-completions client (OpenAI, Azure OpenAI, vLLM, Ollama,
//! llama.cpp's server): plain `reqwest` + serde, per-attempt timeouts, and retries with
//! exponential backoff on 429 (honouring `Retry-After`), 5xx, timeouts and connection errors.

mod config;
pub mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use config::OpenAiConfig;
use reqwest::StatusCode;

use crate::chat::{ChatRequest, ChatResponse};
use crate::error::{Error, Result};
use crate::provider::{BoxFuture, ChatProvider};

/// An OpenAI-compatible provider.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    cfg: Arc<OpenAiConfig>,
    client: reqwest::Client,
}

enum Attempt {
    Done(ChatResponse),
    Retry { wait: Duration, last: Error },
    Fail(Error),
}

impl OpenAiProvider {
    /// A client for `cfg`.
    pub fn new(cfg: OpenAiConfig) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS setup failed: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(cfg.connect_timeout)
            .build()
            .map_err(|e| Error::Config(format!("HTTP client setup failed: {e}")))?;
        Ok(OpenAiProvider {
            cfg: Arc::new(cfg),
            client,
        })
    }

    /// A client configured from `WEFT_LLM_*` environment variables.
    pub fn from_env() -> Result<Self> {
        Self::new(OpenAiConfig::from_env()?)
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.cfg
    }

    fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        self.cfg
            .backoff_base
            .saturating_mul(factor)
            .min(self.cfg.backoff_max)
    }

    async fn attempt(&self, body: &serde_json::Value, retry: u32, prefilled: bool) -> Attempt {
        let mut rb = self
            .client
            .post(self.cfg.endpoint())
            .timeout(self.cfg.timeout)
            .json(body);
        if let Some(key) = &self.cfg.api_key {
            rb = if self.cfg.azure_api_version.is_some() {
                rb.header("api-key", key)
            } else {
                rb.bearer_auth(key)
            };
        }
        let attempts = retry + 1;
        let resp = match rb.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Attempt::Retry {
                    wait: self.backoff(retry),
                    last: Error::Timeout {
                        attempts,
                        timeout_ms: self.cfg.timeout.as_millis() as u64,
                    },
                };
            }
            Err(e) => {
                return Attempt::Retry {
                    wait: self.backoff(retry),
                    last: Error::Transport {
                        attempts,
                        message: e.to_string(),
                    },
                };
            }
        };
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) if e.is_timeout() => {
                return Attempt::Retry {
                    wait: self.backoff(retry),
                    last: Error::Timeout {
                        attempts,
                        timeout_ms: self.cfg.timeout.as_millis() as u64,
                    },
                };
            }
            Err(e) => {
                return Attempt::Retry {
                    wait: self.backoff(retry),
                    last: Error::Transport {
                        attempts,
                        message: e.to_string(),
                    },
                };
            }
        };
        if status.is_server_error()
            && String::from_utf8_lossy(&bytes).contains("Failed to parse tool call")
        {
            // Not an outage: the model wrote a broken call; retrying with seed and temperature
            // fixed would give the same answer.
            return Attempt::Fail(Error::MalformedToolCall(wire::snippet(&bytes)));
        }
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            let last = Error::Unavailable {
                status: status.as_u16(),
                attempts,
                body: wire::snippet(&bytes),
            };
            return match retry_after {
                Some(w) if w > self.cfg.backoff_max => Attempt::Fail(last),
                Some(w) => Attempt::Retry { wait: w, last },
                None => Attempt::Retry {
                    wait: self.backoff(retry),
                    last,
                },
            };
        }
        if !status.is_success() {
            return Attempt::Fail(Error::Rejected {
                status: status.as_u16(),
                body: wire::snippet(&bytes),
            });
        }
        match wire::parse_response(&bytes, prefilled) {
            Ok(r) => Attempt::Done(r),
            Err(e) => Attempt::Fail(e),
        }
    }
}

/// `Retry-After` in seconds (or `retry-after-ms`); HTTP dates are ignored (backoff applies).
fn retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = h
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
    {
        return Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    h.get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite())
        .map(|s| Duration::from_secs_f64(s.clamp(0.0, 86_400.0)))
}

impl ChatProvider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.cfg.model
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse>> {
        Box::pin(async move {
            let started = Instant::now();
            let prefill = self.cfg.prefill_tool_call;
            let body = wire::request_body(&self.cfg.model, request, prefill);
            let prefilled = body
                .get("messages")
                .and_then(|m| m.as_array())
                .and_then(|m| m.last())
                .and_then(|m| m.get("content"))
                .and_then(|c| c.as_str())
                == Some(wire::PREFILL);
            let mut retry = 0u32;
            loop {
                match self.attempt(&body, retry, prefilled).await {
                    Attempt::Done(mut r) => {
                        r.latency_ms = started.elapsed().as_millis() as u64;
                        return Ok(r);
                    }
                    Attempt::Fail(e) => return Err(e),
                    Attempt::Retry { wait, last } => {
                        if retry >= self.cfg.max_retries {
                            return Err(last);
                        }
                        tracing::warn!(error = %last, attempt = retry + 1, wait_ms = wait.as_millis() as u64, "Retrying LLM request");
                        tokio::time::sleep(wait).await;
                        retry += 1;
                    }
                }
            }
        })
    }
}
