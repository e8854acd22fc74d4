//! The writer thread's memory of chain heads and lease fences.
//!
//! Without it, every fenced group commit reads each of its instances' lease row (the fence
//! check) and chain-head row (where the chain goes on) with a point query: under
//! W4-concurrent those two reads are ~16% of the writer thread (`perf`), and the writer
//! thread is what bounds that workload. Both rows change only through the writer's
//! own statements, so the writer can remember what it last read or wrote and skip the read.
//!
//! What keeps the memory true:
//! - it exists only on the writer thread (a thread-local, [`enable`]d when the thread
//!   starts; on any other thread every call here is a miss or does nothing);
//! - every statement that writes a remembered row updates or forgets its entry
//!   (`journal_log::append`, `journal_log::append_many`, `journal_log::truncate_before`, the lease
//!   functions of `state`);
//! - a rollback of any kind (a job's savepoint, the first job's transaction, a failed commit)
//!   forgets everything, since the entries of the rolled-back work would be wrong
//!   ([`forget_all`], called by the writer);
//! - another connection's commit (another process on the same file, a test editing it)
//!   changes `PRAGMA data_version`, which the writer reads at the start of every batch,
//!   after taking the write lock: a change forgets everything ([`begin_batch`]);
//! - it forgets everything past [`MAX_ENTRIES`] instances, so its memory stays bounded.

use std::cell::RefCell;
use std::collections::HashMap;

use rusqlite::Connection;
use weft_store::Hash;

use crate::schema::map_err;

/// Instances remembered before the memory starts over (each entry is ~200 bytes).
pub(crate) const MAX_ENTRIES: usize = 100_000;

/// A chain-head row: (head_seq, head_hash, base_seq, base_hash).
pub(crate) type Head = (u64, Hash, u64, Hash);

/// Newest (seq, hash) per instance among one log partition's records.
pub(crate) type LogHeads = HashMap<String, (u64, Hash), foldhash::fast::RandomState>;

#[derive(Default)]
struct Memory {
    heads: HashMap<String, Head, foldhash::fast::RandomState>,
    /// Per log partition, once read: the newest record of each instance in it. Appends
    /// write chain heads to `chain_heads` only when the log is merged (see `journal`), so
    /// an instance's head is the newer of its `chain_heads` row and this. Kept up to date
    /// by every append and merge, so it survives [`MAX_ENTRIES`]; bounded by the log's size.
    log_heads: [Option<LogHeads>; crate::journal_log::LOG_PARTS],
    /// Lease owner and epoch.
    fences: HashMap<String, (String, u64), foldhash::fast::RandomState>,
    /// `PRAGMA data_version` when the last batch began.
    data_version: Option<i64>,
}

thread_local! {
    static MEMORY: RefCell<Option<Memory>> = const { RefCell::new(None) };
}

fn with<T>(f: impl FnOnce(&mut Memory) -> T) -> Option<T> {
    MEMORY.with(|m| m.borrow_mut().as_mut().map(f))
}

/// Turns the memory on for this thread (the writer thread, once).
pub(crate) fn enable() {
    MEMORY.with(|m| *m.borrow_mut() = Some(Memory::default()));
}

/// At the start of a batch, with the write lock held: forgets everything if another
/// connection committed since the last batch began. An error reading the version also
/// forgets everything (and is otherwise ignored: the batch's statements will report it).
pub(crate) fn begin_batch(conn: &Connection) {
    if with(|_| ()).is_none() {
        return;
    }
    let version = conn
        .prepare_cached("PRAGMA data_version")
        .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
        .map_err(map_err)
        .ok();
    with(|m| {
        if version.is_none() || m.data_version != version {
            m.heads.clear();
            m.fences.clear();
            m.log_heads = Default::default();
        }
        m.data_version = version;
    });
}

/// Forgets everything (after a rollback).
pub(crate) fn forget_all() {
    with(|m| {
        m.heads.clear();
        m.fences.clear();
        m.log_heads = Default::default();
    });
}

