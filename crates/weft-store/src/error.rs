//! The one error type of the store crates, with stable codes that the CLI and the HTTP API
//! show to users (STYLE §5).

use crate::chain::ChainError;

/// Result alias for store operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a store operation failed. [`Error::code`] is stable; messages are for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database was written by a newer weft; this build refuses to touch it.
    #[error(
        "[schema_too_new] the store has schema version {found}, this weft supports up to {supported}; upgrade weft"
    )]
    SchemaTooNew {
        /// Version found in the database.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },
    /// The database file is not a database, is truncated or is damaged.
    #[error("[store_corrupt] {message}")]
    Corrupt {
        /// What the database engine said, with the path.
        message: String,
    },
    /// The store location string could not be understood.
    #[error("[invalid_store_url] {message}")]
    InvalidUrl {
        /// Why.
        message: String,
    },
    /// The database could not be reached (connection refused, server restarting).
    #[error("[store_unavailable] {message}")]
    Unavailable {
        /// What failed.
        message: String,
    },
    /// Something that must exist does not (an instance record, a plan version).
    #[error("[not_found] {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// Something that must not exist yet does (an instance id already created).
    #[error("[conflict] {what}")]
    Conflict {
        /// What clashed.
        what: String,
    },
    /// The caller passed something the store cannot take (empty kind, bad page size, …).
    #[error("[invalid_input] {message}")]
    InvalidInput {
        /// Why.
        message: String,
    },
    /// Compaction was asked to drop records that no snapshot covers.
    #[error("[no_snapshot] {message}")]
    NoSnapshot {
        /// Which instance and sequence number.
        message: String,
    },
    /// `verify` found the journal's hash chain broken.
    #[error("[chain_broken] {0}")]
    Chain(ChainError),
    /// The store's journal is keyed (HMAC-SHA256) and it was opened without the key: it
    /// can be read, but not written to, and its chain cannot be checked.
    #[error(
        "[chain_keyed] {message}; hint: give the key with journal.hmac_key_file or WEFT_JOURNAL_HMAC_KEY"
    )]
    ChainKeyed {
        /// What could not be done.
        message: String,
    },
    /// The configured journal key does not fit the store (another key, or a key for a
    /// store whose journal is plain SHA-256).
    #[error("[chain_key_mismatch] {message}")]
    ChainKeyMismatch {
        /// Which way it does not fit.
        message: String,
    },
    /// The store was closed (its writer stopped).
    #[error("[store_closed] the store is closed")]
    Closed,
    /// A fenced append came from a writer whose lease was taken over (or never held): the
    /// instance belongs to another process now, so this one must stop writing it.
    #[error("[lease_lost] {message}")]
    LeaseLost {
        /// Whose lease, and who holds it now.
        message: String,
    },
    /// Any other database or I/O failure (disk full, permission denied, …).
    #[error("[backend] {message}")]
    Backend {
        /// What the database or the OS said.
        message: String,
    },
}

impl Error {
    /// The stable code (`schema_too_new`, `store_corrupt`, `chain_broken`, …).
    pub fn code(&self) -> &'static str {
        match self {
            Error::SchemaTooNew { .. } => "schema_too_new",
            Error::Corrupt { .. } => "store_corrupt",
            Error::InvalidUrl { .. } => "invalid_store_url",
            Error::Unavailable { .. } => "store_unavailable",
            Error::NotFound { .. } => "not_found",
            Error::Conflict { .. } => "conflict",
            Error::InvalidInput { .. } => "invalid_input",
            Error::NoSnapshot { .. } => "no_snapshot",
            Error::Chain(_) => "chain_broken",
            Error::ChainKeyed { .. } => "chain_keyed",
            Error::ChainKeyMismatch { .. } => "chain_key_mismatch",
            Error::Closed => "store_closed",
            Error::Backend { .. } => "backend",
            Error::LeaseLost { .. } => "lease_lost",
        }
    }

    /// Shorthand for [`Error::Backend`].
    pub fn backend(message: impl std::fmt::Display) -> Self {
        Error::Backend {
            message: message.to_string(),
        }
    }

    /// Shorthand for [`Error::InvalidInput`].
    pub fn invalid(message: impl std::fmt::Display) -> Self {
        Error::InvalidInput {
            message: message.to_string(),
        }
    }

    /// The [`Error::LeaseLost`] for `fence` on `instance`, given the lease row found
    /// (`(owner, epoch)`, or none).
    pub fn lease_lost(instance: &str, fence: &crate::Fence, found: Option<(&str, u64)>) -> Self {
        let now = match found {
            Some((owner, epoch)) => format!("`{owner}` holds it at epoch {epoch}"),
            None => "nobody has leased it".to_string(),
        };
        Error::LeaseLost {
            message: format!(
                "append to {instance} refused: `{}` wrote with the lease of epoch {}, but {now}; this writer must stop (another process owns the instance)",
                fence.owner, fence.epoch
            ),
        }
    }

    /// Shorthand for [`Error::NotFound`].
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Error::NotFound {
            what: what.to_string(),
        }
    }
}
