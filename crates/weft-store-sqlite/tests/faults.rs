//! Faults only a real file can show: journal tampering found by `verify`, garbage,
//! truncated and foreign files, a schema from a newer weft, and a second store (a second
//! `weft` process) writing the same file behind the writer thread's memory of chain heads
//! and leases (`src/cache.rs`). Each test works on its own temporary directory and tampers
//! with the file directly through SQLite.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use rusqlite::{Connection, params};
use weft_store::{ChainFault, Error, Fence, Hash, NewRecord, Store};
use weft_store_sqlite::SqliteStore;

fn temp(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("weft-sqlite-faults-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("weft.db")
}

/// Records numbered `n`.
fn records(n: std::ops::RangeInclusive<i64>) -> Vec<NewRecord> {
    n.map(|k| NewRecord {
        kind: "step".into(),
        body: format!("{{\"n\":{k}}}").into_bytes(),
        at_ms: k,
    })
    .collect()
}

/// Records 1..=5 of instance `i`.
fn five() -> Vec<NewRecord> {
    records(1..=5)
}

/// A store with instance `i` holding 5 records; returns the file after closing it and
/// opening it once more, which merges the journal log: the records are in `journal`.
async fn five_records(name: &str) -> PathBuf {
    let path = temp(name);
    let store = SqliteStore::open(&path).await.unwrap();
    store.append("i", five()).await.unwrap();
    store.verify("i").await.unwrap();
    drop(store);
    drop(SqliteStore::open(&path).await.unwrap());
    path
}

async fn verify_err(path: &PathBuf) -> weft_store::ChainError {
    let store = SqliteStore::open(path).await.unwrap();
    match store.verify("i").await.unwrap_err() {
        Error::Chain(e) => e,
        other => panic!("expected a chain error, got {other}"),
    }
}

#[tokio::test]
async fn altered_body_is_detected() {
    let path = five_records("altered").await;
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE journal SET body = X'7b7d' WHERE instance = 'i' AND seq = 3",
            [],
        )
        .unwrap();
    let e = verify_err(&path).await;
    assert_eq!((e.seq, e.reason.clone()), (3, ChainFault::Altered));
    assert!(e.to_string().contains("seq 3"), "{e}");
}

/// A store with instance `i`'s 5 records still in the journal log (one batch).
async fn five_in_the_log(name: &str) -> (PathBuf, SqliteStore) {
    let path = temp(name);
    let store = SqliteStore::open(&path).await.unwrap();
    store.append("i", five()).await.unwrap();
    (path, store)
}

/// Runs `UPDATE <i's log partition> SET <set>` on the file; exactly one batch must change.
fn alter_log_batch(path: &std::path::Path, set: &str) {
    let n = Connection::open(path)
        .unwrap()
        .execute(
            &format!(
                "UPDATE journal_log_batch_{} SET {set}",
                weft_store_sqlite::log_partition("i")
            ),
            [],
        )
        .unwrap();
    assert_eq!(n, 1, "the records were expected in one batch of the log");
}

/// Records still in the journal log (not yet merged) are verified the same way.
#[tokio::test]
async fn altered_body_in_the_log_is_detected() {
    let (path, store) = five_in_the_log("altered-log").await;
    // Record 2's body (`{"n":2}`, see `five`) becomes `{"n":9}`.
    alter_log_batch(
        &path,
        r#"data = CAST(replace(data, '{"n":2}', '{"n":9}') AS BLOB)
           WHERE instr(data, CAST('{"n":2}' AS BLOB)) > 0"#,
    );
    match store.verify("i").await.unwrap_err() {
        Error::Chain(e) => assert_eq!((e.seq, e.reason), (2, ChainFault::Altered)),
        other => panic!("expected a chain error, got {other}"),
    }
}

/// A log batch cut short (or not a blob at all) is damage: reads, batched loads and the
/// merge of a reopened store report `store_corrupt`, and the process goes on.
#[tokio::test]
async fn a_damaged_log_batch_is_reported_as_damage() {
    for (name, damage) in [
        ("batch-cut", "data = substr(data, 1, 40)"),
        ("batch-text", "data = 'not a batch'"),
    ] {
        let (path, store) = five_in_the_log(name).await;
        alter_log_batch(&path, damage);
        let e = store.read("i", 1, 100).await.unwrap_err();
        assert_eq!(e.code(), "store_corrupt", "{name}: {e}");
        let e = store.load_many(&["i".into()]).await.unwrap_err();
        assert_eq!(e.code(), "store_corrupt", "{name}: {e}");
        drop(store);
        let e = SqliteStore::open(&path).await.unwrap_err();
        assert_eq!(e.code(), "store_corrupt", "{name}: {e}");
    }
}

