//! Conformance cases for the journal: sequence numbers, atomic batches, reads, the hash
//! chain, concurrency, snapshots and compaction.

use std::sync::Arc;

use crate::{Error, GENESIS, Hash, NewRecord, Snapshot, Store};

fn rec(kind: &str, n: u64) -> NewRecord {
    NewRecord {
        kind: kind.to_string(),
        body: format!("{{\"n\":{n}}}").into_bytes(),
        at_ms: 1_000 + n as i64,
    }
}

fn recs(n: u64) -> Vec<NewRecord> {
    (0..n).map(|i| rec("step.fired", i)).collect()
}

/// Seqs start at 1, are contiguous across batches, and each record chains to the previous.
pub async fn append_assigns_contiguous_seqs_and_chains(s: Arc<dyn Store>) {
    let a = s.append("i1", recs(3)).await.unwrap();
    assert_eq!((a.first_seq, a.last_seq), (1, 3));
    let b = s.append("i1", recs(2)).await.unwrap();
    assert_eq!(b.seqs().collect::<Vec<_>>(), vec![4, 5]);
    assert_eq!(s.last_seq("i1").await.unwrap(), 5);
    let all = s.read("i1", 1, 100).await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    let mut prev = GENESIS;
    for r in &all {
        assert_eq!(r.prev_hash, prev);
        assert_eq!(
            r.hash,
            Hash::of_record(&prev, r.seq, &r.kind, &r.body, r.at_ms)
        );
        prev = r.hash;
    }
    assert_eq!(b.head, prev);
    assert_eq!(s.head("i1").await.unwrap(), Some((5, prev)));
    assert_eq!(all[3].body, b"{\"n\":0}".to_vec());
    assert_eq!(all[3].at_ms, 1_000);
}

/// An empty batch returns the head and writes nothing.
pub async fn empty_append_changes_nothing(s: Arc<dyn Store>) {
    let e = s.append("i", vec![]).await.unwrap();
    assert_eq!((e.first_seq, e.last_seq, e.head), (1, 0, GENESIS));
    s.append("i", recs(2)).await.unwrap();
    let e = s.append("i", vec![]).await.unwrap();
    assert_eq!((e.first_seq, e.last_seq), (3, 2));
    assert_eq!(s.last_seq("i").await.unwrap(), 2);
}

/// A batch with an invalid record is refused whole.
pub async fn append_rejects_empty_kind(s: Arc<dyn Store>) {
    let mut batch = recs(2);
    batch.push(rec("", 9));
    let err = s.append("i", batch).await.unwrap_err();
    assert_eq!(err.code(), "invalid_input");
    assert_eq!(s.last_seq("i").await.unwrap(), 0);
    assert!(s.read("i", 1, 10).await.unwrap().is_empty());
}

/// `read` honours `from_seq` and `limit`.
pub async fn read_from_seq_with_limit(s: Arc<dyn Store>) {
    s.append("i", recs(10)).await.unwrap();
    let page = s.read("i", 4, 3).await.unwrap();
    assert_eq!(
        page.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![4, 5, 6]
    );
    assert!(s.read("i", 11, 3).await.unwrap().is_empty());
    assert_eq!(s.read("i", 0, 100).await.unwrap().len(), 10);
    assert!(s.read("nobody", 1, 10).await.unwrap().is_empty());
    assert_eq!(s.last_seq("nobody").await.unwrap(), 0);
}

/// Each instance has its own sequence and chain.
pub async fn journals_are_per_instance(s: Arc<dyn Store>) {
    s.append("a", recs(2)).await.unwrap();
    let b = s.append("b", recs(1)).await.unwrap();
    assert_eq!(b.first_seq, 1);
    assert_eq!(s.read("b", 1, 10).await.unwrap()[0].prev_hash, GENESIS);
    s.verify("a").await.unwrap();
    s.verify("b").await.unwrap();
}

/// Bodies are bytes, kept exactly (not re-encoded), including large ones.
pub async fn binary_and_large_bodies_round_trip(s: Arc<dyn Store>) {
    let binary: Vec<u8> = (0..=255u8).collect();
    let large = vec![b'x'; 1 << 20];
    let json = b"{ \"b\" : 1,  \"a\": 2 }".to_vec();
    let batch = vec![
        NewRecord {
            kind: "bin".into(),
            body: binary.clone(),
            at_ms: -5,
        },
        NewRecord {
            kind: "large".into(),
            body: large.clone(),
            at_ms: i64::MAX,
        },
        NewRecord {
            kind: "json".into(),
            body: json.clone(),
            at_ms: 0,
        },
        NewRecord {
            kind: "empty".into(),
            body: vec![],
            at_ms: 0,
        },
    ];
    s.append("i", batch).await.unwrap();
    let got = s.read("i", 1, 10).await.unwrap();
    assert_eq!(got[0].body, binary);
    assert_eq!(got[0].at_ms, -5);
    assert_eq!(got[1].body, large);
    assert_eq!(got[1].at_ms, i64::MAX);
    assert_eq!(got[2].body, json);
    assert!(got[3].body.is_empty());
    s.verify("i").await.unwrap();
}

