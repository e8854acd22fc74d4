//! The single writer thread and its group commit.
//!
//! SQLite allows one writer at a time, and with `synchronous=FULL` each commit costs an fsync
//! (about 3 ms here). So one thread owns the write connection and drains a queue of jobs into
//! one transaction per batch: a failing job rolls back alone (every job but the first runs in
//! its own savepoint; the first needs none), then the batch commits once, and only then is each job's caller answered.
//! Concurrent instances therefore share one fsync, and no caller learns of a write before it
//! is durable. The thread remembers the chain heads and lease rows it read or wrote
//! (`crate::cache`); every rollback forgets them.

use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::oneshot;
use weft_store::{Error, Result};

use crate::cache;
use crate::schema::map_err;

/// Most jobs committed together (bounds a batch's latency and memory).
const MAX_BATCH: usize = 4_096;

/// Called with the batch's commit outcome.
type Done = Box<dyn FnOnce(Result<()>) + Send>;

/// A queued write: run inside the batch transaction, or failed without running.
trait Job: Send {
    /// Runs; an error means "roll my savepoint back" (the job answers with it).
    fn run(self: Box<Self>, conn: &Connection) -> (Option<Error>, Done);
    /// Answers without running (the batch could not start).
    fn fail(self: Box<Self>, e: Error);
}

struct Call<F, T> {
    f: F,
    reply: oneshot::Sender<Result<T>>,
}

impl<F, T> Job for Call<F, T>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> (Option<Error>, Done) {
        let Call { f, reply } = *self;
        match f(conn) {
            Ok(v) => (
                None,
                Box::new(move |committed: Result<()>| {
                    let _ = reply.send(committed.map(|()| v));
                }),
            ),
            Err(e) => (
                Some(e.clone()),
                Box::new(move |_| {
                    let _ = reply.send(Err(e));
                }),
            ),
        }
    }

    fn fail(self: Box<Self>, e: Error) {
        let _ = self.reply.send(Err(e));
    }
}

/// Counters of the writer's work, for measurements (`fsyncs per record`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed (each one fsync of the WAL).
    pub commits: u64,
    /// Jobs committed.
    pub jobs: u64,
}

/// Handle to the writer thread; dropping it lets the thread finish its queue and exit.
pub struct Writer {
    tx: Option<mpsc::Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
    stats: std::sync::Arc<std::sync::Mutex<WriterStats>>,
}

impl Writer {
    /// Starts the thread that owns `conn`.
    pub fn start(conn: Connection) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Box<dyn Job>>();
        let stats = std::sync::Arc::new(std::sync::Mutex::new(WriterStats::default()));
        let thread_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("weft-sqlite-writer".into())
            .spawn(move || run(conn, rx, thread_stats))
            .map_err(|e| Error::backend(format!("cannot start the SQLite writer: {e}")))?;
        Ok(Writer {
            tx: Some(tx),
            thread: Some(thread),
            stats,
        })
    }

    /// Commit counters so far.
    pub fn stats(&self) -> WriterStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// Queues `f` for a coming batch without waiting for it (housekeeping such as the
    /// journal log's merge): its outcome is not reported; `f` sees its own failure.
    pub fn submit_detached<F>(&self, f: F)
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let (reply, _) = oneshot::channel::<Result<()>>();
        if let Some(tx) = self.tx.as_ref() {
            let _ = tx.send(Box::new(Call { f, reply }));
        }
    }

    /// Runs `f` in the next batch; resolves after that batch committed.
    pub async fn submit<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel::<Result<T>>();
        let job: Box<dyn Job> = Box::new(Call { f, reply });
        let tx = self.tx.as_ref().ok_or(Error::Closed)?;
        tx.send(job).map_err(|_| Error::Closed)?;
        answer.await.map_err(|_| Error::Closed)?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the jobs already queued; joining makes the
        // file fully closed (WAL checkpointed) once the store is dropped.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn exec(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(|_| ())
        .map_err(map_err)
}

fn run(
    conn: Connection,
    rx: mpsc::Receiver<Box<dyn Job>>,
    stats: std::sync::Arc<std::sync::Mutex<WriterStats>>,
) {
    cache::enable();
    let mut batch: Vec<Box<dyn Job>> = Vec::new();
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        let outcome = run_batch(&conn, &mut batch);
        if outcome.is_ok()
            && let Ok(mut s) = stats.lock()
        {
            s.commits += 1;
            s.jobs += n;
        }
    }
}