#[tokio::test]
async fn altered_and_rehashed_record_breaks_the_next_link() {
    let path = five_records("rehashed").await;
    let c = Connection::open(&path).unwrap();
    let prev: Vec<u8> = c
        .query_row(
            "SELECT prev_hash FROM journal WHERE instance='i' AND seq=3",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let forged = Hash::of_record(&Hash::from_slice(&prev).unwrap(), 3, "step", b"{}", 3);
    c.execute(
        "UPDATE journal SET body = X'7b7d', hash = ?1 WHERE instance = 'i' AND seq = 3",
        params![&forged.0[..]],
    )
    .unwrap();
    let e = verify_err(&path).await;
    assert_eq!((e.seq, e.reason.clone()), (4, ChainFault::BrokenLink));
}

#[tokio::test]
async fn deleted_record_is_detected() {
    let path = five_records("deleted").await;
    Connection::open(&path)
        .unwrap()
        .execute("DELETE FROM journal WHERE instance = 'i' AND seq = 3", [])
        .unwrap();
    let e = verify_err(&path).await;
    assert_eq!(
        (e.seq, e.reason.clone()),
        (3, ChainFault::Gap { expected: 3 })
    );
}

#[tokio::test]
async fn deleted_tail_record_is_detected() {
    let path = five_records("tail").await;
    Connection::open(&path)
        .unwrap()
        .execute("DELETE FROM journal WHERE instance = 'i' AND seq = 5", [])
        .unwrap();
    let e = verify_err(&path).await;
    assert_eq!(
        (e.seq, e.reason),
        (5, ChainFault::HeadMismatch { head_seq: 5 })
    );
}

#[tokio::test]
async fn swapped_records_are_detected() {
    let path = five_records("swapped").await;
    let c = Connection::open(&path).unwrap();
    // Move seq 2 out of the way, put 3 at 2, then the old 2 at 3.
    c.execute_batch(
        "UPDATE journal SET seq = 100 WHERE instance = 'i' AND seq = 2;
         UPDATE journal SET seq = 2 WHERE instance = 'i' AND seq = 3;
         UPDATE journal SET seq = 3 WHERE instance = 'i' AND seq = 100;",
    )
    .unwrap();
    let e = verify_err(&path).await;
    assert_eq!(e.seq, 2, "{e}");
}

#[tokio::test]
async fn garbage_file_is_a_clear_error() {
    let path = temp("garbage");
    let garbage: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, garbage).unwrap();
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(err.code(), "store_corrupt", "{err}");
    assert!(err.to_string().contains("weft.db"), "{err}");
}

#[tokio::test]
async fn truncated_file_is_a_clear_error() {
    let path = temp("truncated");
    let store = SqliteStore::open(&path).await.unwrap();
    for b in 0..20 {
        let recs = (0..100)
            .map(|n| NewRecord {
                kind: "step".into(),
                body: vec![b'x'; 200 + n],
                at_ms: b,
            })
            .collect();
        store.append(&format!("i{b}"), recs).await.unwrap();
    }
    drop(store);
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    // Either opening or reading must fail with a clear code; nothing may panic.
    let outcome = match SqliteStore::open(&path).await {
        Err(e) => Err(e),
        Ok(store) => {
            let mut result = Ok(());
            for b in 0..20 {
                if let Err(e) = store.verify(&format!("i{b}")).await {
                    result = Err(e);
                    break;
                }
            }
            result
        }
    };
    let err = outcome.unwrap_err();
    assert_eq!(err.code(), "store_corrupt", "{err}");
}

#[tokio::test]
async fn foreign_sqlite_database_is_refused() {
    let path = temp("foreign");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE t (x);")
        .unwrap();
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(err.code(), "store_corrupt", "{err}");
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let path = five_records("newer").await;
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE weft_meta SET value = 99 WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(
        err,
        Error::SchemaTooNew {
            found: 99,
            supported: weft_store_sqlite::SCHEMA_VERSION
        }
    );
    assert_eq!(err.code(), "schema_too_new");
}

