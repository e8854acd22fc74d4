//! Two durable engines (two `weft` processes) on one store: every instance is leased to
//! the engine that drives it and every journal write is fenced by that lease, so the
//! second engine cannot drive the first one's instances, takes them over only after the
//! lease expired, and from then on the first one's writes are refused (`lease_lost`) and
//! it stops driving them. Runs on SQLite and PostgreSQL (ignored unless
//! `WEFT_TEST_POSTGRES_URL` was set at build time).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;
use weft_core::Status;
use weft_durable::{Durable, DurableConfig, Entry};
use weft_store::{Store, now_ms};

fn config(owner: &str, ttl_ms: i64, renew_ms: u64) -> DurableConfig {
    DurableConfig {
        owner: Some(owner.to_string()),
        lease_ttl_ms: ttl_ms,
        lease_renew_ms: renew_ms,
        ..DurableConfig::default()
    }
}

async fn kinds(store: &dyn Store, id: &str) -> Vec<&'static str> {
    store
        .read(id, 1, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|r| Entry::from_record(r).unwrap().kind())
        .collect()
}

fn pings(k: &[&str]) -> usize {
    k.iter().filter(|x| **x == "token.added").count()
}

/// The instance's record kinds once `want` pings are durable (or after ~10 s). An
/// `ingest` returns before its ping is recorded when a worker holds the instance's loop
/// (a recovered action's result, say): the ping waits in the mailbox for that worker, so
/// one barrier is not enough.
async fn durable_pings(d: &Durable, store: &dyn Store, id: &str, want: usize) -> Vec<&'static str> {
    let mut k = Vec::new();
    for _ in 0..2_000 {
        d.journal().barrier(id).await.unwrap();
        k = kinds(store, id).await;
        if pings(&k) >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    k
}

