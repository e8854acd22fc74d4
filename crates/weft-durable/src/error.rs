//! The error type of the durability layer, with stable codes (STYLE §5).

/// Why a durable operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DurableError {
    /// The store failed (its own code: `store_corrupt`, `schema_too_new`, `chain_broken`, …).
    #[error("{0}")]
    Store(#[from] weft_store::Error),
    /// The engine refused something (unknown plan, invalid plan, …).
    #[error("[{code}] {err}", code = .0.code(), err = .0)]
    Runtime(#[from] weft_runtime::Error),
    /// A journal record could not be understood.
    #[error("[journal_invalid] {message}")]
    Journal {
        /// Which record and why.
        message: String,
    },
    /// The journal was written by a newer weft.
    #[error(
        "[journal_too_new] the journal has record version {found}, this weft reads up to {supported}; upgrade weft"
    )]
    TooNew {
        /// Version found.
        found: u32,
        /// Highest version this build reads.
        supported: u32,
    },
    /// No such instance (or checkpoint).
    #[error("[not_found] {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// The journal could not be made durable (the store failed during a run).
    #[error("[journal_unavailable] {message}")]
    Unavailable {
        /// What the store said.
        message: String,
    },
    /// Another live `weft` process leases the instance (it drives it; this one may not).
    #[error("[leased_elsewhere] {message}")]
    Leased {
        /// Who holds the lease, until when.
        message: String,
    },
    /// Replay did not reproduce the recorded state.
    #[error("[replay_mismatch] {message}")]
    Mismatch {
        /// Where it diverged.
        message: String,
    },
}

impl DurableError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            DurableError::Store(e) => e.code(),
            DurableError::Runtime(e) => e.code(),
            DurableError::Journal { .. } => "journal_invalid",
            DurableError::TooNew { .. } => "journal_too_new",
            DurableError::NotFound { .. } => "not_found",
            DurableError::Unavailable { .. } => "journal_unavailable",
            DurableError::Mismatch { .. } => "replay_mismatch",
            DurableError::Leased { .. } => "leased_elsewhere",
        }
    }
}