#[tokio::test]
async fn data_survives_reopen() {
    let path = five_records("reopen").await;
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.verify("i").await.unwrap().records, 5);
    let a = store
        .append(
            "i",
            vec![NewRecord {
                kind: "k".into(),
                body: vec![],
                at_ms: 0,
            }],
        )
        .await
        .unwrap();
    assert_eq!(a.first_seq, 6);
}

/// A version-6 store (before tenants' tools) gains the tools table on open, its journal
/// and plans intact.
#[tokio::test]
async fn version_6_store_is_migrated() {
    let path = five_records("v6").await;
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .put_plan("t", "p", serde_json::json!({"plan_name": "p"}), 1)
            .await
            .unwrap();
    }
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE tools; UPDATE weft_meta SET value = 6 WHERE key = 'schema_version';",
        )
        .unwrap();
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.verify("i").await.unwrap().records, 5);
    assert!(store.get_plan("t", "p", None).await.unwrap().is_some());
    assert!(store.list_tools(None).await.unwrap().is_empty());
    assert_eq!(store.put_tool("t", "x", None, 2).await.unwrap(), 1);
    drop(store);
    assert_eq!(schema_version(&path), weft_store_sqlite::SCHEMA_VERSION);
}

/// A version-7 store (instance records without `status_seq`) is migrated on open: its
/// records read 0, status changes record the head from then on, and its journal verifies.
#[tokio::test]
async fn version_7_store_is_migrated() {
    let path = five_records("v7").await;
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .create_instance(weft_store::conformance::instance(
                "i",
                "t",
                weft_store::InstanceStatus::Running,
            ))
            .await
            .unwrap();
    }
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "ALTER TABLE instances DROP COLUMN status_seq;
             UPDATE weft_meta SET value = 7 WHERE key = 'schema_version';",
        )
        .unwrap();
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.status_seq("i").await.unwrap(), Some(0));
    assert_eq!(store.verify("i").await.unwrap().records, 5);
    store
        .update_status("i", weft_store::InstanceStatus::Completed, None, 2)
        .await
        .unwrap();
    assert_eq!(store.status_seq("i").await.unwrap(), Some(5));
    drop(store);
    assert_eq!(schema_version(&path), weft_store_sqlite::SCHEMA_VERSION);
}

/// A version-8 store (before the shared counters) gets the counters' table on open, and
/// its journal stays.
#[tokio::test]
async fn version_8_store_is_migrated() {
    let path = five_records("v8").await;
    drop(SqliteStore::open(&path).await.unwrap());
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE counters;
             UPDATE weft_meta SET value = 8 WHERE key = 'schema_version';",
        )
        .unwrap();
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.verify("i").await.unwrap().records, 5);
    let row = weft_store::CountRow {
        key: "tenant/t".into(),
        period: 1,
        ends_ms: 10,
        counts: weft_store::Counts {
            tool_calls: 2,
            ..weft_store::Counts::default()
        },
    };
    let totals = store.add_counts(vec![row.clone(), row], 0).await.unwrap();
    assert_eq!(totals[1].tool_calls, 4);
    drop(store);
    assert_eq!(schema_version(&path), weft_store_sqlite::SCHEMA_VERSION);
}

/// A store written by the previous schema (version 1: leases without an epoch) is migrated
/// on open: its leases get epoch 1, its data stays, and fencing works.
#[tokio::test]
async fn version_1_store_is_migrated() {
    let path = five_records("v1").await;
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "DROP TABLE leases;
             CREATE TABLE leases (instance TEXT PRIMARY KEY, owner TEXT NOT NULL,
               expires_at_ms INTEGER NOT NULL) WITHOUT ROWID;
             INSERT INTO leases VALUES ('i', 'old', 9000000000000);
             UPDATE weft_meta SET value = 1 WHERE key = 'schema_version';",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.verify("i").await.unwrap().records, 5);
    let l = store.owner_of("i", 0).await.unwrap().unwrap();
    assert_eq!((l.owner.as_str(), l.epoch), ("old", 1));
    let rec = NewRecord {
        kind: "step".into(),
        body: b"{}".to_vec(),
        at_ms: 6,
    };
    assert_eq!(
        store
            .append_fenced("i", &l.fence(), vec![rec.clone()])
            .await
            .unwrap()
            .last_seq,
        6
    );
    drop(store);
    let v: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM weft_meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(v, weft_store_sqlite::SCHEMA_VERSION);
}

