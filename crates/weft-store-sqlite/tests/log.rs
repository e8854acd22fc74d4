//! The journal log (appends land in a rowid-ordered log, split into partitions by instance,
//! each merged into the journal in batches): reads, truncation, batched loads and
//! verification give the same answers whichever table a record is in, a partition's merge
//! runs when it is due, and a reopened store merges what the last process left.

#![allow(clippy::unwrap_used)]

use rusqlite::Connection;
use weft_store::{NewRecord, Snapshot, Store};
use weft_store_sqlite::{LOG_PARTS, SqliteStore, log_partition};

/// An empty-state snapshot at `seq`.
fn snapshot(seq: u64, hash: weft_store::Hash, at_ms: i64) -> Snapshot {
    Snapshot {
        seq,
        hash,
        state: b"{}".to_vec(),
        at_ms,
    }
}

fn rec(i: u64) -> NewRecord {
    NewRecord {
        kind: "step".into(),
        body: format!("{{\"i\":{i}}}").into_bytes(),
        at_ms: i as i64,
    }
}

fn path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-log-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("weft.db")
}

/// (rows in `journal`, records in all log partitions), read through a separate connection.
fn rows(p: &std::path::Path) -> (i64, i64) {
    let c = Connection::open(p).unwrap();
    let n = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
    let log = (0..LOG_PARTS)
        .map(|k| {
            n(&format!(
                "SELECT coalesce(sum(n), 0) FROM journal_log_batch_{k}"
            ))
        })
        .sum();
    (n("SELECT count(*) FROM journal"), log)
}

/// The first instance id `prefix{k}` whose log partition is (or, with `same` false, is
/// not) `part`.
fn id_in(prefix: &str, part: usize, same: bool) -> String {
    (0..)
        .map(|k| format!("{prefix}{k}"))
        .find(|id| (log_partition(id) == part) == same)
        .unwrap()
}

/// A new store at `path(name)` that merges each log partition every `rows` rows.
async fn open_merging_every(name: &str, rows: u64) -> (std::path::PathBuf, SqliteStore) {
    let p = path(name);
    let s = SqliteStore::open(&p).await.unwrap();
    s.set_log_merge_rows(rows);
    (p, s)
}

/// The seqs a read of `instance`'s whole journal returns.
async fn seqs(s: &SqliteStore, instance: &str) -> Vec<u64> {
    let recs = s.read(instance, 1, 1_000).await.unwrap();
    recs.iter().map(|r| r.seq).collect()
}

/// Waits until the writer has run everything queued before (a detached merge included).
async fn settle(s: &SqliteStore) {
    s.page_count().await.unwrap();
}

