//! Conformance cases for everything beside the journal: plans, instance records, timers,
//! idempotency records, leases and shared counters.

use std::sync::Arc;

use serde_json::json;

use crate::{
    CountRow, Counts, EffectRecorded, InstanceRecord, InstanceStatus, Page, PlanStatus, Store,
    Timer,
};

/// An instance record of plan `p` version 1 (for the cases and backends' own tests).
pub fn instance(id: &str, tenant: &str, status: InstanceStatus) -> InstanceRecord {
    InstanceRecord {
        id: id.to_string(),
        tenant: tenant.to_string(),
        plan_name: "p".to_string(),
        plan_version: 1,
        status,
        reason: None,
        created_at_ms: 10,
        updated_at_ms: 10,
        parent: None,
    }
}

/// Versions count per (tenant, name); status changes stick; documents round-trip in order.
pub async fn plans_versioned_with_status(s: Arc<dyn Store>) {
    let doc1 = json!({"plan_name": "a", "steps": {"z": 1, "a": 2}});
    let doc2 = json!({"plan_name": "a", "v": 2});
    assert_eq!(s.put_plan("t1", "a", doc1.clone(), 1).await.unwrap(), 1);
    assert_eq!(s.put_plan("t1", "a", doc2.clone(), 2).await.unwrap(), 2);
    assert_eq!(s.put_plan("t1", "b", json!({}), 3).await.unwrap(), 1);
    assert_eq!(s.put_plan("t2", "a", json!({}), 4).await.unwrap(), 1);
    let latest = s.get_plan("t1", "a", None).await.unwrap().unwrap();
    assert_eq!((latest.info.version, &latest.document), (2, &doc2));
    assert_eq!(latest.info.status, PlanStatus::Template);
    let v1 = s.get_plan("t1", "a", Some(1)).await.unwrap().unwrap();
    assert_eq!(
        serde_json::to_string(&v1.document).unwrap(),
        serde_json::to_string(&doc1).unwrap()
    );
    assert_eq!(v1.info.created_at_ms, 1);
    assert!(s.get_plan("t1", "a", Some(3)).await.unwrap().is_none());
    assert!(s.get_plan("t3", "a", None).await.unwrap().is_none());
    s.set_plan_status("t1", "a", 1, PlanStatus::Archived)
        .await
        .unwrap();
    s.set_plan_status("t1", "a", 2, PlanStatus::Active)
        .await
        .unwrap();
    let err = s
        .set_plan_status("t1", "a", 7, PlanStatus::Active)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "not_found");
    let list = s.list_plans("t1").await.unwrap();
    let summary: Vec<_> = list
        .iter()
        .map(|p| (p.name.as_str(), p.version, p.status))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("a", 1, PlanStatus::Archived),
            ("a", 2, PlanStatus::Active),
            ("b", 1, PlanStatus::Template)
        ]
    );
}