/// One transaction for the whole batch; every job answered with the commit's outcome.
///
/// Every job but the first runs inside its own savepoint, so a failing job rolls back alone.
/// The first job needs none: when it fails, the transaction holds nothing else, so rolling
/// the whole transaction back and beginning a new one for the rest is the same. That matters
/// because an open savepoint makes SQLite copy every page the job touches to a
/// sub-journal first (a memory buffer spilling to a temporary file): for the group-commit
/// batch of the durable journal, usually alone in its transaction, that copy would be ~15%
/// of the writer's time (measured on W4-concurrent).
fn run_batch(conn: &Connection, batch: &mut Vec<Box<dyn Job>>) -> Result<()> {
    let mut dones: Vec<Done> = Vec::with_capacity(batch.len());
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        for job in batch.drain(..) {
            job.fail(e.clone());
        }
        return Err(e);
    }
    // The write lock is held: nobody else commits until this batch has.
    cache::begin_batch(conn);
    let mut failed: Option<Error> = None;
    let mut first = true;
    for job in batch.drain(..) {
        if let Some(e) = &failed {
            job.fail(e.clone());
            continue;
        }
        if first {
            first = false;
            let (err, done) = job.run(conn);
            dones.push(done);
            if err.is_some() {
                // Nothing but this job's work is in the transaction: drop it and start over
                // (SQLite may have rolled it back already: a full disk does).
                cache::forget_all();
                let rollback = if conn.is_autocommit() {
                    Ok(())
                } else {
                    exec(conn, "ROLLBACK")
                };
                match rollback.and_then(|()| exec(conn, "BEGIN IMMEDIATE")) {
                    Ok(()) => cache::begin_batch(conn),
                    Err(e) => failed = Some(e),
                }
            }
            continue;
        }
        if let Err(e) = exec(conn, "SAVEPOINT job") {
            job.fail(e.clone());
            failed = Some(e);
            continue;
        }
        let (err, done) = job.run(conn);
        if err.is_some() {
            // What the job remembered is rolled back with it.
            cache::forget_all();
        }
        let end = match err {
            None => exec(conn, "RELEASE job"),
            // SQLite rolled the whole transaction back (a full disk does): the earlier
            // jobs' writes are gone too, so the batch fails with this job's error.
            Some(e) if conn.is_autocommit() => Err(e),
            Some(_) => exec(conn, "ROLLBACK TO job").and_then(|()| exec(conn, "RELEASE job")),
        };
        dones.push(done);
        if let Err(e) = end {
            failed = Some(e);
        }
    }
    let outcome = match failed {
        None => exec(conn, "COMMIT"),
        Some(e) => Err(e),
    };
    if outcome.is_err() {
        cache::forget_all();
        let _ = exec(conn, "ROLLBACK");
    }
    for done in dones {
        done(outcome.clone());
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    type Work = Box<dyn FnOnce(&Connection) -> Result<()> + Send>;

    fn insert(c: &Connection, v: i64) -> Result<()> {
        c.execute("INSERT INTO t (v) VALUES (?1)", [v])
            .map(|_| ())
            .map_err(map_err)
    }

    /// What a batch of [`three_jobs`] left: its outcome, the rows that committed, each
    /// job's answer, and the jobs whose chain head the writer's memory still holds.
    type ThreeJobs = (Result<()>, Vec<i64>, Vec<Result<()>>, Vec<i64>);

    /// Runs a batch of three jobs, each inserting its number and remembering a chain head
    /// `j{k}` ([`crate::cache`]), but job `failing` inserts `100 + failing` and then runs
    /// `fail`.
    fn three_jobs(failing: i64, fail: fn(&Connection) -> Result<()>) -> ThreeJobs {
        cache::enable();
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)")
            .unwrap();
        let mut batch: Vec<Box<dyn Job>> = Vec::new();
        let mut answers = Vec::new();
        for k in 0..3_i64 {
            let remember = move || {
                let h = weft_store::Hash([0; 32]);
                cache::set_head(&format!("j{k}"), (k as u64, h, 0, h));
            };
            let work: Work = if k == failing {
                Box::new(move |c| {
                    insert(c, 100 + k)?;
                    remember();
                    fail(c)
                })
            } else {
                Box::new(move |c| {
                    remember();
                    insert(c, k)
                })
            };
            let (reply, answer) = oneshot::channel();
            batch.push(Box::new(Call { f: work, reply }));
            answers.push(answer);
        }
        let outcome = run_batch(&conn, &mut batch);
        assert!(conn.is_autocommit(), "the transaction ended");
        let rows: Vec<i64> = conn
            .prepare("SELECT v FROM t ORDER BY v")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        let answers = answers
            .into_iter()
            .map(|mut a| a.try_recv().expect("answered"))
            .collect();
        let remembered = (0..3)
            .filter(|k| cache::head(&format!("j{k}")).is_some())
            .collect();
        (outcome, rows, answers, remembered)
    }

    /// The writer's memory holds only what committed: rolled-back work is forgotten.
    fn remembered_only_committed(remembered: &[i64], rows: &[i64], failing: i64) {
        assert!(
            remembered.iter().all(|k| rows.contains(k)),
            "failing job {failing}: remembered {remembered:?}, committed {rows:?}"
        );
    }

    /// A batch whose `COMMIT` fails (a deferred foreign key here; an I/O error in
    /// practice) after every job succeeded: nothing is committed and nothing remembered.
    #[test]
    fn a_failed_commit_forgets_what_the_batch_remembered() {
        cache::enable();
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TABLE p (id INTEGER PRIMARY KEY);
             CREATE TABLE c (p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
        let h = weft_store::Hash([0; 32]);
        let work: Work = Box::new(move |c| {
            cache::set_head("x", (1, h, 0, h));
            c.execute("INSERT INTO c VALUES (7)", [])
                .map(|_| ())
                .map_err(map_err)
        });
        let (reply, mut answer) = oneshot::channel();
        let mut batch: Vec<Box<dyn Job>> = vec![Box::new(Call { f: work, reply })];
        assert!(run_batch(&conn, &mut batch).is_err(), "the commit fails");
        assert!(answer.try_recv().expect("answered").is_err());
        assert!(conn.is_autocommit(), "rolled back");
        assert_eq!(cache::head("x"), None);
    }

    #[test]
    fn a_batch_without_failures_commits_and_remembers_everything() {
        let (outcome, rows, answers, remembered) = three_jobs(3, |_| Ok(()));
        outcome.unwrap();
        assert_eq!(rows, vec![0, 1, 2]);
        assert!(answers.iter().all(Result::is_ok));
        assert_eq!(remembered, vec![0, 1, 2]);
    }

    /// A batch of three jobs, job `failing` writing a row and then failing: only its row
    /// is rolled back, the others commit, and each caller gets its own answer. The first
    /// job runs without a savepoint, so position 0 takes the other path.
    #[test]
    fn a_failing_job_rolls_back_alone_wherever_it_is_in_the_batch() {
        for failing in 0..3_i64 {
            let (outcome, rows, answers, remembered) =
                three_jobs(failing, |_| Err(Error::invalid("this job fails")));
            outcome.unwrap();
            let expected: Vec<i64> = (0..3).filter(|k| *k != failing).collect();
            assert_eq!(rows, expected, "failing job {failing}");
            remembered_only_committed(&remembered, &rows, failing);
            for (k, got) in answers.iter().enumerate() {
                assert_eq!(got.is_err(), k as i64 == failing, "job {k}: {got:?}");
            }
        }
    }

    /// A job after which SQLite has rolled the whole transaction back (as a full disk
    /// does): as the first job, it fails alone and the rest commit in a new transaction;
    /// later in the batch, the earlier jobs' writes are gone, so every job of the batch
    /// fails and nothing is committed.
    #[test]
    fn a_job_that_ends_the_transaction_fails_what_it_took_with_it() {
        for failing in 0..3_i64 {
            let (outcome, rows, answers, remembered) = three_jobs(failing, |c| {
                c.execute_batch("ROLLBACK").map_err(map_err)?;
                Err(Error::backend("disk full"))
            });
            let expected: Vec<i64> = if failing == 0 { vec![1, 2] } else { vec![] };
            assert_eq!(rows, expected, "failing job {failing}");
            remembered_only_committed(&remembered, &rows, failing);
            assert_eq!(outcome.is_err(), failing > 0, "failing job {failing}");
            for (k, got) in answers.iter().enumerate() {
                let should_fail = k as i64 == failing || failing > 0;
                assert_eq!(got.is_err(), should_fail, "job {k}: {got:?}");
                if let Err(e) = got {
                    assert!(e.to_string().contains("disk full"), "job {k}: {e}");
                }
            }
        }
    }
}
