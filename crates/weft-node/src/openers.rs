//! The table of openers: which backend a store or bus URL names, by its scheme.
//!
//! A backend is one entry here plus its crate (`sqlite`, `postgres`, `inproc` today; a NATS
//! bus will be `nats`), never a match in several crates. Each backend parses the rest of
//! its own URL. A bare path (no scheme) is a file of the `file` entry, the embedded SQLite
//! store. Tests and embedders add entries of their own with [`Openers::store`] /
//! [`Openers::bus`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use weft_runtime::{Bus, InProcessBus};
use weft_store::Store;

use crate::Error;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Opens a store from its whole URL.
pub type StoreOpener =
    Arc<dyn Fn(String) -> BoxFuture<Result<Arc<dyn Store>, weft_store::Error>> + Send + Sync>;

/// Opens a bus from its whole URL and the capacity per slow subscriber.
pub type BusOpener = Arc<dyn Fn(&str, usize) -> Result<Arc<dyn Bus>, Error> + Send + Sync>;

/// The scheme of a bare path.
pub const FILE_SCHEME: &str = "file";

/// Openers by scheme. Cheap to clone.
#[derive(Clone)]
pub struct Openers {
    stores: Vec<(&'static str, StoreOpener)>,
    buses: Vec<(&'static str, BusOpener)>,
}

impl std::fmt::Debug for Openers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Openers")
            .field("stores", &self.store_schemes())
            .field("buses", &self.bus_schemes())
            .finish()
    }
}

impl Default for Openers {
    /// The backends this build links: SQLite (bare paths, `sqlite:`), PostgreSQL
    /// (`postgres://`, `postgresql://`) and the in-process bus (`inproc:`).
    fn default() -> Self {
        let sqlite: StoreOpener =
            Arc::new(|url: String| Box::pin(async move { weft_store_sqlite::open(&url).await }));
        let postgres: StoreOpener =
            Arc::new(|url: String| Box::pin(async move { weft_store_postgres::open(&url).await }));
        Openers::empty()
            .store(FILE_SCHEME, Arc::clone(&sqlite))
            .store("sqlite", sqlite)
            .store("postgres", Arc::clone(&postgres))
            .store("postgresql", postgres)
            .bus(
                "inproc",
                Arc::new(|_: &str, capacity: usize| {
                    Ok(Arc::new(InProcessBus::new(capacity)) as Arc<dyn Bus>)
                }),
            )
    }
}

impl Openers {
    /// This table with the built-in SQLite and PostgreSQL entries opening their stores
    /// with the journal key `key` (a keyed chain, `weft_store::Chaining`); other entries
    /// are left alone.
    #[must_use]
    pub fn with_journal_key(self, key: weft_store::ChainKey) -> Self {
        let k = key.clone();
        let sqlite: StoreOpener = Arc::new(move |url: String| {
            let k = k.clone();
            Box::pin(async move { weft_store_sqlite::open_keyed(&url, Some(k)).await })
        });
        let postgres: StoreOpener = Arc::new(move |url: String| {
            let k = key.clone();
            Box::pin(async move { weft_store_postgres::open_keyed(&url, Some(k)).await })
        });
        self.store(FILE_SCHEME, Arc::clone(&sqlite))
            .store("sqlite", sqlite)
            .store("postgres", Arc::clone(&postgres))
            .store("postgresql", postgres)
    }

    /// A table with no entries.
    pub fn empty() -> Self {
        Openers {
            stores: Vec::new(),
            buses: Vec::new(),
        }
    }

    /// This table with a store backend for `scheme` (replacing one of the same scheme).
    #[must_use]
    pub fn store(mut self, scheme: &'static str, opener: StoreOpener) -> Self {
        self.stores.retain(|(s, _)| *s != scheme);
        self.stores.push((scheme, opener));
        self
    }

    /// This table with a bus backend for `scheme` (replacing one of the same scheme).
    #[must_use]
    pub fn bus(mut self, scheme: &'static str, opener: BusOpener) -> Self {
        self.buses.retain(|(s, _)| *s != scheme);
        self.buses.push((scheme, opener));
        self
    }

    /// The store schemes, in table order.
    pub fn store_schemes(&self) -> Vec<&'static str> {
        self.stores.iter().map(|(s, _)| *s).collect()
    }

    /// The bus schemes, in table order.
    pub fn bus_schemes(&self) -> Vec<&'static str> {
        self.buses.iter().map(|(s, _)| *s).collect()
    }

    /// The store opener for `url`, or an error naming the schemes there are.
    pub fn store_opener(&self, url: &str) -> Result<&StoreOpener, Error> {
        let scheme = scheme_of(url);
        self.stores
            .iter()
            .find(|(s, _)| *s == scheme)
            .map(|(_, o)| o)
            .ok_or_else(|| Error::UnknownScheme {
                what: "store",
                scheme: scheme.to_string(),
                known: self.store_schemes().join(", "),
            })
    }

    /// Opens the store `url` names.
    pub async fn open_store(&self, url: &str) -> Result<Arc<dyn Store>, Error> {
        let opener = Arc::clone(self.store_opener(url)?);
        opener(url.to_string()).await.map_err(|e| Error::Store {
            url: url.to_string(),
            source: e,
        })
    }

    /// The bus opener for `url`, or an error naming the schemes there are.
    pub fn bus_opener(&self, url: &str) -> Result<&BusOpener, Error> {
        let scheme = scheme_of(url);
        self.buses
            .iter()
            .find(|(s, _)| *s == scheme)
            .map(|(_, o)| o)
            .ok_or_else(|| Error::UnknownScheme {
                what: "bus",
                scheme: scheme.to_string(),
                known: self.bus_schemes().join(", "),
            })
    }

    /// Opens the bus `url` names.
    pub fn open_bus(&self, url: &str, capacity: usize) -> Result<Arc<dyn Bus>, Error> {
        (self.bus_opener(url)?)(url, capacity)
    }
}

/// The scheme of `url`: what comes before the first `:` when that is a scheme name (a
/// letter, then letters, digits, `+`, `-` or `.`; at least two characters, so a drive
/// letter is not one); otherwise the URL is a bare path ([`FILE_SCHEME`]).
pub fn scheme_of(url: &str) -> &str {
    let url = url.trim();
    match url.split_once(':') {
        Some((scheme, _))
            if scheme.len() >= 2
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) =>
        {
            scheme
        }
        _ => FILE_SCHEME,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_read_from_the_url() {
        assert_eq!(scheme_of("postgres://u@h/db"), "postgres");
        assert_eq!(scheme_of("sqlite:x.db"), "sqlite");
        assert_eq!(scheme_of("sqlite://x.db"), "sqlite");
        assert_eq!(scheme_of(".weft/weft.db"), FILE_SCHEME);
        assert_eq!(scheme_of("/var/lib/weft/weft.db"), FILE_SCHEME);
        assert_eq!(scheme_of("C:thing"), FILE_SCHEME);
        assert_eq!(scheme_of("mysql://x"), "mysql");
        assert_eq!(scheme_of("toy:x"), "toy");
        assert_eq!(scheme_of("inproc:"), "inproc");
    }

    #[test]
    fn an_unknown_scheme_names_the_known_ones() {
        let o = Openers::default();
        let e = o.store_opener("mysql://x").err().expect("refused");
        assert_eq!(e.code(), "invalid_store_url");
        assert!(e.to_string().contains("postgres"), "{e}");
        assert!(o.bus_opener("nats://127.0.0.1:4222").is_err());
        assert!(o.bus_opener("inproc:").is_ok());
    }
}
