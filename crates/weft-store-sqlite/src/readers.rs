//! A small pool of read connections used from blocking threads (SQLite calls block), so
//! reads run in parallel with the writer (WAL) and never wait behind a group commit.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use weft_store::{Error, Result};

use crate::schema::open_reader;

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 8;

/// The pool.
#[derive(Clone)]
pub(crate) struct Readers {
    path: Arc<PathBuf>,
    idle: Arc<Mutex<Vec<Connection>>>,
}

impl Readers {
    /// A pool for the store file at `path`.
    pub(crate) fn new(path: PathBuf) -> Self {
        Readers {
            path: Arc::new(path),
            idle: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Runs `f` on a read connection on tokio's blocking pool.
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let pool = self.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match pool.idle.lock().ok().and_then(|mut v| v.pop()) {
                Some(c) => c,
                None => open_reader(&pool.path)?,
            };
            let out = f(&conn);
            if let Ok(mut idle) = pool.idle.lock()
                && idle.len() < MAX_IDLE
            {
                idle.push(conn);
            }
            out
        })
        .await
        .map_err(|e| Error::backend(format!("SQLite reader task failed: {e}")))?
    }
}