/// `verify` passes on intact journals and reports what it covered.
pub async fn verify_reports_intact_chains(s: Arc<dyn Store>) {
    let empty = s.verify("none").await.unwrap();
    assert_eq!((empty.records, empty.to_seq, empty.head), (0, 0, GENESIS));
    // More than one verify page.
    for _ in 0..3 {
        s.append("i", recs(700)).await.unwrap();
    }
    let rep = s.verify("i").await.unwrap();
    assert_eq!((rep.from_seq, rep.to_seq, rep.records), (1, 2_100, 2_100));
    assert_eq!(Some((2_100, rep.head)), s.head("i").await.unwrap());
}

/// 50 tasks each append 10 batches to their own instance: contiguous seqs, valid chains.
pub async fn concurrent_appends_to_many_instances(s: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..50)
        .map(|t| {
            let s = s.clone();
            tokio::spawn(async move {
                let inst = format!("inst-{t}");
                for b in 0..10u64 {
                    let a = s.append(&inst, recs(1 + b % 3)).await.unwrap();
                    assert_eq!(a.last_seq - a.first_seq, b % 3);
                }
            })
        })
        .collect();
    for t in futures::future::join_all(tasks).await {
        t.unwrap();
    }
    let expected: u64 = (0..10u64).map(|b| 1 + b % 3).sum();
    for t in 0..50 {
        let inst = format!("inst-{t}");
        let rep = s.verify(&inst).await.unwrap();
        assert_eq!(rep.records, expected, "{inst}");
    }
}

/// Concurrent appenders to one instance serialize: no duplicate seq, no fork.
pub async fn concurrent_appends_to_one_instance(s: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..5 {
                    got.extend(s.append("shared", recs(2)).await.unwrap().seqs());
                }
                got
            })
        })
        .collect();
    let mut all: Vec<u64> = Vec::new();
    for t in futures::future::join_all(tasks).await {
        let seqs = t.unwrap();
        // Each batch's two records are adjacent.
        for pair in seqs.chunks(2) {
            assert_eq!(pair[1], pair[0] + 1);
        }
        all.extend(seqs);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=200).collect::<Vec<u64>>());
    assert_eq!(s.verify("shared").await.unwrap().records, 200);
}

/// The latest snapshot wins; a snapshot must match the record it claims to follow.
pub async fn snapshots_latest_and_hash_checked(s: Arc<dyn Store>) {
    assert!(s.latest_snapshot("i").await.unwrap().is_none());
    let a = s.append("i", recs(4)).await.unwrap();
    let recs_now = s.read("i", 1, 10).await.unwrap();
    let snap = |seq: u64, hash: Hash| Snapshot {
        seq,
        hash,
        state: format!("state@{seq}").into_bytes(),
        at_ms: 5,
    };
    s.put_snapshot("i", snap(2, recs_now[1].hash))
        .await
        .unwrap();
    s.put_snapshot("i", snap(4, a.head)).await.unwrap();
    let latest = s.latest_snapshot("i").await.unwrap().unwrap();
    assert_eq!((latest.seq, latest.hash), (4, a.head));
    assert_eq!(latest.state, b"state@4".to_vec());
    let wrong = s.put_snapshot("i", snap(3, a.head)).await.unwrap_err();
    assert_eq!(wrong.code(), "invalid_input");
    let beyond = s.put_snapshot("i", snap(9, a.head)).await.unwrap_err();
    assert_eq!(beyond.code(), "invalid_input");
    // Same seq again replaces.
    let mut again = snap(4, a.head);
    again.state = b"v2".to_vec();
    s.put_snapshot("i", again).await.unwrap();
    assert_eq!(
        s.latest_snapshot("i").await.unwrap().unwrap().state,
        b"v2".to_vec()
    );
}

