//! PostgreSQL beyond the suite: tampering found by `verify`, a newer schema refused, two
//! stores (two `weft` processes) contending for leases and appending to one instance.
//! Ignored unless `WEFT_TEST_POSTGRES_URL` was set at build time (`build.rs`).

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use weft_store::{ChainFault, Error, NewRecord, Store};
use weft_store_postgres::PgStore;

fn recs(n: u64) -> Vec<NewRecord> {
    (1..=n)
        .map(|i| NewRecord {
            kind: "step".into(),
            body: format!("{{\"n\":{i}}}").into_bytes(),
            at_ms: i as i64,
        })
        .collect()
}

/// Runs `f(url, schema)` in a fresh schema, dropping it afterwards even if `f` panics.
async fn with_schema<F, Fut>(f: F)
where
    F: FnOnce(String, String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let url = common::url();
    let schema = common::schema_name();
    let outcome = tokio::spawn(f(url.clone(), schema.clone())).await;
    common::drop_schema(&url, &schema).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn tampered(tamper: &'static str) -> weft_store::ChainError {
    let (tx, rx) = tokio::sync::oneshot::channel();
    with_schema(move |url, schema| async move {
        let store = PgStore::open_in_schema(&url, Some(&schema)).await.unwrap();
        store.append("i", recs(5)).await.unwrap();
        store.verify("i").await.unwrap();
        common::sql(&url, &format!("SET search_path = {schema}; {tamper}")).await;
        let err = match store.verify("i").await.unwrap_err() {
            Error::Chain(e) => e,
            other => panic!("expected a chain error, got {other}"),
        };
        let _ = tx.send(err);
    })
    .await;
    rx.await.expect("the tampering test sent its error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn altered_body_is_detected() {
    let e = tampered("UPDATE journal SET body = '\\x7b7d' WHERE instance = 'i' AND seq = 3").await;
    assert_eq!((e.seq, e.reason), (3, ChainFault::Altered));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn deleted_record_is_detected() {
    let e = tampered("DELETE FROM journal WHERE instance = 'i' AND seq = 2").await;
    assert_eq!((e.seq, e.reason), (2, ChainFault::Gap { expected: 2 }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn swapped_records_are_detected() {
    let e = tampered(
        "UPDATE journal SET seq = 100 WHERE instance = 'i' AND seq = 2;
         UPDATE journal SET seq = 2 WHERE instance = 'i' AND seq = 3;
         UPDATE journal SET seq = 3 WHERE instance = 'i' AND seq = 100;",
    )
    .await;
    assert_eq!(e.seq, 2, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn newer_schema_is_refused() {
    with_schema(|url, schema| async move {
        drop(PgStore::open_in_schema(&url, Some(&schema)).await.unwrap());
        common::sql(
            &url,
            &format!("UPDATE {schema}.weft_meta SET value = 42 WHERE key = 'schema_version'"),
        )
        .await;
        let err = PgStore::open_in_schema(&url, Some(&schema))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Error::SchemaTooNew {
                found: 42,
                supported: weft_store_postgres::SCHEMA_VERSION
            }
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn two_stores_contend_for_leases() {
    with_schema(|url, schema| async move {
        let a: Arc<dyn Store> =
            Arc::new(PgStore::open_in_schema(&url, Some(&schema)).await.unwrap());
        let b: Arc<dyn Store> =
            Arc::new(PgStore::open_in_schema(&url, Some(&schema)).await.unwrap());
        // 40 instances, both processes race for each at the same moment: exactly one wins.
        let mut races = Vec::new();
        for i in 0..40 {
            for (store, owner) in [(a.clone(), "proc-a"), (b.clone(), "proc-b")] {
                races.push(tokio::spawn(async move {
                    let inst = format!("inst-{i}");
                    (
                        inst.clone(),
                        owner,
                        store
                            .acquire_lease(&inst, owner, 10_000, 1_000)
                            .await
                            .unwrap(),
                    )
                }));
            }
        }
        let mut winners = std::collections::BTreeMap::new();
        for r in futures::future::join_all(races).await {
            let (inst, owner, won) = r.unwrap();
            if won {
                assert!(winners.insert(inst, owner).is_none(), "two owners");
            }
        }
        assert_eq!(winners.len(), 40);
        // Both see the same owner; the loser cannot renew; after expiry the loser takes over.
        for (inst, owner) in &winners {
            let other = if *owner == "proc-a" {
                "proc-b"
            } else {
                "proc-a"
            };
            let (mine, theirs) = if *owner == "proc-a" {
                (&a, &b)
            } else {
                (&b, &a)
            };
            assert_eq!(
                theirs.owner_of(inst, 5_000).await.unwrap().unwrap().owner,
                *owner
            );
            assert!(
                !theirs
                    .renew_lease(inst, other, 10_000, 5_000)
                    .await
                    .unwrap()
            );
            assert!(mine.renew_lease(inst, owner, 10_000, 5_000).await.unwrap());
            assert!(
                !theirs
                    .acquire_lease(inst, other, 10_000, 14_999)
                    .await
                    .unwrap()
            );
            assert!(
                theirs
                    .acquire_lease(inst, other, 10_000, 15_000)
                    .await
                    .unwrap()
            );
            assert!(!mine.renew_lease(inst, owner, 10_000, 15_001).await.unwrap());
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn two_stores_append_to_one_instance_without_forking() {
    with_schema(|url, schema| async move {
        let a: Arc<dyn Store> =
            Arc::new(PgStore::open_in_schema(&url, Some(&schema)).await.unwrap());
        let b: Arc<dyn Store> =
            Arc::new(PgStore::open_in_schema(&url, Some(&schema)).await.unwrap());
        let mut tasks = Vec::new();
        for t in 0..20 {
            let s = if t % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    // Two instances per batch in opposite orders across processes: the
                    // head locks must not deadlock.
                    let (x, y) = if t % 2 == 0 {
                        ("shared-1", "shared-2")
                    } else {
                        ("shared-2", "shared-1")
                    };
                    let (r1, r2) = tokio::join!(s.append(x, recs(2)), s.append(y, recs(1)));
                    r1.unwrap();
                    r2.unwrap();
                }
            }));
        }
        for t in futures::future::join_all(tasks).await {
            t.unwrap();
        }
        assert_eq!(a.verify("shared-1").await.unwrap().records, 300);
        assert_eq!(b.verify("shared-2").await.unwrap().records, 300);
    })
    .await;
}

/// The text columns of a store not compared bytewise (`COLLATE "C"`), and its version.
async fn collation_and_version(url: &str, schema: &str) -> (Vec<String>, Vec<String>) {
    let not_c = common::strings(
        url,
        &format!(
            "SELECT table_name || '.' || column_name FROM information_schema.columns
             WHERE table_schema = '{schema}' AND data_type = 'text'
               AND collation_name IS DISTINCT FROM 'C' ORDER BY 1"
        ),
    )
    .await;
    let version = common::strings(
        url,
        &format!("SELECT value::text FROM {schema}.weft_meta WHERE key = 'schema_version'"),
    )
    .await;
    (not_c, version)
}

/// Version 3 compares every text column bytewise; a version-2 store (text in the
/// database's collation, no tools table) is migrated on open to the current version with
/// its records intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn version_2_store_is_migrated_to_bytewise_text() {
    with_schema(|url, schema| async move {
        let store = PgStore::open_in_schema(&url, Some(&schema)).await.unwrap();
        store.append("i", recs(3)).await.unwrap();
        drop(store);
        let (not_c, version) = collation_and_version(&url, &schema).await;
        assert!(not_c.is_empty(), "a new store: {not_c:?}");
        let current = vec![weft_store_postgres::SCHEMA_VERSION.to_string()];
        assert_eq!(version, current);
        // Back to version 2's columns.
        common::sql(
            &url,
            &format!(
                "SET search_path = {schema};
                 ALTER TABLE journal ALTER COLUMN instance TYPE TEXT COLLATE \"default\";
                 ALTER TABLE chain_heads ALTER COLUMN instance TYPE TEXT COLLATE \"default\";
                 ALTER TABLE leases ALTER COLUMN instance TYPE TEXT COLLATE \"default\",
                   ALTER COLUMN owner TYPE TEXT COLLATE \"default\";
                 DROP TABLE tools;
                 UPDATE weft_meta SET value = 2 WHERE key = 'schema_version';"
            ),
        )
        .await;
        let (not_c, _) = collation_and_version(&url, &schema).await;
        assert_eq!(not_c.len(), 4, "{not_c:?}");
        let store = PgStore::open_in_schema(&url, Some(&schema)).await.unwrap();
        let (not_c, version) = collation_and_version(&url, &schema).await;
        assert!(not_c.is_empty(), "migrated: {not_c:?}");
        assert_eq!(version, current);
        assert!(store.list_tools(None).await.unwrap().is_empty());
        assert_eq!(store.verify("i").await.unwrap().records, 3);
        assert_eq!(store.append("i", recs(1)).await.unwrap().first_seq, 4);
        assert!(store.acquire_lease("i", "me", 1_000, 0).await.unwrap());
    })
    .await;
}

/// Issue #27 item 7: the last record deleted and the chain head moved back onto the record
/// before it; the instance record's status was set at seq 5, so the cut is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn a_removed_tail_with_its_head_moved_back_is_detected() {
    with_schema(|url, schema| async move {
        let store = PgStore::open_in_schema(&url, Some(&schema)).await.unwrap();
        store
            .create_instance(weft_store::conformance::instance(
                "i",
                "t",
                weft_store::InstanceStatus::Running,
            ))
            .await
            .unwrap();
        store.append("i", recs(5)).await.unwrap();
        store
            .update_status("i", weft_store::InstanceStatus::Completed, None, 6)
            .await
            .unwrap();
        store.verify("i").await.unwrap();
        common::sql(
            &url,
            &format!(
                "SET search_path = {schema};
                 DELETE FROM journal WHERE instance = 'i' AND seq = 5;
                 UPDATE chain_heads SET head_seq = 4, head_hash =
                   (SELECT hash FROM journal WHERE instance = 'i' AND seq = 4)
                 WHERE instance = 'i';"
            ),
        )
        .await;
        let e = match store.verify("i").await.unwrap_err() {
            Error::Chain(e) => e,
            other => panic!("expected a chain error, got {other}"),
        };
        assert_eq!(
            (e.seq, e.reason),
            (
                5,
                ChainFault::TailMissing {
                    recorded_seq: 5,
                    witness: weft_store::Witness::InstanceRecord
                }
            )
        );
    })
    .await;
}
