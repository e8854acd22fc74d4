//! The journal end to end on SQLite and PostgreSQL: runs live and again from the journal
//! (replay equality), recovery of in-flight actions (idempotent → same key again;
//! otherwise `outcome_unknown`), time travel, checkpoints and forks, compaction of reactive
//! instances, and clear errors for a corrupt file and a journal from a newer weft.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use weft_core::Status;
use weft_durable::{Durable, DurableConfig, Entry, RECORD_VERSION};
use weft_store::{NewRecord, Store};

async fn settle_status(d: &Durable, id: &str) {
    // The status update after `wait` runs in the background.
    for _ in 0..200 {
        if d.store()
            .get_instance(id)
            .await
            .unwrap()
            .is_some_and(|r| r.status.is_terminal())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("status of {id} never became terminal");
}

/// A chain, fanout-free two-step and the bench chain: live result, replay equality with
/// the live core instance, chain verification, and inspect at every seq.
async fn live_and_replayed(store: Arc<dyn Store>) {
    let d = durable(Arc::clone(&store), false, DurableConfig::default()).await;
    d.register("t", weft_bench::engine::workloads::chain_plan("chain5", 5))
        .await
        .unwrap();
    d.register("t", two_step("two", "once")).await.unwrap();
    for plan in ["chain5", "two"] {
        let h = d.start("t", plan, json!({"run": 7})).unwrap();
        let o = d.wait(&h).await.unwrap();
        assert_eq!(o.status, Status::Completed, "{plan}: {o:?}");
        let live = h.core_instance().unwrap();
        let rep = weft_durable::replay(store.as_ref(), d.engine(), h.id(), Some(&live))
            .await
            .unwrap();
        assert!(
            rep.matches,
            "{plan}: replay differs from the live run: {rep:?}"
        );
        let v = weft_durable::verify(store.as_ref(), h.id()).await.unwrap();
        assert!(v.records > 0);
        let ins = weft_durable::inspect(store.as_ref(), d.engine(), h.id(), None)
            .await
            .unwrap();
        assert_eq!(ins.status, "completed");
        assert_eq!(ins.at, ins.head);
        // Dispatches are journaled for non-idempotent tools (`once`).
        assert_eq!(
            ins.events.iter().any(|e| e.kind == "action.dispatched"),
            plan == "two"
        );
        // Time travel: right after the start, the first step is in flight or waiting.
        let first = weft_durable::inspect(store.as_ref(), d.engine(), h.id(), Some(1))
            .await
            .unwrap();
        assert_eq!(first.at, 1);
        assert_eq!(first.status, "running");
        assert_eq!(first.in_flight.len(), 1, "{first:?}");
        assert!(!first.in_flight[0].dispatched);
        settle_status(&d, h.id()).await;
    }
    let bench = d.start("t", "chain5", json!({"run": 1})).unwrap();
    let o = d.wait(&bench).await.unwrap();
    let expected = json!({"run": 1, "s1": 1, "s2": 2, "s3": 3, "s4": 4, "s5": 5});
    assert_eq!(o.results[0].payloads[0].as_ref(), &expected);
    // Read back from the store alone.
    let f = d.folded(bench.id()).await.unwrap();
    let inst = f.instance.unwrap();
    let net = d.engine().plan("chain5").unwrap().net.clone();
    let got = inst.results(&net)[0].1[0].payload.clone();
    assert_eq!(got.as_ref(), &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_and_replayed_sqlite() {
    live_and_replayed(sqlite("live").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn live_and_replayed_postgres() {
    live_and_replayed(postgres("live").await).await;
}

/// Waits until the instance's `b` action is durably in flight (and, for a non-idempotent
/// tool, recorded as dispatched: idempotent dispatches are not journaled).
async fn until_dispatched(store: &dyn Store, d: &Durable, id: &str, idempotent: bool) {
    for _ in 0..400 {
        let ins = weft_durable::inspect(store, d.engine(), id, None).await;
        // Not found until the first flush created the instance record.
        if let Ok(ins) = ins
            && ins
                .in_flight
                .iter()
                .any(|a| a.step == "b" && (a.dispatched || idempotent))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("b was never dispatched durably");
}

async fn recovery(store: Arc<dyn Store>) {
    // Process 1: `b` hangs (its effect may or may not have happened).
    let d1 = durable(Arc::clone(&store), true, DurableConfig::default()).await;
    d1.register("t", two_step("idem", "hang_idem"))
        .await
        .unwrap();
    d1.register("t", two_step("once", "hang_once"))
        .await
        .unwrap();
    let hi = d1.start("t", "idem", json!({"x": 1})).unwrap();
    let ho = d1.start("t", "once", json!({"x": 2})).unwrap();
    until_dispatched(store.as_ref(), &d1, hi.id(), true).await;
    until_dispatched(store.as_ref(), &d1, ho.id(), false).await;
    let (idem_id, once_id) = (hi.id().to_string(), ho.id().to_string());
    // Process 2 over the same store ("after the crash"): tools finish now.
    let d2 = durable(Arc::clone(&store), false, DurableConfig::default()).await;
    let rep = d2.recover().await.unwrap();
    assert_eq!(rep.restored, 2, "{rep:?}");
    assert_eq!(rep.redispatched, 1);
    assert_eq!(rep.unknown, 1);
    for h in &rep.handles {
        let o = d2.wait(h).await.unwrap();
        if h.id() == idem_id {
            assert_eq!(o.status, Status::Completed, "{o:?}");
            // Same idempotency key, attempt 1 again.
            assert_eq!(
                o.results[0].payloads[0].as_ref(),
                &json!({"x": 1, "a": 1, "b": 1})
            );
        } else {
            assert_eq!(h.id(), once_id);
            let Status::Failed { reason } = &o.status else {
                panic!("expected failure, got {o:?}")
            };
            assert!(reason.contains("outcome_unknown"), "{reason}");
        }
        // The recovered run replays from its journal to the same state.
        let live = h.core_instance().unwrap();
        let r = weft_durable::replay(store.as_ref(), d2.engine(), h.id(), Some(&live))
            .await
            .unwrap();
        assert!(r.matches, "{r:?}");
        weft_durable::verify(store.as_ref(), h.id()).await.unwrap();
        settle_status(&d2, h.id()).await;
    }
    // New ids never collide with the old process's ids.
    d2.register("t", two_step("idem", "hang_idem"))
        .await
        .unwrap();
    let n = d2.start("t", "idem", json!({"x": 3})).unwrap();
    assert_ne!(n.id(), idem_id);
    assert_ne!(n.id(), once_id);
    d2.wait(&n).await.unwrap();
    // A third process finds nothing left to do.
    let d3 = durable(Arc::clone(&store), false, DurableConfig::default()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let rep = d3.recover().await.unwrap();
    assert_eq!(rep.restored, 0, "{rep:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_sqlite() {
    recovery(sqlite("recovery").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn recovery_postgres() {
    recovery(postgres("recovery").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_and_fork() {
    let (store, _) = sqlite("cp").await;
    let d = durable(Arc::clone(&store), false, DurableConfig::default()).await;
    d.register("t", two_step("two", "echo")).await.unwrap();
    let h = d.start("t", "two", json!({"x": 1})).unwrap();
    d.wait(&h).await.unwrap();
    let cp = weft_durable::checkpoint(store.as_ref(), h.id())
        .await
        .unwrap();
    assert!(cp.starts_with("cp-") && cp.len() == 67, "{cp}");
    assert_eq!(
        weft_durable::checkpoint_seq(store.as_ref(), h.id(), &cp)
            .await
            .unwrap(),
        store.last_seq(h.id()).await.unwrap()
    );
    // A checkpoint after the start: fork from there and run to the end again.
    let first = store.read(h.id(), 1, 1).await.unwrap();
    let cp1 = format!("cp-{}", first[0].hash.to_hex());
    let fork = d.resume(h.id(), Some(&cp1)).await.unwrap();
    assert_ne!(fork.id(), h.id());
    let o = d.wait(&fork).await.unwrap();
    assert_eq!(o.status, Status::Completed);
    assert_eq!(
        o.results[0].payloads[0].as_ref(),
        &json!({"x": 1, "a": 1, "b": 1})
    );
    // Resuming a finished instance from its head is refused clearly.
    let e = d.resume(h.id(), None).await.unwrap_err();
    assert_eq!(e.code(), "not_found");
    let e = d.resume(h.id(), Some("cp-00")).await.unwrap_err();
    assert_eq!(e.code(), "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reactive_compaction_keeps_the_journal_bounded() {
    let (store, _) = sqlite("compact").await;
    let cfg = DurableConfig {
        snapshot_every: Some(100),
        ..DurableConfig::default()
    };
    let d = durable(Arc::clone(&store), false, cfg).await;
    d.register("t", reactive("r")).await.unwrap();
    let h = d.start("t", "r", json!({})).unwrap();
    // Twenty rounds of 50 pings (two records each). Each round is taken into a batch
    // before the next starts, so batching (which depends on the machine's speed) cannot
    // fold the whole run into a few appends: a snapshot is due every round or two.
    for round in 0..20u64 {
        for i in 0..50 {
            d.engine()
                .ingest(
                    "t",
                    "ping",
                    json!({"i": round * 50 + i}),
                    None,
                    Some(h.id()),
                )
                .unwrap();
        }
        let want = 1 + 100 * (round + 1);
        let mut waited = 0;
        while d.journal().stats().records < want {
            assert!(waited < 2_000, "round {round}: {:?}", d.journal().stats());
            tokio::time::sleep(Duration::from_millis(5)).await;
            waited += 1;
        }
        d.journal().barrier(h.id()).await.unwrap();
    }
    // Compaction runs after the append that made it due: wait for it to land.
    let mut waited = 0;
    loop {
        let st = d.journal().stats();
        let kept = store.read(h.id(), 0, 10_000).await.unwrap().len();
        let settled = h.core_instance().is_some_and(|i| i.in_flight.is_empty());
        if (settled && st.snapshots >= 5 && st.truncated > 1_500 && kept <= 300) || waited >= 1_000
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        waited += 1;
    }
    let kept = store.read(h.id(), 0, 10_000).await.unwrap().len();
    assert!(kept <= 300, "kept {kept} records");
    let st = d.journal().stats();
    assert!(st.snapshots >= 5 && st.truncated > 1_500, "{st:?}");
    weft_durable::verify(store.as_ref(), h.id()).await.unwrap();
    // The batched load recovery uses = snapshot + the records after it.
    let loaded = store.load_many(&[h.id().to_string()]).await.unwrap();
    let snap = store.latest_snapshot(h.id()).await.unwrap().unwrap();
    assert_eq!(loaded[0].0.as_ref(), Some(&snap));
    assert_eq!(
        loaded[0].1,
        store.read(h.id(), snap.seq + 1, 10_000).await.unwrap()
    );
    // Rebuilt from snapshot + tail = the live state.
    let live = h.core_instance().unwrap();
    let r = weft_durable::replay(store.as_ref(), d.engine(), h.id(), Some(&live))
        .await
        .unwrap();
    assert!(r.matches, "{r:?}");
    assert!(r.snapshot_seq.is_some());
    // And it recovers from there in another process.
    let d2 = durable(Arc::clone(&store), false, DurableConfig::default()).await;
    let rep = d2.recover().await.unwrap();
    assert_eq!(rep.restored, 1, "{rep:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_journal_and_corrupt_file_give_clear_errors() {
    let (store, path) = sqlite("faults").await;
    let d = durable(Arc::clone(&store), false, DurableConfig::default()).await;
    d.register("t", two_step("two", "echo")).await.unwrap();
    let h = d.start("t", "two", json!({})).unwrap();
    d.wait(&h).await.unwrap();
    // An instance whose journal was written by a newer weft.
    let rec = store.get_instance(h.id()).await.unwrap().unwrap();
    let mut newer = rec.clone();
    newer.id = "i999999999999".into();
    newer.status = weft_store::InstanceStatus::Running;
    store.create_instance(newer.clone()).await.unwrap();
    let body = json!({"v": RECORD_VERSION + 1, "tenant": "t", "plan": "two", "plan_version": 1, "input": {}, "now": 0});
    store
        .append(
            &newer.id,
            vec![NewRecord::json("instance.started", &body, 0).unwrap()],
        )
        .await
        .unwrap();
    let e = weft_durable::inspect(store.as_ref(), d.engine(), &newer.id, None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "journal_too_new", "{e}");
    assert!(e.to_string().contains("upgrade weft"));
    let rep = d.recover().await.unwrap();
    assert!(
        rep.errors
            .iter()
            .any(|(id, m)| id == &newer.id && m.contains("journal_too_new")),
        "{rep:?}"
    );
    // Unknown record kinds are named.
    let r = weft_store::Record {
        seq: 1,
        kind: "instance.teleported".into(),
        body: b"{}".to_vec(),
        at_ms: 0,
        prev_hash: weft_store::GENESIS,
        hash: weft_store::GENESIS,
    };
    let e = Entry::from_record(&r).unwrap_err();
    assert!(e.to_string().contains("instance.teleported"), "{e}");
    drop(d);
    drop(store);
    // A corrupt database file.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let len = std::fs::metadata(&path).unwrap().len();
    let mut bytes = std::fs::read(&path).unwrap();
    for b in bytes.iter_mut().take(4096).skip(16) {
        *b = 0x5a;
    }
    let _ = std::fs::remove_file(path.with_extension("db-wal"));
    let _ = std::fs::remove_file(path.with_extension("db-shm"));
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    let e = weft_store_sqlite::SqliteStore::open(&path)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "store_corrupt", "{e}");
    let _: Value = json!(e.to_string());
}