async fn second_engine_waits_for_the_lease(store: Arc<dyn Store>) {
    // p1 never renews (as if it hung): its 4 s lease runs out.
    let d1 = durable(Arc::clone(&store), false, config("p1", 4_000, 3_600_000)).await;
    d1.register("t", reactive("r")).await.unwrap();
    let h = d1.start("t", "r", json!({})).unwrap();
    let id = h.id().to_string();
    d1.engine()
        .ingest("t", "ping", json!({"n": 1}), None, Some(&id))
        .unwrap();
    d1.journal().barrier(&id).await.unwrap();
    let lease = store.owner_of(&id, now_ms()).await.unwrap().unwrap();
    assert_eq!((lease.owner.as_str(), lease.epoch), ("p1", 1));

    // p2 cannot drive it while p1's lease is live.
    let d2 = durable(Arc::clone(&store), false, config("p2", 30_000, 10_000)).await;
    let rep = d2.recover().await.unwrap();
    assert_eq!((rep.restored, rep.leased_elsewhere), (0, 1), "{rep:?}");
    let err = d2.restore(&id).await.unwrap_err();
    assert_eq!(err.code(), "leased_elsewhere", "{err}");
    assert!(err.to_string().contains("`p1`"), "{err}");

    // After expiry p2 takes it over (epoch 2) and recovers it.
    let mut expired = false;
    for _ in 0..400 {
        if store.owner_of(&id, now_ms()).await.unwrap().is_none() {
            expired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(expired, "p1's lease never expired");
    let rep = d2.recover().await.unwrap();
    assert_eq!((rep.restored, rep.leased_elsewhere), (1, 0), "{rep:?}");
    let lease = store.owner_of(&id, now_ms()).await.unwrap().unwrap();
    assert_eq!((lease.owner.as_str(), lease.epoch), ("p2", 2));
    let head = store.last_seq(&id).await.unwrap();

    // p1 still has the instance in memory; its next write is refused and it stops.
    d1.engine()
        .ingest("t", "ping", json!({"n": 2, "from": "p1"}), None, Some(&id))
        .unwrap();
    let err = d1.journal().barrier(&id).await.unwrap_err();
    assert!(err.to_string().contains("lease_lost"), "{err}");
    let mut paused = None;
    for _ in 0..400 {
        if let Status::Paused { reason } = h.state().status {
            paused = Some(reason);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let Some(reason) = paused else {
        panic!(
            "p1 kept driving an instance it lost: {err} / {:?}",
            h.state()
        );
    };
    assert!(reason.starts_with("lease_lost:"), "{reason}");
    assert_eq!(
        store.last_seq(&id).await.unwrap(),
        head,
        "p1 wrote after losing"
    );

    // p2 drives it on: its records go after the ones p1 wrote while it held the lease.
    d2.engine()
        .ingest("t", "ping", json!({"n": 3, "from": "p2"}), None, Some(&id))
        .unwrap();
    let k = durable_pings(&d2, store.as_ref(), &id, 2).await;
    assert!(store.last_seq(&id).await.unwrap() > head);
    assert_eq!(pings(&k), 2, "exactly p1's first ping and p2's: {k:?}");
    let body = store.read(&id, 1, 10_000).await.unwrap();
    assert!(
        !body
            .iter()
            .any(|r| String::from_utf8_lossy(&r.body).contains("\"from\":\"p1\"")),
        "p1's ping after the takeover reached the journal"
    );
    weft_durable::verify(store.as_ref(), &id).await.unwrap();
    // p1's status writes are fenced too: the record stays p2's (running).
    assert_eq!(
        store.get_instance(&id).await.unwrap().unwrap().status,
        weft_store::InstanceStatus::Running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_engine_waits_for_the_lease_sqlite() {
    second_engine_waits_for_the_lease(sqlite("lease").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn second_engine_waits_for_the_lease_postgres() {
    second_engine_waits_for_the_lease(postgres("lease").await).await;
}

/// The engine renews the leases of the instances it drives in the background.
async fn leases_are_renewed(store: Arc<dyn Store>) {
    let d: Durable = durable(Arc::clone(&store), false, config("p1", 60_000, 100)).await;
    d.register("t", reactive("r")).await.unwrap();
    let h = d.start("t", "r", json!({})).unwrap();
    d.journal().barrier(h.id()).await.unwrap();
    let first = store.owner_of(h.id(), now_ms()).await.unwrap().unwrap();
    let mut renewed = false;
    for _ in 0..400 {
        let l = store.owner_of(h.id(), now_ms()).await.unwrap().unwrap();
        assert_eq!((l.owner.as_str(), l.epoch), ("p1", 1));
        if l.expires_at_ms > first.expires_at_ms {
            renewed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(renewed, "the lease was never renewed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_renewed_sqlite() {
    leases_are_renewed(sqlite("renew").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn leases_are_renewed_postgres() {
    leases_are_renewed(postgres("renew").await).await;
}

/// Graceful shutdown: what was recorded is durable, the engine stops driving its
/// instances and releases their leases, so a second engine recovers them at once (long
/// before the 60 s lease would expire), with a higher epoch; the first engine writes
/// nothing of them any more.
async fn shutdown_releases_leases(store: Arc<dyn Store>) {
    let d1 = durable(Arc::clone(&store), false, config("p1", 60_000, 3_600_000)).await;
    d1.register("t", reactive("r")).await.unwrap();
    let h = d1.start("t", "r", json!({})).unwrap();
    let id = h.id().to_string();
    d1.engine()
        .ingest("t", "ping", json!({"n": 1}), None, Some(&id))
        .unwrap();
    // Not waited for: shutdown makes it durable before letting go.
    assert_eq!(d1.shutdown().await.unwrap(), 1);
    assert!(
        store.owner_of(&id, now_ms()).await.unwrap().is_none(),
        "the lease is still live after shutdown"
    );
    let head = store.last_seq(&id).await.unwrap();
    assert_eq!(pings(&kinds(store.as_ref(), &id).await), 1);

    let d2 = durable(Arc::clone(&store), false, config("p2", 60_000, 3_600_000)).await;
    let rep = d2.recover().await.unwrap();
    assert_eq!((rep.restored, rep.leased_elsewhere), (1, 0), "{rep:?}");
    let lease = store.owner_of(&id, now_ms()).await.unwrap().unwrap();
    assert_eq!((lease.owner.as_str(), lease.epoch), ("p2", 2));

    // p1 no longer drives it: its input is not journaled, and it is paused locally.
    let _ = d1
        .engine()
        .ingest("t", "ping", json!({"n": 2, "from": "p1"}), None, Some(&id));
    assert!(d1.journal().barrier(&id).await.is_err());
    assert!(
        matches!(&h.state().status, Status::Paused { reason } if reason.starts_with("shut_down:")),
        "{:?}",
        h.state().status
    );
    // (p2 may have written since: the recovered ping's action, dispatched again.)
    let body = store.read(&id, 1, 10_000).await.unwrap();
    assert!(
        !body
            .iter()
            .any(|r| String::from_utf8_lossy(&r.body).contains("\"from\":\"p1\"")),
        "p1's ping after shutdown reached the journal"
    );
    assert!(store.last_seq(&id).await.unwrap() >= head);
    // A start after shutdown is not journaled either.
    assert!(d1.start("t", "r", json!({})).is_ok());
    assert_eq!(d1.shutdown().await.unwrap(), 0);

    d2.engine()
        .ingest("t", "ping", json!({"n": 3}), None, Some(&id))
        .unwrap();
    let k = durable_pings(&d2, store.as_ref(), &id, 2).await;
    assert_eq!(pings(&k), 2, "{k:?}");
    weft_durable::verify(store.as_ref(), &id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_leases_sqlite() {
    shutdown_releases_leases(sqlite("shutdown").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn shutdown_releases_leases_postgres() {
    shutdown_releases_leases(postgres("shutdown").await).await;
}