#[tokio::test]
async fn records_read_the_same_from_the_log_and_the_journal() {
    let (p, s) = open_merging_every("split", 5).await;
    // "a" and "b" share a log partition: its 5 rows reach the threshold and are merged;
    // the next 3 stay in the log.
    let b = id_in("b", log_partition("a"), true);
    let b = b.as_str();
    s.append("a", (1..=3).map(rec).collect()).await.unwrap();
    s.append(b, (1..=2).map(rec).collect()).await.unwrap();
    settle(&s).await;
    s.append("a", (4..=6).map(rec).collect()).await.unwrap();
    settle(&s).await;
    assert_eq!(rows(&p), (5, 3));
    // Another partition counts its own rows.
    let c = id_in("c", log_partition("a"), false);
    s.append(&c, (1..=4).map(rec).collect()).await.unwrap();
    settle(&s).await;
    assert_eq!(rows(&p), (5, 7));
    // One read spans both tables, in order, with `from` and `limit` applied across them.
    let all = s.read("a", 1, 100).await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    let mid = s.read("a", 3, 2).await.unwrap();
    assert_eq!(mid.iter().map(|r| r.seq).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(s.read(b, 1, 100).await.unwrap().len(), 2);
    assert_eq!(s.read(&c, 1, 100).await.unwrap().len(), 4);
    assert_eq!(s.verify("a").await.unwrap().records, 6);
    // A batched load sees the same records as reads.
    let loaded = s
        .load_many(&["a".into(), b.into(), "a".into(), c.clone()])
        .await
        .unwrap();
    assert_eq!(loaded[0].1, all);
    assert_eq!(loaded[2].1, all);
    assert_eq!(loaded[1].1.len(), 2);
    assert_eq!(loaded[3].1.len(), 4);
    // Truncation behind a snapshot removes from both tables.
    let snap = snapshot(5, all[4].hash, 5);
    s.put_snapshot("a", snap.clone()).await.unwrap();
    assert_eq!(s.truncate_before("a", 5).await.unwrap(), 4);
    assert_eq!(seqs(&s, "a").await, [5, 6]);
    let loaded = s.load_many(&["a".into()]).await.unwrap();
    assert_eq!(loaded[0].0.as_ref(), Some(&snap));
    assert_eq!(loaded[0].1.iter().map(|r| r.seq).collect::<Vec<_>>(), [6]);
    assert_eq!(s.verify("a").await.unwrap().records, 2);
    // Appends keep chaining after a merge.
    let next = s.append("a", vec![rec(7)]).await.unwrap();
    assert_eq!(next.first_seq, 7);
    assert_eq!(s.verify("a").await.unwrap().records, 3);
}

#[tokio::test]
async fn reopening_merges_what_the_last_process_left_in_the_log() {
    let p = path("reopen");
    {
        let s = SqliteStore::open(&p).await.unwrap();
        for i in 1..=10 {
            s.append(&format!("i{}", i % 3), vec![rec(i)])
                .await
                .unwrap();
        }
    }
    assert_eq!(rows(&p), (0, 10));
    let s = SqliteStore::open(&p).await.unwrap();
    assert_eq!(rows(&p), (10, 0));
    for id in ["i0", "i1", "i2"] {
        let n = s.read(id, 1, 100).await.unwrap().len() as u64;
        assert!(n >= 3);
        assert_eq!(s.verify(id).await.unwrap().records, n);
    }
}

#[tokio::test]
async fn the_log_is_merged_every_so_many_rows() {
    let (p, s) = open_merging_every("every", 100).await;
    // Seven instances of one partition (rows of others would not count towards it).
    let part = log_partition("i0");
    let ids: Vec<String> = (0..)
        .map(|k| format!("i{k}"))
        .filter(|id| log_partition(id) == part)
        .take(7)
        .collect();
    for i in 1..=99 {
        s.append(&ids[i as usize % 7], vec![rec(i)]).await.unwrap();
    }
    settle(&s).await;
    assert_eq!(rows(&p), (0, 99));
    s.append(&ids[0], vec![rec(100)]).await.unwrap();
    settle(&s).await;
    assert_eq!(rows(&p), (100, 0));
    // The count starts again after a merge.
    s.append(&ids[0], vec![rec(101)]).await.unwrap();
    settle(&s).await;
    assert_eq!(rows(&p), (100, 1));
}

#[tokio::test]
async fn a_log_row_that_repeats_a_journal_record_is_reported_as_damage() {
    let p = path("dup");
    {
        let s = SqliteStore::open(&p).await.unwrap();
        s.append("a", vec![rec(1)]).await.unwrap();
    }
    // A copy of the log's batch is kept; reopening merges the batch; then the copy is put
    // back into the log by hand.
    let log = format!("journal_log_batch_{}", log_partition("a"));
    Connection::open(&p)
        .unwrap()
        .execute_batch(&format!("CREATE TABLE saved AS SELECT * FROM {log}"))
        .unwrap();
    drop(SqliteStore::open(&p).await.unwrap());
    assert_eq!(rows(&p), (1, 0));
    Connection::open(&p)
        .unwrap()
        .execute_batch(&format!("INSERT INTO {log} SELECT * FROM saved"))
        .unwrap();
    let e = SqliteStore::open(&p).await.unwrap_err();
    assert_eq!(e.code(), "store_corrupt", "{e}");
}

#[tokio::test]
async fn by_default_the_merge_waits_for_several_rows_per_instance() {
    let p = path("adaptive");
    let s = SqliteStore::open(&p).await.unwrap();
    // 18,000 instances with one row each: about 2,250 per partition, past the default
    // interval (2,048 rows), but a merge would rewrite a leaf per row, so it waits.
    let batch: Vec<(String, Vec<NewRecord>)> = (0..18_000)
        .map(|i| (format!("w{i:05}"), vec![rec(1)]))
        .collect();
    s.write_batch(Vec::new(), batch, Vec::new()).await.unwrap();
    settle(&s).await;
    assert_eq!(rows(&p), (0, 18_000));
    // Four rows per instance: due.
    for k in 2..=4 {
        let batch: Vec<(String, Vec<NewRecord>)> = (0..18_000)
            .map(|i| (format!("w{i:05}"), vec![rec(k)]))
            .collect();
        s.write_batch(Vec::new(), batch, Vec::new()).await.unwrap();
    }
    // One merge at a time: an append claims the next due partition's.
    settle(&s).await;
    let merged = || -> i64 {
        Connection::open(&p)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM journal WHERE instance LIKE 'w%'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert!(
        merged() > 0 && merged() < 72_000,
        "one partition: {}",
        merged()
    );
    for k in 0..LOG_PARTS as u64 {
        s.append("x", vec![rec(k + 1)]).await.unwrap();
        settle(&s).await;
    }
    assert_eq!(merged(), 72_000);
    assert_eq!(s.verify("w17999").await.unwrap().records, 4);
}

/// Truncation leaves the instance's rows in the log (deleting them would scan it), but
/// they are dead: no read, batched load or verification sees them, and the merge drops
/// them instead of moving them into the journal.
#[tokio::test]
async fn rows_truncated_while_in_the_log_are_dead_and_the_merge_drops_them() {
    let (p, s) = open_merging_every("dead", 1_000).await;
    let appended = s.append("a", (1..=6).map(rec).collect()).await.unwrap();
    s.append("b", (1..=2).map(rec).collect()).await.unwrap();
    let all = s.read("a", 1, 100).await.unwrap();
    // A snapshot at the head, then truncation behind it: the compaction of a reactive plan.
    let snap = snapshot(6, appended.head, 6);
    s.put_snapshot("a", snap.clone()).await.unwrap();
    assert_eq!(s.truncate_before("a", 6).await.unwrap(), 5);
    settle(&s).await;
    assert_eq!(rows(&p), (0, 8), "the dead rows are still in the log");
    let seqs = |recs: Vec<weft_store::Record>| recs.iter().map(|r| r.seq).collect::<Vec<_>>();
    assert_eq!(seqs(s.read("a", 1, 100).await.unwrap()), [6]);
    assert_eq!(s.read("a", 6, 1).await.unwrap()[0], all[5]);
    let loaded = s.load_many(&["a".into(), "b".into()]).await.unwrap();
    assert_eq!(loaded[0].0.as_ref(), Some(&snap));
    assert!(loaded[0].1.is_empty());
    assert_eq!(loaded[1].1.len(), 2);
    assert_eq!(s.verify("a").await.unwrap().records, 1);
    // A snapshot below the base no longer matches the journal, though its row is in the log.
    let stale = snapshot(3, all[2].hash, 3);
    let e = s.put_snapshot("a", stale).await.unwrap_err();
    assert_eq!(e.code(), "invalid_input", "{e}");
    // The merge moves the live rows only.
    drop(s);
    let s = SqliteStore::open(&p).await.unwrap();
    assert_eq!(rows(&p), (3, 0));
    assert_eq!(seqs(s.read("a", 1, 100).await.unwrap()), [6]);
    assert_eq!(s.verify("a").await.unwrap().records, 1);
    assert_eq!(s.append("a", vec![rec(7)]).await.unwrap().first_seq, 7);
    assert_eq!(s.verify("b").await.unwrap().records, 2);
}

/// A snapshot between the base and the head is checked against the record at its seq,
/// wherever that record is; a wrong hash is refused.
#[tokio::test]
async fn a_snapshot_behind_the_head_is_checked_in_either_table() {
    let (p, s) = open_merging_every("mid", 4).await;
    s.append("a", (1..=4).map(rec).collect()).await.unwrap();
    settle(&s).await;
    s.append("a", (5..=6).map(rec).collect()).await.unwrap();
    assert_eq!(rows(&p), (4, 2));
    let all = s.read("a", 1, 100).await.unwrap();
    for seq in [3_u64, 5] {
        let at = |hash| snapshot(seq, hash, 0);
        let wrong = all[0].hash;
        assert!(s.put_snapshot("a", at(wrong)).await.is_err(), "seq {seq}");
        s.put_snapshot("a", at(all[seq as usize - 1].hash))
            .await
            .unwrap();
    }
    // Truncating behind the middle one looks the base hash up; right behind the later one,
    // it takes the snapshot's.
    assert_eq!(s.truncate_before("a", 4).await.unwrap(), 3);
    assert_eq!(s.verify("a").await.unwrap().records, 3);
    assert_eq!(s.truncate_before("a", 6).await.unwrap(), 2);
    assert_eq!(s.verify("a").await.unwrap().records, 1);
    assert_eq!(s.read("a", 1, 100).await.unwrap(), all[5..]);
}

/// The WAL is checkpointed in the background: pages appended reach the database file well
/// before the writer's own automatic checkpoint (at 32,768 WAL pages) would copy them.
#[tokio::test]
async fn the_wal_is_checkpointed_in_the_background() {
    let p = path("ckpt");
    let s = SqliteStore::open(&p).await.unwrap();
    settle(&s).await;
    let size = || std::fs::metadata(&p).unwrap().len();
    let before = size();
    // About 2 MiB of records: new pages, in the WAL until a checkpoint copies them.
    let body = vec![b'x'; 1_000];
    for k in 0..20 {
        let recs = (0..100)
            .map(|i| NewRecord {
                kind: "step".into(),
                body: body.clone(),
                at_ms: k * 100 + i,
            })
            .collect();
        s.append(&format!("i{k}"), recs).await.unwrap();
    }
    let mut waited = 0;
    while size() < before + 1_000_000 {
        assert!(waited < 500, "the database file stayed at {} bytes", size());
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        waited += 1;
    }
    assert_eq!(s.verify("i19").await.unwrap().records, 100);
}

/// A merge while the store runs drops the rows truncated since the partition's last merge
/// too (it filters dead rows only for partitions that had a truncation).
#[tokio::test]
async fn a_running_merge_drops_rows_truncated_since_the_last_one() {
    let (p, s) = open_merging_every("dead-live", 10).await;
    let appended = s.append("a", (1..=6).map(rec).collect()).await.unwrap();
    s.put_snapshot("a", snapshot(6, appended.head, 6))
        .await
        .unwrap();
    assert_eq!(s.truncate_before("a", 6).await.unwrap(), 5);
    // Four more rows: ten in the partition, merged now.
    s.append("a", (7..=10).map(rec).collect()).await.unwrap();
    settle(&s).await;
    assert_eq!(rows(&p), (5, 0), "records 6 to 10 merged, 1 to 5 dropped");
    assert_eq!(s.verify("a").await.unwrap().records, 5);
    // The next merge of the partition has nothing dead to drop: all rows move.
    s.append("a", (11..=20).map(rec).collect()).await.unwrap();
    settle(&s).await;
    assert_eq!(rows(&p), (15, 0));
    assert_eq!(s.verify("a").await.unwrap().records, 15);
}

/// (head_seq, base_seq) of `instance` in `chain_heads`, read through a separate connection.
fn stored_head(p: &std::path::Path, instance: &str) -> Option<(i64, i64)> {
    use rusqlite::OptionalExtension;
    Connection::open(p)
        .unwrap()
        .query_row(
            "SELECT head_seq, base_seq FROM chain_heads WHERE instance = ?1",
            [instance],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .unwrap()
}

/// Appends leave `chain_heads` to the merge: a head is read from the log alone, from
/// `chain_heads` alone and from both, by readers and by the writer after it forgot what it
/// remembered (a reopened store).
#[tokio::test]
async fn heads_are_written_by_the_merge_and_read_from_either_table() {
    let (p, s) = open_merging_every("heads", 1_000).await;
    let a = s.append("a", (1..=3).map(rec).collect()).await.unwrap();
    settle(&s).await;
    assert_eq!(
        stored_head(&p, "a"),
        None,
        "appends do not write chain_heads"
    );
    assert_eq!(s.head("a").await.unwrap(), Some((3, a.head)));
    drop(s);
    // Reopening merges: the head is in chain_heads.
    let s = SqliteStore::open(&p).await.unwrap();
    s.set_log_merge_rows(1_000);
    assert_eq!(stored_head(&p, "a"), Some((3, 0)));
    assert_eq!(s.head("a").await.unwrap(), Some((3, a.head)));
    // Newer records in the log win over the stored head.
    let b = s.append("a", (4..=5).map(rec).collect()).await.unwrap();
    settle(&s).await;
    assert_eq!(stored_head(&p, "a"), Some((3, 0)));
    assert_eq!(s.head("a").await.unwrap(), Some((5, b.head)));
    assert_eq!(s.verify("a").await.unwrap().records, 5);
    drop(s);
    // A reopened store (its writer remembers nothing; the open merged) chains on.
    let s = SqliteStore::open(&p).await.unwrap();
    let c = s.append("a", vec![rec(6)]).await.unwrap();
    assert_eq!(c.first_seq, 6);
    assert_eq!(s.verify("a").await.unwrap().records, 6);
}

/// Truncating behind the newest record while every record is still in the log: the merge
/// drops them all as dead, and the head truncation wrote to `chain_heads` is still where
/// the chain goes on.
#[tokio::test]
async fn truncating_everything_in_the_log_keeps_the_head() {
    let (p, s) = open_merging_every("trunc-all", 1_000).await;
    let a = s.append("a", (1..=4).map(rec).collect()).await.unwrap();
    s.put_snapshot("a", snapshot(4, a.head, 4)).await.unwrap();
    assert_eq!(s.truncate_before("a", 5).await.unwrap(), 4);
    settle(&s).await;
    assert_eq!(stored_head(&p, "a"), Some((4, 4)));
    assert_eq!(s.head("a").await.unwrap(), Some((4, a.head)));
    drop(s);
    let s = SqliteStore::open(&p).await.unwrap();
    assert_eq!(rows(&p), (0, 0), "the merge dropped the dead records");
    assert_eq!(s.head("a").await.unwrap(), Some((4, a.head)));
    let next = s.append("a", vec![rec(5)]).await.unwrap();
    assert_eq!(next.first_seq, 5);
    assert_eq!(s.verify("a").await.unwrap().records, 1);
    assert_eq!(seqs(&s, "a").await, [5]);
}