/// Turns `journal` and `chain_heads` back into their layout before schema version 6
/// (keyed by instance, no partition column).
const V5_JOURNAL: &str = "
    CREATE TABLE journal_v5 (
      instance TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL,
      at_ms INTEGER NOT NULL, prev_hash BLOB NOT NULL, hash BLOB NOT NULL,
      PRIMARY KEY (instance, seq)) WITHOUT ROWID;
    INSERT INTO journal_v5 SELECT instance, seq, kind, body, at_ms, prev_hash, hash FROM journal;
    DROP TABLE journal;
    ALTER TABLE journal_v5 RENAME TO journal;
    CREATE TABLE chain_heads_v5 (
      instance TEXT PRIMARY KEY, head_seq INTEGER NOT NULL, head_hash BLOB NOT NULL,
      base_seq INTEGER NOT NULL, base_hash BLOB NOT NULL) WITHOUT ROWID;
    INSERT INTO chain_heads_v5
      SELECT instance, head_seq, head_hash, base_seq, base_hash FROM chain_heads;
    DROP TABLE chain_heads;
    ALTER TABLE chain_heads_v5 RENAME TO chain_heads;";

/// Version 5: `journal` and `chain_heads` without the partition column. Opening moves every
/// row into the partitioned tables (a few instances, merged and still in the log); reads,
/// chains and appends are as before, and each row's partition is its instance's log
/// partition.
#[tokio::test]
async fn version_5_store_is_migrated() {
    let path = five_records("v5").await;
    let ids: Vec<String> = (0..20).map(|k| format!("w{k}")).collect();
    let expected = {
        let store = SqliteStore::open(&path).await.unwrap();
        for id in &ids {
            store.append(id, five()).await.unwrap();
        }
        drop(store);
        // Reopening merged the log: every record is in `journal` now.
        let store = SqliteStore::open(&path).await.unwrap();
        store.append("w0", five()).await.unwrap();
        let mut all = vec![store.read("i", 1, 100).await.unwrap()];
        for id in &ids {
            all.push(store.read(id, 1, 100).await.unwrap());
        }
        all
    };
    let rows_before: i64 = {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&format!(
            "{V5_JOURNAL} UPDATE weft_meta SET value = 5 WHERE key = 'schema_version';"
        ))
        .unwrap();
        c.query_row("SELECT count(*) FROM journal", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(
        rows_before, 105,
        "21 instances of five records in the journal"
    );
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.read("i", 1, 100).await.unwrap(), expected[0]);
    for (id, want) in ids.iter().zip(&expected[1..]) {
        assert_eq!(&store.read(id, 1, 100).await.unwrap(), want, "{id}");
        assert_eq!(store.verify(id).await.unwrap().records, want.len() as u64);
    }
    assert_eq!(store.append("w1", five()).await.unwrap().first_seq, 6);
    drop(store);
    assert_eq!(schema_version(&path), weft_store_sqlite::SCHEMA_VERSION);
    let c = Connection::open(&path).unwrap();
    for table in ["journal", "chain_heads"] {
        let mut st = c
            .prepare(&format!("SELECT DISTINCT instance, part FROM {table}"))
            .unwrap();
        let parts: Vec<(String, i64)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(parts.len(), 21, "{table}");
        for (id, part) in parts {
            assert_eq!(
                part,
                weft_store_sqlite::log_partition(&id) as i64,
                "{table}: {id}"
            );
        }
    }
}