/// `Some(newest)` when log partition `part`'s heads are remembered (`newest`: `instance`'s
/// newest record in it, if any); `None` when they are not (or the memory is off).
pub(crate) fn log_head(part: usize, instance: &str) -> Option<Option<(u64, Hash)>> {
    with(|m| {
        m.log_heads
            .get(part)?
            .as_ref()
            .map(|h| h.get(instance).copied())
    })
    .flatten()
}

/// Remembers log partition `part`'s heads, as just read.
pub(crate) fn set_log_heads(part: usize, heads: LogHeads) {
    with(|m| {
        if let Some(slot) = m.log_heads.get_mut(part) {
            *slot = Some(heads);
        }
    });
}

/// An append put `instance`'s records up to `seq` (hashed `hash`) into partition `part`.
pub(crate) fn note_log_head(part: usize, instance: &str, seq: u64, hash: Hash) {
    with(|m| {
        if let Some(Some(h)) = m.log_heads.get_mut(part) {
            keep_newest(h, instance, seq, hash);
        }
    });
}

/// Records `(seq, hash)` as `instance`'s head in `heads` unless it has a newer one.
pub(crate) fn keep_newest(heads: &mut LogHeads, instance: &str, seq: u64, hash: Hash) {
    match heads.get_mut(instance) {
        Some(v) if seq > v.0 => *v = (seq, hash),
        Some(_) => {}
        None => {
            heads.insert(instance.to_string(), (seq, hash));
        }
    }
}

/// Log partition `part` was merged: it is empty, its heads are in `chain_heads`.
pub(crate) fn log_merged(part: usize) {
    with(|m| {
        if let Some(slot) = m.log_heads.get_mut(part) {
            *slot = Some(LogHeads::default());
        }
    });
}

/// The remembered chain head of `instance`.
pub(crate) fn head(instance: &str) -> Option<Head> {
    with(|m| m.heads.get(instance).copied()).flatten()
}

/// Remembers `instance`'s chain head as just read or written.
pub(crate) fn set_head(instance: &str, head: Head) {
    with(|m| {
        if let Some(h) = m.heads.get_mut(instance) {
            *h = head;
            return;
        }
        if m.heads.len() >= MAX_ENTRIES {
            m.heads.clear();
        }
        m.heads.insert(instance.to_string(), head);
    });
}

/// Forgets `instance`'s chain head.
pub(crate) fn forget_head(instance: &str) {
    with(|m| m.heads.remove(instance));
}

/// Whether the remembered lease of `instance` is held by `owner` at `epoch`: `None` when
/// nothing is remembered.
pub(crate) fn fence_matches(instance: &str, owner: &str, epoch: u64) -> Option<bool> {
    with(|m| {
        m.fences
            .get(instance)
            .map(|(o, e)| o == owner && *e == epoch)
    })
    .flatten()
}

/// Whether the remembered lease of `instance` is held by `owner` (any epoch): `None` when
/// nothing is remembered.
pub(crate) fn owned_by(instance: &str, owner: &str) -> Option<bool> {
    with(|m| m.fences.get(instance).map(|(o, _)| o == owner)).flatten()
}

/// Remembers `instance`'s lease owner and epoch as just read or written.
pub(crate) fn set_fence(instance: &str, owner: &str, epoch: u64) {
    with(|m| {
        if let Some(f) = m.fences.get_mut(instance) {
            if f.0 != owner {
                f.0 = owner.to_string();
            }
            f.1 = epoch;
            return;
        }
        if m.fences.len() >= MAX_ENTRIES {
            m.fences.clear();
        }
        m.fences
            .insert(instance.to_string(), (owner.to_string(), epoch));
    });
}

