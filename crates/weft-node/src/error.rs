//! The assembly point's one error type. Each variant has a stable code ([`Error::code`]).

/// Why a weft could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration has errors (the findings say which).
    #[error("[invalid_config] {0}")]
    Config(String),
    /// No opener for the URL's scheme.
    #[error("[invalid_{what}_url] unknown {what} scheme `{scheme}` (this build has: {known})")]
    UnknownScheme {
        /// `store` or `bus`.
        what: &'static str,
        /// The scheme.
        scheme: String,
        /// The schemes there are.
        known: String,
    },
    /// The store could not be opened.
    #[error("cannot open the store `{url}`: {source}")]
    Store {
        /// Its URL.
        url: String,
        /// Why.
        source: weft_store::Error,
    },
    /// The durable engine could not be built.
    #[error("{0}")]
    Durable(#[from] weft_durable::DurableError),
    /// The LLM provider's configuration is wrong.
    #[error("[invalid_llm] {0}")]
    Llm(String),
    /// The API tokens could not be read or parsed.
    #[error("[invalid_tokens] {0}")]
    Tokens(String),
    /// The NATS planner service could not start (`planner_bus.rs`).
    #[error("[planner_unavailable] {0}")]
    Planner(String),
}

impl Error {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Config(_) => "invalid_config",
            Error::UnknownScheme { what: "bus", .. } => "invalid_bus_url",
            Error::UnknownScheme { .. } => "invalid_store_url",
            Error::Store { source, .. } => source.code(),
            Error::Durable(e) => e.code(),
            Error::Llm(_) => "invalid_llm",
            Error::Tokens(_) => "invalid_tokens",
            Error::Planner(_) => "planner_unavailable",
        }
    }
}