/// A store with a journal row whose instance is not text cannot be migrated to version
/// 6: opening it is `store_corrupt`, and the file is left at its version. The row is in
/// `journal` of a version-5 store, or in the old log of a version-4 store (moved into
/// `journal` by the migration itself).
#[tokio::test]
async fn a_damaged_journal_is_reported_instead_of_migrated() {
    let log_tables: String = (0..weft_store_sqlite::LOG_PARTS)
        .map(|k| {
            format!(
                "DROP TABLE journal_log_batch_{k};
                 CREATE TABLE journal_log_{k} (
                   instance, seq INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL,
                   at_ms INTEGER NOT NULL, prev_hash BLOB NOT NULL, hash BLOB NOT NULL);"
            )
        })
        .collect();
    let cases = [
        (
            5,
            "UPDATE journal SET instance = X'69' WHERE seq = 2;".to_string(),
        ),
        (
            4,
            format!(
                "{log_tables} INSERT INTO journal_log_0
                   SELECT X'77', seq, kind, body, at_ms, prev_hash, hash FROM journal;"
            ),
        ),
    ];
    for (version, damage) in cases {
        let path = five_records(&format!("v{version}-damaged")).await;
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&format!(
            "{V5_JOURNAL} {damage}
             UPDATE weft_meta SET value = {version} WHERE key = 'schema_version';"
        ))
        .unwrap();
        drop(c);
        let err = SqliteStore::open(&path).await.unwrap_err();
        assert_eq!(err.code(), "store_corrupt", "version {version}: {err}");
        assert!(
            err.to_string().contains("not text"),
            "version {version}: {err}"
        );
        assert_eq!(schema_version(&path), version);
    }
}

/// The schema version the file records.
fn schema_version(path: &PathBuf) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT value FROM weft_meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// A store whose records 4 and 5 of `i` are in an old log table and 3 is in `journal`
/// (1 and 2 truncated behind a snapshot), the log holding a dead copy of record 1 too: the
/// layout `old_log` (SQL run on the file, given the table the log rows go to) turns the
/// current log tables into, at schema `version`. Opening it must migrate: the log's live rows
/// move into the journal, the dead one is dropped, the old tables go, and the chain verifies.
async fn old_log_is_migrated(name: &str, version: i64, old_tables: &[String], log: &str) {
    let path = five_records(name).await;
    {
        let store = SqliteStore::open(&path).await.unwrap();
        let r2 = store.read("i", 2, 1).await.unwrap().remove(0);
        store
            .put_snapshot(
                "i",
                weft_store::Snapshot {
                    seq: 2,
                    hash: r2.hash,
                    state: b"{}".to_vec(),
                    at_ms: 2,
                },
            )
            .await
            .unwrap();
        assert_eq!(store.truncate_before("i", 3).await.unwrap(), 2);
    }
    let before = SqliteStore::open(&path).await.unwrap();
    let expected = before.read("i", 1, 100).await.unwrap();
    drop(before);
    assert_eq!(
        expected.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [3, 4, 5]
    );
    {
        let c = Connection::open(&path).unwrap();
        let mut ddl = V5_JOURNAL.to_string();
        for t in old_tables {
            ddl.push_str(&format!(
                "CREATE TABLE {t} (
                   instance TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
                   body BLOB NOT NULL, at_ms INTEGER NOT NULL, prev_hash BLOB NOT NULL,
                   hash BLOB NOT NULL);"
            ));
        }
        ddl.push_str(&format!(
            "INSERT INTO {log} SELECT 'i', 1, kind, body, at_ms, prev_hash, hash
               FROM journal WHERE instance = 'i' AND seq = 3;
             INSERT INTO {log} SELECT * FROM journal WHERE instance = 'i' AND seq >= 4
               ORDER BY seq;
             DELETE FROM journal WHERE instance = 'i' AND seq >= 4;
             UPDATE weft_meta SET value = {version} WHERE key = 'schema_version';"
        ));
        for k in 0..weft_store_sqlite::LOG_PARTS {
            ddl.push_str(&format!("DROP TABLE journal_log_batch_{k};"));
        }
        c.execute_batch(&ddl).unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.read("i", 1, 100).await.unwrap(), expected);
    assert_eq!(store.verify("i").await.unwrap().records, 3);
    assert_eq!(store.append("i", five()).await.unwrap().first_seq, 6);
    drop(store);
    let c = Connection::open(&path).unwrap();
    let (version, journal): (i64, i64) = c
        .query_row(
            "SELECT (SELECT value FROM weft_meta WHERE key = 'schema_version'),
                    (SELECT count(*) FROM journal WHERE instance = 'i')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(version, weft_store_sqlite::SCHEMA_VERSION);
    for t in old_tables {
        let n: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = ?1",
                [t],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0, "{t} is left");
    }
    // Records 3 to 5 (the five appended after the migration are still in the log).
    assert_eq!(journal, 3);
}