/// Forgets `instance`'s lease.
pub(crate) fn forget_fence(instance: &str) {
    with(|m| m.fences.remove(instance));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_at(seq: u64) -> Head {
        (seq, Hash([seq as u8; 32]), 0, Hash([0; 32]))
    }

    /// Runs `f` on a fresh thread (the memory is per thread), turned on there if `enabled`.
    fn on_thread(enabled: bool, f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(move || {
            if enabled {
                enable();
            }
            f();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn off_threads_that_did_not_enable_it() {
        on_thread(false, || {
            set_head("a", head_at(1));
            set_fence("a", "me", 1);
            assert_eq!(head("a"), None);
            assert_eq!(fence_matches("a", "me", 1), None);
        });
    }

    #[test]
    fn remembers_updates_and_forgets() {
        on_thread(true, || {
            set_head("a", head_at(1));
            set_head("a", head_at(2));
            assert_eq!(head("a"), Some(head_at(2)));
            forget_head("a");
            assert_eq!(head("a"), None);

            set_fence("a", "me", 1);
            assert_eq!(fence_matches("a", "me", 1), Some(true));
            assert_eq!(fence_matches("a", "me", 2), Some(false));
            assert_eq!(fence_matches("a", "you", 1), Some(false));
            set_fence("a", "you", 2);
            assert_eq!(fence_matches("a", "you", 2), Some(true));
            forget_fence("a");
            assert_eq!(fence_matches("a", "you", 2), None);

            set_head("b", head_at(3));
            set_fence("b", "me", 1);
            forget_all();
            assert_eq!(head("b"), None);
            assert_eq!(fence_matches("b", "me", 1), None);
        });
    }

    #[test]
    fn another_connections_commit_forgets_everything() {
        let dir = std::env::temp_dir().join(format!("weft-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("v.db");
        let mine = Connection::open(&path).unwrap();
        mine.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (x)")
            .unwrap();
        let other = Connection::open(&path).unwrap();
        on_thread(true, move || {
            {
                begin_batch(&mine);
                set_head("a", head_at(1));
                // Our own commit keeps the memory.
                mine.execute("INSERT INTO t VALUES (1)", []).unwrap();
                begin_batch(&mine);
                assert_eq!(head("a"), Some(head_at(1)));
                // Another connection's does not.
                other.execute("INSERT INTO t VALUES (2)", []).unwrap();
                begin_batch(&mine);
                assert_eq!(head("a"), None);
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn log_heads_are_kept_by_appends_and_merges_and_forgotten_with_the_rest() {
        on_thread(true, || {
            assert_eq!(log_head(1, "a"), None, "not read yet");
            note_log_head(1, "a", 3, Hash([3; 32]));
            assert_eq!(
                log_head(1, "a"),
                None,
                "an append does not make a partial read"
            );
            set_log_heads(
                1,
                LogHeads::from_iter([("a".to_string(), (2, Hash([2; 32])))]),
            );
            assert_eq!(log_head(1, "a"), Some(Some((2, Hash([2; 32])))));
            assert_eq!(log_head(1, "b"), Some(None));
            note_log_head(1, "a", 4, Hash([4; 32]));
            note_log_head(1, "b", 1, Hash([1; 32]));
            assert_eq!(log_head(1, "a"), Some(Some((4, Hash([4; 32])))));
            assert_eq!(log_head(1, "b"), Some(Some((1, Hash([1; 32])))));
            assert_eq!(log_head(2, "a"), None, "partitions are apart");
            // The bound on remembered heads leaves the log's heads alone.
            for i in 0..=MAX_ENTRIES {
                set_head(&i.to_string(), head_at(1));
            }
            assert_eq!(log_head(1, "a"), Some(Some((4, Hash([4; 32])))));
            log_merged(1);
            assert_eq!(log_head(1, "a"), Some(None));
            set_log_heads(3, LogHeads::default());
            forget_all();
            assert_eq!(log_head(1, "a"), None);
            assert_eq!(log_head(3, "a"), None);
            assert_eq!(log_head(99, "a"), None);
        });
        on_thread(false, || {
            set_log_heads(1, LogHeads::default());
            assert_eq!(log_head(1, "a"), None);
        });
    }

    #[test]
    fn bounded() {
        on_thread(true, || {
            for i in 0..=MAX_ENTRIES {
                set_head(&i.to_string(), head_at(1));
            }
            assert_eq!(head("0"), None, "started over at the bound");
            assert_eq!(head(&MAX_ENTRIES.to_string()), Some(head_at(1)));
        });
    }
}