/// Tool versions count per (tenant, name), deletions are versions too, and listing is
/// per tenant or across tenants, ordered by tenant, name and version.
pub async fn tools_versioned_per_tenant(s: Arc<dyn Store>) {
    let def = |n: i64| json!({"name": "crm", "source": {"kind": "fixed", "result": n}});
    assert_eq!(s.put_tool("t1", "crm", Some(def(1)), 10).await.unwrap(), 1);
    assert_eq!(s.put_tool("t1", "crm", Some(def(2)), 11).await.unwrap(), 2);
    assert_eq!(s.put_tool("t1", "crm", None, 12).await.unwrap(), 3);
    assert_eq!(s.put_tool("t2", "crm", Some(def(3)), 13).await.unwrap(), 1);
    assert_eq!(s.put_tool("t1", "a", Some(def(4)), 14).await.unwrap(), 1);
    let t1 = s.list_tools(Some("t1")).await.unwrap();
    let summary: Vec<_> = t1
        .iter()
        .map(|r| {
            (
                r.tenant.as_str(),
                r.name.as_str(),
                r.version,
                r.definition.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("t1", "a", 1, Some(def(4))),
            ("t1", "crm", 1, Some(def(1))),
            ("t1", "crm", 2, Some(def(2))),
            ("t1", "crm", 3, None),
        ]
    );
    assert_eq!(t1[3].created_at_ms, 12);
    let all = s.list_tools(None).await.unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(
        (all[4].tenant.as_str(), all[4].definition.clone()),
        ("t2", Some(def(3)))
    );
    assert!(s.list_tools(Some("t3")).await.unwrap().is_empty());
}

/// Instances are listed by tenant and status with keyset paging; recovery sees only
/// non-terminal ones.
pub async fn instances_created_listed_and_paged(s: Arc<dyn Store>) {
    for i in 0..7 {
        let st = if i % 2 == 0 {
            InstanceStatus::Running
        } else {
            InstanceStatus::Completed
        };
        s.create_instance(instance(&format!("i{i}"), "t1", st))
            .await
            .unwrap();
    }
    let mut child = instance("c1", "t2", InstanceStatus::Paused);
    child.parent = Some("i0".into());
    s.create_instance(child.clone()).await.unwrap();
    assert_eq!(s.get_instance("c1").await.unwrap(), Some(child));
    assert!(s.get_instance("zz").await.unwrap().is_none());

    let running = s
        .list_instances("t1", Some(InstanceStatus::Running), Page::first(100))
        .await
        .unwrap();
    assert_eq!(
        running.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["i0", "i2", "i4", "i6"]
    );
    let p1 = s.list_instances("t1", None, Page::first(3)).await.unwrap();
    assert_eq!(
        p1.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["i0", "i1", "i2"]
    );
    let p2 = s
        .list_instances(
            "t1",
            None,
            Page {
                after: Some("i2".into()),
                limit: 3,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        p2.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["i3", "i4", "i5"]
    );
    assert_eq!(
        s.list_instances("t1", None, Page::first(0))
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );

    s.update_status("i0", InstanceStatus::Failed, Some("boom".into()), 99)
        .await
        .unwrap();
    let i0 = s.get_instance("i0").await.unwrap().unwrap();
    assert_eq!(
        (i0.status, i0.reason.as_deref(), i0.updated_at_ms),
        (InstanceStatus::Failed, Some("boom"), 99)
    );
    assert_eq!(i0.created_at_ms, 10);
    let live = s.non_terminal_instances(Page::first(100)).await.unwrap();
    assert_eq!(
        live.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["c1", "i2", "i4", "i6"]
    );
    let live2 = s
        .non_terminal_instances(Page {
            after: Some("i2".into()),
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(live2[0].id, "i4");
}

/// Creating an existing id is a conflict; updating a missing one is not_found.
pub async fn instance_conflicts_and_missing(s: Arc<dyn Store>) {
    s.create_instance(instance("x", "t", InstanceStatus::Running))
        .await
        .unwrap();
    let err = s
        .create_instance(instance("x", "t", InstanceStatus::Running))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "conflict");
    let err = s
        .update_status("y", InstanceStatus::Stopped, None, 1)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "not_found");
}

/// Due timers come earliest first, up to the limit; put moves a timer; delete removes it.
pub async fn timers_due_in_order(s: Arc<dyn Store>) {
    let t = |inst: &str, id: &str, due: i64| Timer {
        instance: inst.into(),
        timer_id: id.into(),
        due_ms: due,
        payload: json!({"id": id}),
    };
    s.put_timer(t("a", "t1", 300)).await.unwrap();
    s.put_timer(t("a", "t2", 100)).await.unwrap();
    s.put_timer(t("b", "t1", 200)).await.unwrap();
    s.put_timer(t("b", "t9", 5_000)).await.unwrap();
    let due = s.due_timers(300, 10).await.unwrap();
    let ids: Vec<_> = due
        .iter()
        .map(|t| (t.instance.as_str(), t.timer_id.as_str(), t.due_ms))
        .collect();
    assert_eq!(ids, [("a", "t2", 100), ("b", "t1", 200), ("a", "t1", 300)]);
    assert_eq!(due[0].payload, json!({"id": "t2"}));
    assert_eq!(s.due_timers(300, 1).await.unwrap().len(), 1);
    s.put_timer(t("a", "t2", 10_000)).await.unwrap();
    assert_eq!(s.due_timers(300, 10).await.unwrap().len(), 2);
    assert!(s.delete_timer("b", "t1").await.unwrap());
    assert!(!s.delete_timer("b", "t1").await.unwrap());
    assert_eq!(s.due_timers(i64::MAX, 10).await.unwrap().len(), 3);
}

/// The first outcome recorded under a key wins, concurrently too.
pub async fn effects_recorded_once(s: Arc<dyn Store>) {
    assert!(s.get_effect("k").await.unwrap().is_none());
    assert_eq!(
        s.record_effect("k", json!({"ok": 1})).await.unwrap(),
        EffectRecorded::Inserted
    );
    assert_eq!(
        s.record_effect("k", json!({"ok": 2})).await.unwrap(),
        EffectRecorded::AlreadyExists(json!({"ok": 1}))
    );
    assert_eq!(s.get_effect("k").await.unwrap(), Some(json!({"ok": 1})));
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.record_effect("race", json!(i)).await.unwrap() })
        })
        .collect();
    let inserted = futures::future::join_all(tasks)
        .await
        .into_iter()
        .filter(|r| matches!(r.as_ref().unwrap(), EffectRecorded::Inserted))
        .count();
    assert_eq!(inserted, 1);
}

