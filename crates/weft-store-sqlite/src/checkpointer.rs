//! A background thread that checkpoints the WAL, so the writer thread's own checkpoint is
//! short.
//!
//! With `wal_autocheckpoint`, the writer thread checkpoints right after the commit that
//! takes the WAL past its limit: it copies every page the WAL holds that the database file
//! does not yet have and fsyncs the file, while every group commit queued behind it waits.
//! Left to the writer alone, that is 10–25 ms several times a second under the server's
//! event load (up to 60 ms; timed in an instrumented writer), which with the journal log's
//! merges made most of the p99 of `POST /v1/events`. This thread runs a `PASSIVE` checkpoint
//! every
//! [`INTERVAL`] on its own connection. A passive checkpoint never blocks the writer or the
//! readers (WAL mode lets it copy pages while commits append new ones), so when the
//! writer's automatic checkpoint comes due, only the pages of the last interval are left
//! to copy. The writer's checkpoint stays: it is the one that lets the next transaction
//! start the WAL file over (SQLite restarts the WAL only when a writer finds it fully
//! copied), which keeps the file's size bounded.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use weft_store::{Error, Result};

/// Time between two background checkpoints.
pub(crate) const INTERVAL: Duration = Duration::from_millis(200);

/// Handle to the thread; dropping it stops the thread (and closes its connection).
pub(crate) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the store at `path` (which exists: the writer created it).
    pub(crate) fn start(path: &Path) -> Result<Self> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(crate::schema::map_err)?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("weft-sqlite-ckpt".into())
            .spawn(move || run(&conn, &flag))
            .map_err(|e| Error::backend(format!("cannot start the SQLite checkpointer: {e}")))?;
        Ok(Checkpointer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(conn: &Connection, stop: &(Mutex<bool>, Condvar)) {
    let (lock, cv) = stop;
    let mut stopped = lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let (guard, _) = cv
            .wait_timeout(stopped, INTERVAL)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stopped = guard;
        if *stopped {
            return;
        }
        drop(stopped);
        // (busy, frames in the WAL, frames copied). A failure (the file damaged, the disk
        // full) is the writer's to report; this thread only tries again next time.
        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0));
        stopped = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
}