/// Version 3: one unpartitioned `journal_log`, a row per record.
#[tokio::test]
async fn version_3_store_is_migrated() {
    old_log_is_migrated("v3", 3, &["journal_log".into()], "journal_log").await;
}

/// Version 4: `journal_log_{k}` per partition, a row per record.
#[tokio::test]
async fn version_4_store_is_migrated() {
    let tables: Vec<String> = (0..weft_store_sqlite::LOG_PARTS)
        .map(|k| format!("journal_log_{k}"))
        .collect();
    let log = format!("journal_log_{}", weft_store_sqlite::log_partition("i"));
    old_log_is_migrated("v4", 4, &tables, &log).await;
}

#[tokio::test]
async fn appends_of_another_store_on_the_file_are_chained_on() {
    let path = temp("chain");
    let a = SqliteStore::open(&path).await.unwrap();
    let b = SqliteStore::open(&path).await.unwrap();
    a.append("i", records(1..=2)).await.unwrap();
    // `a` now remembers head 2; `b` moves it to 4 behind its back.
    b.append("i", records(3..=4)).await.unwrap();
    let next = a.append("i", records(5..=6)).await.unwrap();
    assert_eq!((next.first_seq, next.last_seq), (5, 6));
    let fenced = a
        .append_fenced(
            "i",
            &Fence {
                owner: "nobody".into(),
                epoch: 1,
            },
            records(7..=7),
        )
        .await;
    assert!(matches!(fenced, Err(Error::LeaseLost { .. })), "{fenced:?}");
    b.append("i", records(7..=7)).await.unwrap();
    assert_eq!(a.append("i", records(8..=8)).await.unwrap().first_seq, 8);
    assert_eq!(a.verify("i").await.unwrap().records, 8);
    assert_eq!(b.verify("i").await.unwrap().records, 8);
}

#[tokio::test]
async fn a_lease_taken_over_by_another_store_fences_the_first() {
    let path = temp("fence");
    let a = SqliteStore::open(&path).await.unwrap();
    let b = SqliteStore::open(&path).await.unwrap();
    assert!(a.acquire_lease("j", "a", 1_000, 0).await.unwrap());
    let mine = Fence {
        owner: "a".into(),
        epoch: 1,
    };
    // `a` remembers its lease at epoch 1 ...
    a.append_fenced("j", &mine, records(1..=1)).await.unwrap();
    a.append_fenced("j", &mine, records(2..=2)).await.unwrap();
    // ... which `b` takes over once it expired (epoch 2).
    assert!(b.acquire_lease("j", "b", 1_000, 5_000).await.unwrap());
    let refused = a.append_fenced("j", &mine, records(3..=3)).await;
    assert!(
        matches!(refused, Err(Error::LeaseLost { .. })),
        "{refused:?}"
    );
    let theirs = Fence {
        owner: "b".into(),
        epoch: 2,
    };
    assert_eq!(
        a.append_fenced("j", &theirs, records(3..=3))
            .await
            .unwrap()
            .first_seq,
        3
    );
    assert_eq!(b.verify("j").await.unwrap().records, 3);
}

/// Issue #27 item 7: the last record deleted and the chain head moved back onto the record
/// before it. The chain itself is intact up to the new head, so only what else the store
/// wrote beside it can tell: the instance record's status was set at seq 5.
#[tokio::test]
async fn a_removed_tail_with_its_head_moved_back_is_detected() {
    let path = temp("tail-and-head");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .create_instance(weft_store::conformance::instance(
            "i",
            "t",
            weft_store::InstanceStatus::Running,
        ))
        .await
        .unwrap();
    store.append("i", five()).await.unwrap();
    store
        .update_status("i", weft_store::InstanceStatus::Completed, None, 6)
        .await
        .unwrap();
    store.verify("i").await.unwrap();
    drop(store);
    // Reopening merges the log: the records and the head are in `journal` / `chain_heads`.
    drop(SqliteStore::open(&path).await.unwrap());
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DELETE FROM journal WHERE instance = 'i' AND seq = 5;
             UPDATE chain_heads SET head_seq = 4, head_hash =
               (SELECT hash FROM journal WHERE instance = 'i' AND seq = 4)
             WHERE instance = 'i';",
        )
        .unwrap();
    let e = verify_err(&path).await;
    assert_eq!(
        (e.seq, e.reason.clone()),
        (
            5,
            ChainFault::TailMissing {
                recorded_seq: 5,
                witness: weft_store::Witness::InstanceRecord,
            }
        ),
        "{e}"
    );
    assert_eq!(e.reason.code(), "tail_missing");
    assert!(e.reason.hint().contains("backup"), "{}", e.reason.hint());
}