/// `delete_effects` removes exactly the keys in `[from, to)` in byte order (`Z` < `a`, a
/// shorter key before its extensions), at most `limit` a call.
pub async fn effects_deleted_by_key_range(s: Arc<dyn Store>) {
    for k in [
        "d:0001:x", "d:0002:Z", "d:0002:a", "d:0003", "d:00030", "e:0001", "c:9999",
    ] {
        s.record_effect(k, json!(k)).await.unwrap();
    }
    assert_eq!(s.delete_effects("d:", "d:0003", 2).await.unwrap(), 2);
    assert_eq!(s.delete_effects("d:", "d:0003", 2).await.unwrap(), 1);
    assert_eq!(s.delete_effects("d:", "d:0003", 2).await.unwrap(), 0);
    let mut left = Vec::new();
    for k in [
        "d:0001:x", "d:0002:Z", "d:0002:a", "d:0003", "d:00030", "e:0001", "c:9999",
    ] {
        if s.get_effect(k).await.unwrap().is_some() {
            left.push(k);
        }
    }
    assert_eq!(left, ["d:0003", "d:00030", "e:0001", "c:9999"]);
    assert_eq!(s.delete_effects("d:0003", "d:0003", 10).await.unwrap(), 0);
    assert_eq!(s.delete_effects("d:00030", "d:1", 10).await.unwrap(), 1);
    assert!(s.get_effect("d:0003").await.unwrap().is_some());
}

/// A live lease of another owner is never taken; an expired one is; renew and release only
/// work for the holder, renew also after expiry as long as nobody took the lease over.
pub async fn leases_exclusive_until_expiry(s: Arc<dyn Store>) {
    assert!(s.owner_of("i", 0).await.unwrap().is_none());
    assert!(s.acquire_lease("i", "p1", 1_000, 0).await.unwrap());
    assert!(!s.acquire_lease("i", "p2", 1_000, 500).await.unwrap());
    assert!(s.acquire_lease("i", "p1", 1_000, 500).await.unwrap());
    let l = s.owner_of("i", 600).await.unwrap().unwrap();
    assert_eq!((l.owner.as_str(), l.expires_at_ms), ("p1", 1_500));
    assert!(!s.renew_lease("i", "p2", 1_000, 600).await.unwrap());
    assert!(s.renew_lease("i", "p1", 1_000, 1_000).await.unwrap());
    assert!(!s.acquire_lease("i", "p2", 1_000, 1_999).await.unwrap());
    // Expired, but nobody took it: still p1's (same epoch), so p1 may renew it late.
    assert!(s.owner_of("i", 2_000).await.unwrap().is_none());
    assert!(!s.renew_lease("i", "p2", 1_000, 2_100).await.unwrap());
    assert!(s.renew_lease("i", "p1", 1_000, 2_100).await.unwrap());
    let l = s.owner_of("i", 2_200).await.unwrap().unwrap();
    assert_eq!(
        (l.owner.as_str(), l.expires_at_ms, l.epoch),
        ("p1", 3_100, 1)
    );
    assert!(!s.acquire_lease("i", "p2", 1_000, 3_099).await.unwrap());
    // Expired again and p2 takes it: p1 can no longer renew or release.
    assert!(s.acquire_lease("i", "p2", 1_000, 3_100).await.unwrap());
    assert!(!s.renew_lease("i", "p1", 1_000, 3_101).await.unwrap());
    assert!(!s.release_lease("i", "p1").await.unwrap());
    assert!(s.release_lease("i", "p2").await.unwrap());
    // Released: not renewable any more, and free for anyone at once.
    assert!(!s.renew_lease("i", "p2", 1_000, 3_102).await.unwrap());
    assert!(s.acquire_lease("i", "p1", 1_000, 3_102).await.unwrap());
    assert!(s.owner_of("other", 0).await.unwrap().is_none());
}

