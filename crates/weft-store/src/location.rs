//! Where a store lives, parsed from the `--store` string: `sqlite://path`, a bare path
//! (`.weft/weft.db`), or `postgres://…` / `postgresql://…`.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// Default embedded store, relative to the working directory.
pub const DEFAULT_SQLITE_PATH: &str = ".weft/weft.db";

/// A parsed store location; the binary dispatches on it to a backend's `open`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// An embedded SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection string, as given.
    Postgres(String),
}

impl Location {
    /// Parses a location string. An empty string means the default embedded file.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(Location::Sqlite(PathBuf::from(DEFAULT_SQLITE_PATH)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(Location::Postgres(s.to_string()));
        }
        if let Some(path) = s
            .strip_prefix("sqlite://")
            .or_else(|| s.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(Error::InvalidUrl {
                    message: format!("`{s}` names no file"),
                });
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(Error::InvalidUrl {
                message: format!(
                    "unknown store scheme `{scheme}` (expected sqlite://PATH, a file path or postgres://…)"
                ),
            });
        }
        Ok(Location::Sqlite(PathBuf::from(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(
            Location::parse("sqlite://x/y.db").unwrap(),
            Location::Sqlite("x/y.db".into())
        );
        assert_eq!(
            Location::parse(".weft/weft.db").unwrap(),
            Location::Sqlite(".weft/weft.db".into())
        );
        assert_eq!(
            Location::parse("postgres://u@h/db").unwrap(),
            Location::Postgres("postgres://u@h/db".into())
        );
        assert_eq!(
            Location::parse("").unwrap(),
            Location::Sqlite(DEFAULT_SQLITE_PATH.into())
        );
        assert_eq!(
            Location::parse("mysql://x").unwrap_err().code(),
            "invalid_store_url"
        );
    }
}
