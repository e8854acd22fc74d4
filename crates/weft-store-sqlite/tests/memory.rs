//! The writer thread remembers chain heads and lease rows (`src/cache.rs`). These tests
//! make it wrong the one way a test can from outside: a second store writing the same file,
//! as a second `weft` process would. The first store must chain on from the second's
//! records (not fork the chain) and honour the lease the second took over.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use weft_store::{Error, Fence, NewRecord, Store};
use weft_store_sqlite::SqliteStore;

fn temp(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("weft-sqlite-memory-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("weft.db")
}

fn records(n: std::ops::RangeInclusive<i64>) -> Vec<NewRecord> {
    n.map(|k| NewRecord {
        kind: "step".into(),
        body: format!("{{\"n\":{k}}}").into_bytes(),
        at_ms: k,
    })
    .collect()
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