/// Fencing: appends carry the writer's lease (owner + epoch); once another owner takes the
/// lease over, the old owner's appends fail with `lease_lost` and write nothing; renewing
/// keeps the epoch, every takeover (also after a release) raises it.
pub async fn appends_fenced_by_lease_epoch(s: Arc<dyn Store>) {
    let rec = |n: i64| crate::NewRecord {
        kind: "k".to_string(),
        body: format!("{{\"n\":{n}}}").into_bytes(),
        at_ms: n,
    };
    let lost = |r: crate::Result<crate::Appended>| match r {
        Err(e) => assert_eq!(e.code(), "lease_lost", "{e}"),
        Ok(a) => panic!("a fenced append of a lost lease was written: {a:?}"),
    };
    // No lease at all: refused.
    let nobody = crate::Fence {
        owner: "p1".into(),
        epoch: 1,
    };
    lost(s.append_fenced("f", &nobody, vec![rec(1)]).await);
    assert!(s.head("f").await.unwrap().is_none());
    assert!(s.acquire_lease("f", "p1", 1_000, 0).await.unwrap());
    let l1 = s.owner_of("f", 0).await.unwrap().unwrap();
    let f1 = l1.fence();
    assert_eq!(f1.owner, "p1");
    let a = s
        .append_fenced("f", &f1, vec![rec(1), rec(2)])
        .await
        .unwrap();
    assert_eq!((a.first_seq, a.last_seq), (1, 2));
    // Renewing and re-taking one's own lease keep the epoch.
    assert!(s.renew_lease("f", "p1", 1_000, 500).await.unwrap());
    assert!(s.acquire_lease("f", "p1", 1_000, 600).await.unwrap());
    assert_eq!(s.owner_of("f", 700).await.unwrap().unwrap().epoch, f1.epoch);
    // Expired but not taken over: the old fence still writes.
    s.append_fenced("f", &f1, vec![rec(3)]).await.unwrap();
    // p2 takes it over: a higher epoch; p1's appends are refused and write nothing.
    assert!(s.acquire_lease("f", "p2", 1_000, 5_000).await.unwrap());
    let f2 = s.owner_of("f", 5_000).await.unwrap().unwrap().fence();
    assert!(f2.epoch > f1.epoch, "{f2:?} after {f1:?}");
    lost(s.append_fenced("f", &f1, vec![rec(4)]).await);
    // Same owner name with a stale epoch, or another epoch: refused too.
    lost(
        s.append_fenced(
            "f",
            &crate::Fence {
                owner: "p2".into(),
                epoch: f1.epoch,
            },
            vec![rec(4)],
        )
        .await,
    );
    assert_eq!(s.last_seq("f").await.unwrap(), 3);
    let a = s.append_fenced("f", &f2, vec![rec(4)]).await.unwrap();
    assert_eq!(a.last_seq, 4);
    // Released and taken by p1 again: a new epoch, p2's fence is dead.
    assert!(s.release_lease("f", "p2").await.unwrap());
    assert!(s.acquire_lease("f", "p1", 1_000, 5_001).await.unwrap());
    let f3 = s.owner_of("f", 5_001).await.unwrap().unwrap().fence();
    assert!(f3.epoch > f2.epoch);
    lost(s.append_fenced("f", &f2, vec![rec(5)]).await);
    lost(s.append_fenced("f", &f1, vec![rec(5)]).await);
    s.append_fenced("f", &f3, vec![rec(5)]).await.unwrap();
    // Unfenced appends are unaffected, and the chain is whole.
    s.append("f", vec![rec(6)]).await.unwrap();
    let v = s.verify("f").await.unwrap();
    assert_eq!(v.records, 6);
}

/// `write_batch` creates, appends (chained like `append`) and sets statuses; the loaded
/// view (`load_many`) is the snapshot-less journal.
pub async fn write_batch_creates_appends_and_sets_status(s: Arc<dyn Store>) {
    let rec = numbered;
    let out = s
        .write_batch(
            vec![
                instance("wb1", "t", InstanceStatus::Running),
                instance("wb2", "t", InstanceStatus::Running),
            ],
            vec![
                ("wb1".into(), vec![rec("a", 1), rec("b", 2)]),
                ("wb2".into(), vec![rec("a", 3)]),
            ],
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        out.iter()
            .map(|a| (a.first_seq, a.last_seq))
            .collect::<Vec<_>>(),
        vec![(1, 2), (1, 1)]
    );
    let out = s
        .write_batch(
            vec![],
            vec![("wb1".into(), vec![rec("c", 4)]), ("wb2".into(), vec![])],
            vec![("wb2".into(), InstanceStatus::Completed, None, 20)],
        )
        .await
        .unwrap();
    assert_eq!((out[0].first_seq, out[0].last_seq), (3, 3));
    assert_eq!((out[1].first_seq, out[1].last_seq), (2, 1));
    assert_eq!(s.verify("wb1").await.unwrap().records, 3);
    assert_eq!(
        s.get_instance("wb2").await.unwrap().unwrap().status,
        InstanceStatus::Completed
    );
    let loaded = s
        .load_many(&["wb1".to_string(), "wb2".to_string()])
        .await
        .unwrap();
    assert_eq!(loaded[0].0, None);
    assert_eq!(loaded[0].1, s.read("wb1", 1, 100).await.unwrap());
    assert_eq!(loaded[1].1.len(), 1);
}

/// A record of `kind` with body `{"n": n}` at `n` ms.
fn numbered(kind: &str, n: u64) -> crate::NewRecord {
    crate::NewRecord {
        kind: kind.to_string(),
        body: format!("{{\"n\":{n}}}").into_bytes(),
        at_ms: n as i64,
    }
}

/// A fenced writer's terms: `owner`, leases of one second, the clock at `now`.
fn one_second_lease(owner: &str, now: i64) -> crate::LeaseTerms {
    crate::LeaseTerms {
        owner: owner.to_string(),
        ttl_ms: 1_000,
        now_ms: now,
    }
}