/// A journal row as the tests read it: (seq, kind, body, at_ms, prev_hash).
type Row = (i64, String, Vec<u8>, i64, Vec<u8>);

/// A journal key for the keyed-chain tests.
fn key(c: char) -> weft_store::ChainKey {
    weft_store::ChainKey::parse(&c.to_string().repeat(64)).unwrap()
}

/// Rewrites instance `i`'s whole chain as an attacker without the key would: record 3 gets
/// another body, and every hash from there on (and the chain head) is recomputed with
/// plain SHA-256, so the chain is consistent again.
fn rewrite_chain(path: &PathBuf) {
    let c = Connection::open(path).unwrap();
    let rows: Vec<Row> = c
        .prepare("SELECT seq, kind, body, at_ms, prev_hash FROM journal WHERE instance = 'i' ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut prev = Hash::from_slice(&rows[0].4).unwrap();
    for (seq, kind, body, at_ms, _) in rows {
        let body = if seq == 3 {
            b"{\"n\":99}".to_vec()
        } else {
            body
        };
        let hash = Hash::of_record(&prev, seq as u64, &kind, &body, at_ms);
        c.execute(
            "UPDATE journal SET body = ?1, prev_hash = ?2, hash = ?3 WHERE instance = 'i' AND seq = ?4",
            params![body, &prev.0[..], &hash.0[..], seq],
        )
        .unwrap();
        prev = hash;
    }
    c.execute(
        "UPDATE chain_heads SET head_hash = ?1 WHERE instance = 'i'",
        params![&prev.0[..]],
    )
    .unwrap();
}

/// The keyed chain: a new store opened with a key is keyed for good; its records verify
/// only with that key; without it the journal can be read but neither written nor checked;
/// another key is refused; a chain rewritten without the key fails, while the same rewrite
/// of a plain chain passes (what the plain mode cannot detect). A plain store with records
/// refuses a key, so a store never mixes modes.
#[tokio::test]
async fn a_keyed_chain_verifies_only_with_its_key() {
    let path = temp("keyed");
    let store = SqliteStore::open_keyed(&path, Some(key('a')))
        .await
        .unwrap();
    store.append("i", five()).await.unwrap();
    let v = store.verify("i").await.unwrap();
    assert!(v.keyed && v.records == 5, "{v:?}");
    drop(store);
    // Reopening merges the log: the records are in `journal`.
    drop(
        SqliteStore::open_keyed(&path, Some(key('a')))
            .await
            .unwrap(),
    );

    let bare = SqliteStore::open(&path).await.unwrap();
    assert_eq!(bare.read("i", 1, 10).await.unwrap().len(), 5);
    assert_eq!(bare.verify("i").await.unwrap_err().code(), "chain_keyed");
    assert_eq!(
        bare.append("i", records(6..=6)).await.unwrap_err().code(),
        "chain_keyed"
    );
    drop(bare);
    let e = SqliteStore::open_keyed(&path, Some(key('b')))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "chain_key_mismatch", "{e}");

    rewrite_chain(&path);
    let keyed = SqliteStore::open_keyed(&path, Some(key('a')))
        .await
        .unwrap();
    match keyed.verify("i").await.unwrap_err() {
        Error::Chain(e) => assert_eq!((e.seq, e.reason), (1, ChainFault::Altered)),
        other => panic!("expected a chain error, got {other}"),
    }
    drop(keyed);

    // The same rewrite of a plain chain goes unnoticed: that is what the key is for.
    let plain = five_records("keyed-plain").await;
    rewrite_chain(&plain);
    let store = SqliteStore::open(&plain).await.unwrap();
    assert!(!store.verify("i").await.unwrap().keyed);
    drop(store);
    let e = SqliteStore::open_keyed(&plain, Some(key('a')))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "chain_key_mismatch", "{e}");
}