/// Compaction needs a covering snapshot; afterwards verify starts at the base, and appends
/// continue the chain.
pub async fn truncate_needs_snapshot_and_verify_starts_at_base(s: Arc<dyn Store>) {
    s.append("i", recs(10)).await.unwrap();
    let err = s.truncate_before("i", 6).await.unwrap_err();
    assert!(matches!(err, Error::NoSnapshot { .. }), "{err}");
    let r5 = s.read("i", 5, 1).await.unwrap().remove(0);
    s.put_snapshot(
        "i",
        Snapshot {
            seq: 5,
            hash: r5.hash,
            state: vec![1],
            at_ms: 0,
        },
    )
    .await
    .unwrap();
    assert_eq!(s.truncate_before("i", 6).await.unwrap(), 5);
    assert_eq!(s.chain_base("i").await.unwrap(), (5, r5.hash));
    assert_eq!(s.read("i", 1, 100).await.unwrap()[0].seq, 6);
    let rep = s.verify("i").await.unwrap();
    assert_eq!((rep.from_seq, rep.to_seq, rep.records), (6, 10, 5));
    s.append("i", recs(2)).await.unwrap();
    assert_eq!(s.verify("i").await.unwrap().to_seq, 12);
    // Truncating below the base is a no-op.
    assert_eq!(s.truncate_before("i", 3).await.unwrap(), 0);
    assert_eq!(s.latest_snapshot("i").await.unwrap().unwrap().seq, 5);
    // Truncating everything behind a snapshot at the head.
    let head = s.head("i").await.unwrap().unwrap();
    s.put_snapshot(
        "i",
        Snapshot {
            seq: head.0,
            hash: head.1,
            state: vec![2],
            at_ms: 0,
        },
    )
    .await
    .unwrap();
    assert_eq!(s.truncate_before("i", head.0 + 1).await.unwrap(), 7);
    let rep = s.verify("i").await.unwrap();
    assert_eq!((rep.records, rep.head), (0, head.1));
    let next = s.append("i", recs(1)).await.unwrap();
    assert_eq!(next.first_seq, 13);
    assert_eq!(s.read("i", 0, 10).await.unwrap()[0].prev_hash, head.1);
    s.verify("i").await.unwrap();
}

/// `load_many` answers, per instance and in the order asked, exactly what
/// `latest_snapshot` + `read` after it give: no snapshot (the whole journal), a snapshot
/// with records kept before it (only the tail), a compacted journal, an unknown instance
/// (nothing), an instance asked twice.
pub async fn load_many_gives_snapshot_and_tail(s: Arc<dyn Store>) {
    s.append("la", recs(3)).await.unwrap();
    s.append("lb", recs(4)).await.unwrap();
    let b2 = s.read("lb", 2, 1).await.unwrap().remove(0);
    let snap = |seq: u64, hash: Hash, tag: &str| Snapshot {
        seq,
        hash,
        state: tag.as_bytes().to_vec(),
        at_ms: 7,
    };
    s.put_snapshot(
        "lb",
        snap(1, s.read("lb", 1, 1).await.unwrap()[0].hash, "b1"),
    )
    .await
    .unwrap();
    s.put_snapshot("lb", snap(2, b2.hash, "b2")).await.unwrap();
    s.append("lc", recs(5)).await.unwrap();
    let c3 = s.read("lc", 3, 1).await.unwrap().remove(0);
    s.put_snapshot("lc", snap(3, c3.hash, "c3")).await.unwrap();
    s.truncate_before("lc", 4).await.unwrap();
    let ids: Vec<String> = ["lc", "none", "la", "lb", "la"]
        .iter()
        .map(|x| x.to_string())
        .collect();
    let got = s.load_many(&ids).await.unwrap();
    assert_eq!(got.len(), ids.len());
    for (id, (snap, records)) in ids.iter().zip(&got) {
        let want_snap = s.latest_snapshot(id).await.unwrap();
        let from = want_snap.as_ref().map_or(1, |x| x.seq + 1);
        let want = s.read(id, from, 1_000).await.unwrap();
        assert_eq!(snap, &want_snap, "{id}");
        assert_eq!(records, &want, "{id}");
    }
    let seqs = |i: usize| got[i].1.iter().map(|r| r.seq).collect::<Vec<_>>();
    assert_eq!(seqs(0), [4, 5]);
    assert!(got[1].0.is_none() && got[1].1.is_empty());
    assert_eq!(seqs(2), [1, 2, 3]);
    assert_eq!(got[3].0.as_ref().unwrap().state, b"b2");
    assert_eq!(seqs(3), [3, 4]);
    assert_eq!(seqs(4), [1, 2, 3]);
    assert!(s.load_many(&[]).await.unwrap().is_empty());
}