/// `write_batch_fenced`: created instances come with their lease (epoch 1); each append is
/// checked against its own fence, a refused one writes nothing and does not stop the
/// others; a status is set only for an instance the writer holds.
pub async fn write_batch_fenced_per_instance(s: Arc<dyn Store>) {
    let rec = numbered;
    let terms = one_second_lease;
    let out = s
        .write_batch_fenced(
            &terms("p1", 0),
            vec![
                instance("fb1", "t", InstanceStatus::Running),
                instance("fb2", "t", InstanceStatus::Running),
            ],
            vec![
                ("fb1".into(), 1, vec![rec("a", 1), rec("b", 2)].into()),
                ("fb2".into(), 1, vec![rec("a", 3)].into()),
            ],
            vec![],
        )
        .await
        .unwrap();
    let seqs: Vec<(u64, u64)> = out
        .iter()
        .map(|r| {
            let a = r.as_ref().unwrap();
            (a.first_seq, a.last_seq)
        })
        .collect();
    assert_eq!(seqs, [(1, 2), (1, 1)]);
    let l = s.owner_of("fb1", 10).await.unwrap().unwrap();
    assert_eq!(
        (l.owner.as_str(), l.epoch, l.expires_at_ms),
        ("p1", 1, 1_000)
    );
    // p2 takes fb2 over after expiry: p1's next append to fb2 is refused, fb1's goes on.
    assert!(s.acquire_lease("fb2", "p2", 1_000, 2_000).await.unwrap());
    let out = s
        .write_batch_fenced(
            &terms("p1", 2_001),
            vec![],
            vec![
                ("fb1".into(), 1, vec![rec("c", 4)].into()),
                ("fb2".into(), 1, vec![rec("x", 5)].into()),
            ],
            vec![
                ("fb1".into(), InstanceStatus::Completed, None, 20),
                (
                    "fb2".into(),
                    InstanceStatus::Failed,
                    Some("stale".into()),
                    20,
                ),
            ],
        )
        .await
        .unwrap();
    assert_eq!(out[0].as_ref().unwrap().last_seq, 3);
    match &out[1] {
        Err(e) => assert_eq!(e.code(), "lease_lost", "{e}"),
        Ok(a) => panic!("a stale owner's append was written: {a:?}"),
    }
    assert_eq!(s.last_seq("fb2").await.unwrap(), 1);
    assert_eq!(
        s.get_instance("fb1").await.unwrap().unwrap().status,
        InstanceStatus::Completed
    );
    assert_eq!(
        s.get_instance("fb2").await.unwrap().unwrap().status,
        InstanceStatus::Running,
        "a stale owner's status change was written"
    );
    // The new owner writes at its epoch.
    let out = s
        .write_batch_fenced(
            &terms("p2", 2_002),
            vec![],
            vec![("fb2".into(), 2, vec![rec("y", 6)].into())],
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(out[0].as_ref().unwrap().last_seq, 2);
    assert_eq!(s.verify("fb2").await.unwrap().records, 2);
}

/// `write_batch_fenced` over many instances (a backend may read chain heads and leases in
/// chunks): every result belongs to its own instance, whatever its place in the batch.
/// 75 instances, created with records in a first batch except every seventh; every fifth
/// is then taken over by another owner, so its append is refused and the rest go on.
pub async fn write_batch_fenced_many_instances(s: Arc<dyn Store>) {
    let rec = |n: u64| numbered("r", n);
    let terms = one_second_lease;
    let ids: Vec<String> = (0..75).map(|i| format!("mf{i:02}")).collect();
    let first: Vec<(String, u64, Arc<[crate::NewRecord]>)> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| !i.is_multiple_of(7))
        .map(|(i, id)| (id.clone(), 1, (0..=(i as u64 % 3)).map(rec).collect()))
        .collect();
    let out = s
        .write_batch_fenced(
            &terms("p1", 0),
            ids.iter()
                .map(|id| instance(id, "t", InstanceStatus::Running))
                .collect(),
            first,
            vec![],
        )
        .await
        .unwrap();
    assert!(out.iter().all(Result::is_ok), "{out:?}");
    for (i, id) in ids.iter().enumerate() {
        if i.is_multiple_of(5) {
            assert!(s.acquire_lease(id, "p2", 1_000, 2_000).await.unwrap());
        }
    }
    let second: Vec<(String, u64, Arc<[crate::NewRecord]>)> = ids
        .iter()
        .rev()
        .map(|id| (id.clone(), 1, vec![rec(9)].into()))
        .collect();
    let out = s
        .write_batch_fenced(&terms("p1", 2_001), vec![], second, vec![])
        .await
        .unwrap();
    assert_eq!(out.len(), ids.len());
    for (k, result) in out.iter().enumerate() {
        let i = ids.len() - 1 - k;
        let before = if i.is_multiple_of(7) {
            0
        } else {
            i as u64 % 3 + 1
        };
        match result {
            Err(e) if i.is_multiple_of(5) => assert_eq!(e.code(), "lease_lost", "{}: {e}", ids[i]),
            Ok(a) if !i.is_multiple_of(5) => {
                assert_eq!(
                    (a.first_seq, a.last_seq),
                    (before + 1, before + 1),
                    "{}",
                    ids[i]
                );
                assert_eq!(s.verify(&ids[i]).await.unwrap().records, before + 1);
            }
            other => panic!("{}: {other:?}", ids[i]),
        }
        if i.is_multiple_of(5) {
            assert_eq!(s.last_seq(&ids[i]).await.unwrap(), before, "{}", ids[i]);
        }
    }
}

/// Bulk leases: `acquire_leases` gives the epoch of each lease taken and `None` where
/// another owner's live lease kept it; `renew_leases` extends the owner's leases that nobody
/// else took over (also expired ones).
pub async fn bulk_leases_acquire_and_renew(s: Arc<dyn Store>) {
    let ids: Vec<String> = ["b1", "b2", "b3"].iter().map(|x| x.to_string()).collect();
    assert!(s.acquire_lease("b2", "other", 1_000, 0).await.unwrap());
    let got = s.acquire_leases(&ids, "me", 1_000, 10, &[]).await.unwrap();
    assert_eq!(got, [Some(1), None, Some(1)]);
    // b2 expired: taken over, epoch raised.
    let got = s
        .acquire_leases(&ids, "me", 1_000, 1_500, &[])
        .await
        .unwrap();
    assert_eq!(got, [Some(1), Some(2), Some(1)]);
    assert_eq!(s.owner_of("b1", 2_000).await.unwrap().unwrap().owner, "me");
    // `other` takes b3 once `me` let it go; renewing reports it lost and extends the rest.
    assert!(s.release_lease("b3", "me").await.unwrap());
    assert!(s.acquire_lease("b3", "other", 1_000, 2_000).await.unwrap());
    let renewed = s.renew_leases(&ids, "me", 1_000, 2_400).await.unwrap();
    assert_eq!(renewed, [true, true, false]);
    let l = s.owner_of("b1", 3_000).await.unwrap().unwrap();
    assert_eq!(
        (l.owner.as_str(), l.expires_at_ms, l.epoch),
        ("me", 3_400, 1)
    );
    // b1 expired at 3,400 and nobody took it: still renewable, same epoch.
    let late = s.renew_leases(&ids[..1], "me", 1_000, 3_500).await.unwrap();
    assert_eq!(late, [true]);
    let l = s.owner_of("b1", 4_000).await.unwrap().unwrap();
    assert_eq!((l.expires_at_ms, l.epoch), (4_500, 1));
    assert_eq!(
        s.owner_of("b3", 2_900).await.unwrap().unwrap().owner,
        "other"
    );
    // Live owners, each once; a dead owner's live lease is taken over at once.
    assert_eq!(s.lease_owners(2_500).await.unwrap(), ["me", "other"]);
    let dead = ["other".to_string()];
    let got = s
        .acquire_leases(&["b3".to_string()], "me", 1_000, 2_500, &dead)
        .await
        .unwrap();
    assert_eq!(got, [Some(3)]);
    assert_eq!(s.lease_owners(2_500).await.unwrap(), ["me"]);
    // Nothing to do: empty answers.
    assert!(
        s.acquire_leases(&[], "me", 1_000, 0, &[])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.renew_leases(&[], "me", 1_000, 0)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `list_timers` walks the whole timer table by (instance, timer id) with a keyset cursor,
/// whatever the due times, over more than one page.
pub async fn timers_listed_by_keyset_pages(s: Arc<dyn Store>) {
    let mut want = Vec::new();
    for i in 0..5 {
        for t in 0..5 {
            let (inst, id) = (format!("i{i}"), format!("t{t}"));
            // Due times in reverse order of the keys, so an order by due time would differ.
            let due = 1_000 - (i * 10 + t) as i64;
            s.put_timer(Timer {
                instance: inst.clone(),
                timer_id: id.clone(),
                due_ms: due,
                payload: json!({"n": i * 10 + t}),
            })
            .await
            .unwrap();
            want.push((inst, id));
        }
    }
    let mut got = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = s.list_timers(after.clone(), 10).await.unwrap();
        pages += 1;
        let Some(last) = page.last() else { break };
        after = Some((last.instance.clone(), last.timer_id.clone()));
        got.extend(
            page.iter()
                .map(|t| (t.instance.clone(), t.timer_id.clone())),
        );
        if page.len() < 10 {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(got, want);
    assert!(s.list_timers(None, 0).await.is_err(), "limit 0 is refused");
}

/// Compaction is fenced like appends: the lease holder's `compact_fenced` stores the
/// snapshot and drops the records it covers in one step; once another owner took the lease
/// over, the old owner's compaction is `lease_lost` and changes nothing (no snapshot, no
/// truncation); a snapshot that does not match the journal is refused as by `put_snapshot`.
pub async fn compaction_fenced_by_lease_epoch(s: Arc<dyn Store>) {
    let rec = |n: i64| crate::NewRecord {
        kind: "k".to_string(),
        body: format!("{{\"n\":{n}}}").into_bytes(),
        at_ms: n,
    };
    let snap = |seq: u64, hash: crate::Hash, tag: &str| crate::Snapshot {
        seq,
        hash,
        state: tag.as_bytes().to_vec(),
        at_ms: 1,
    };
    assert!(s.acquire_lease("c", "p1", 1_000, 0).await.unwrap());
    let f1 = s.owner_of("c", 0).await.unwrap().unwrap().fence();
    s.append_fenced("c", &f1, (1..=6).map(rec).collect())
        .await
        .unwrap();
    let r4 = s.read("c", 4, 1).await.unwrap().remove(0);
    // The holder compacts: snapshot at 4, records 1..=4 gone, the chain verifies from 4.
    let removed = s
        .compact_fenced("c", &f1, snap(4, r4.hash, "at4"))
        .await
        .unwrap();
    assert_eq!(removed, 4);
    assert_eq!(s.chain_base("c").await.unwrap(), (4, r4.hash));
    assert_eq!(s.latest_snapshot("c").await.unwrap().unwrap().state, b"at4");
    assert_eq!(s.verify("c").await.unwrap().records, 2);
    // A snapshot with the wrong hash: refused, nothing dropped.
    let r5 = s.read("c", 5, 1).await.unwrap().remove(0);
    let wrong = s
        .compact_fenced("c", &f1, snap(5, r4.hash, "bad"))
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), "invalid_input", "{wrong}");
    assert_eq!(s.chain_base("c").await.unwrap().0, 4);
    // p2 takes the lease over (p1's expired): p1 can neither snapshot nor truncate.
    assert!(s.acquire_lease("c", "p2", 1_000, 5_000).await.unwrap());
    let f2 = s.owner_of("c", 5_000).await.unwrap().unwrap().fence();
    let lost = s
        .compact_fenced("c", &f1, snap(5, r5.hash, "stale"))
        .await
        .unwrap_err();
    assert_eq!(lost.code(), "lease_lost", "{lost}");
    assert_eq!(s.chain_base("c").await.unwrap(), (4, r4.hash));
    assert_eq!(s.latest_snapshot("c").await.unwrap().unwrap().state, b"at4");
    assert_eq!(s.read("c", 5, 10).await.unwrap().len(), 2);
    // No lease row at all: refused too.
    s.append("nolease", vec![rec(1)]).await.unwrap();
    let h = s.head("nolease").await.unwrap().unwrap().1;
    let none = s
        .compact_fenced("nolease", &f1, snap(1, h, "x"))
        .await
        .unwrap_err();
    assert_eq!(none.code(), "lease_lost", "{none}");
    assert!(s.latest_snapshot("nolease").await.unwrap().is_none());
    // The new holder compacts.
    assert_eq!(
        s.compact_fenced("c", &f2, snap(5, r5.hash, "at5"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(s.chain_base("c").await.unwrap(), (5, r5.hash));
}

/// `release_leases` gives up exactly the listed leases `owner` holds (others' and unknown
/// ones are untouched) and reports how many; another owner can take them at once, with a
/// higher epoch.
pub async fn bulk_release_of_leases(s: Arc<dyn Store>) {
    for id in ["r1", "r2", "r3"] {
        assert!(s.acquire_lease(id, "me", 60_000, 0).await.unwrap());
    }
    assert!(s.acquire_lease("r4", "other", 60_000, 0).await.unwrap());
    let ids: Vec<String> = ["r1", "r2", "r4", "missing"]
        .iter()
        .map(|x| x.to_string())
        .collect();
    assert_eq!(s.release_leases(&ids, "me").await.unwrap(), 2);
    assert!(s.owner_of("r1", 10).await.unwrap().is_none());
    assert!(s.owner_of("r2", 10).await.unwrap().is_none());
    assert_eq!(s.owner_of("r3", 10).await.unwrap().unwrap().owner, "me");
    assert_eq!(s.owner_of("r4", 10).await.unwrap().unwrap().owner, "other");
    // Taken over at once, long before the released lease would have expired.
    let got = s
        .acquire_leases(&ids[..2], "next", 1_000, 10, &[])
        .await
        .unwrap();
    assert_eq!(got, [Some(2), Some(2)]);
    // Released again: nothing more to give up.
    assert_eq!(s.release_leases(&ids, "me").await.unwrap(), 0);
    assert_eq!(s.release_leases(&[], "me").await.unwrap(), 0);
}

/// A status change records the chain head it was made at (`status_seq`), by every path
/// that sets statuses, so `verify` can tell a journal cut back behind it; an intact journal
/// still verifies, with a snapshot at its head.
pub async fn status_changes_record_the_chain_head(s: Arc<dyn Store>) {
    let rec = numbered;
    s.create_instance(instance("sq1", "t", InstanceStatus::Running))
        .await
        .unwrap();
    assert_eq!(s.status_seq("sq1").await.unwrap(), Some(0));
    assert_eq!(s.status_seq("nobody").await.unwrap(), None);
    s.append("sq1", vec![rec("a", 1), rec("b", 2)])
        .await
        .unwrap();
    s.update_status("sq1", InstanceStatus::Paused, None, 20)
        .await
        .unwrap();
    assert_eq!(s.status_seq("sq1").await.unwrap(), Some(2));
    s.write_batch(
        vec![],
        vec![("sq1".into(), vec![rec("c", 3)])],
        vec![("sq1".into(), InstanceStatus::Completed, None, 30)],
    )
    .await
    .unwrap();
    assert_eq!(s.status_seq("sq1").await.unwrap(), Some(3));
    let terms = one_second_lease("p1", 40);
    s.write_batch_fenced(
        &terms,
        vec![instance("sq2", "t", InstanceStatus::Running)],
        vec![],
        vec![],
    )
    .await
    .unwrap();
    let epoch = s.owner_of("sq2", 40).await.unwrap().unwrap().epoch;
    let out = s
        .write_batch_fenced(
            &terms,
            vec![],
            vec![("sq2".into(), epoch, vec![rec("a", 1)].into())],
            vec![("sq2".into(), InstanceStatus::Failed, Some("x".into()), 41)],
        )
        .await
        .unwrap();
    assert!(out[0].is_ok());
    assert_eq!(s.status_seq("sq2").await.unwrap(), Some(1));
    let head = s.head("sq1").await.unwrap().unwrap();
    s.put_snapshot(
        "sq1",
        crate::Snapshot {
            seq: head.0,
            hash: head.1,
            state: b"{}".to_vec(),
            at_ms: 50,
        },
    )
    .await
    .unwrap();
    let v = s.verify("sq1").await.unwrap();
    assert_eq!((v.to_seq, v.keyed), (3, false));
    assert_eq!(s.verify("sq2").await.unwrap().records, 1);
}

fn count_row(key: &str, period: u64, ends_ms: i64, tool_calls: u64, cost: f64) -> CountRow {
    CountRow {
        key: key.to_string(),
        period,
        ends_ms,
        counts: Counts {
            tool_calls,
            llm_calls: 1,
            llm_tokens: 1_000,
            cost,
        },
    }
}

/// Counters add per (key, period), return their totals in the rows' order, read with zero
/// counts, are forgotten once their period ends, and refuse bad rows whole.
pub async fn shared_counters_add_and_expire(s: Arc<dyn Store>) {
    let t = s
        .add_counts(
            vec![
                count_row("tenant/a", 5, 1_000, 2, 0.5),
                count_row("plan/a/p", 5, 1_000, 1, 0.25),
                count_row("tenant/a", 5, 1_000, 3, 0.0),
                count_row("tenant/a", 6, 2_000, 7, 0.0),
            ],
            100,
        )
        .await
        .unwrap();
    let calls: Vec<u64> = t.iter().map(|c| c.tool_calls).collect();
    assert_eq!(calls, [2, 1, 5, 7]);
    assert_eq!(t[2].llm_calls, 2);
    assert_eq!(t[2].llm_tokens, 2_000);
    assert!((t[2].cost - 0.5).abs() < 1e-9);
    // A zero row reads; the big counts stop at the largest stored one.
    let zero = CountRow {
        counts: Counts::default(),
        ..count_row("tenant/a", 5, 1_000, 0, 0.0)
    };
    let read = s.add_counts(vec![zero.clone()], 200).await.unwrap();
    assert_eq!(read[0].tool_calls, 5);
    let big = s
        .add_counts(vec![count_row("big", 1, 5_000, u64::MAX, 0.0); 2], 200)
        .await
        .unwrap();
    assert_eq!(big[1].tool_calls, i64::MAX as u64);
    let live = s.live_counts(200).await.unwrap();
    let keys: Vec<(&str, u64)> = live.iter().map(|r| (r.key.as_str(), r.period)).collect();
    assert_eq!(
        keys,
        [
            ("big", 1),
            ("plan/a/p", 5),
            ("tenant/a", 5),
            ("tenant/a", 6)
        ]
    );
    assert_eq!(live[2].ends_ms, 1_000);
    assert_eq!(live[2].counts.tool_calls, 5);
    // Period 5 ended at 1,000: gone (live or added to again, it starts at zero).
    assert_eq!(s.live_counts(1_000).await.unwrap().len(), 2);
    let again = s.add_counts(vec![zero], 1_500).await.unwrap();
    assert_eq!(again[0], Counts::default());
    // A bad row refuses the whole call.
    for bad in [
        count_row("", 7, 9_000, 1, 0.0),
        count_row(&"k".repeat(crate::MAX_COUNT_KEY + 1), 7, 9_000, 1, 0.0),
        count_row("k", 7, 9_000, 1, f64::NAN),
        count_row("k", 7, 9_000, 1, -1.0),
    ] {
        let e = s
            .add_counts(vec![count_row("ok", 7, 9_000, 1, 0.0), bad], 1_500)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "invalid_input", "{e}");
    }
    assert!(
        s.live_counts(1_500)
            .await
            .unwrap()
            .iter()
            .all(|r| r.key != "ok")
    );
}

/// Many writers adding to the same counters at once, in opposite key orders, lose nothing
/// and do not deadlock.
pub async fn shared_counters_concurrent_adds(s: Arc<dyn Store>) {
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let s = Arc::clone(&s);
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let mut rows = vec![
                    count_row("tenant/x", 1, i64::MAX, 1, 0.0),
                    count_row("plan/x/p", 1, i64::MAX, 2, 0.0),
                ];
                if w % 2 == 1 {
                    rows.reverse();
                }
                s.add_counts(rows, 0).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let live = s.live_counts(0).await.unwrap();
    let calls: Vec<(&str, u64)> = live
        .iter()
        .map(|r| (r.key.as_str(), r.counts.tool_calls))
        .collect();
    assert_eq!(calls, [("plan/x/p", 400), ("tenant/x", 200)]);
}
