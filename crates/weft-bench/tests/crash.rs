//! The crash test: runs the real `weft-crashtest` binary (its runs wait on a durable
//! timer between two steps) on a durable SQLite store, `kill -9`s it at random moments
//! (50 times by default; `WEFT_CRASH_KILLS` for a longer run), restarts it, lets the last run finish, and proves: every run reaches its expected
//! outcome, every journal verifies, no idempotent effect ran twice with different outcomes,
//! no non-idempotent effect ran twice, and every timer was set and fired exactly once.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use weft_store::{InstanceStatus, Page, Store};

/// A fresh directory under the system temp dir.
fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("weft-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn kill_9_at_random_moments_loses_and_duplicates_nothing() {
    let bin = env!("CARGO_BIN_EXE_weft-crashtest");
    let dir = temp_dir("crash");
    let db = dir.join("weft.db");
    let effects = dir.join("effects.log");
    let kills: u32 = std::env::var("WEFT_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    // Runs added per launch (launch i asks for (i + 1) × this many runs in all), so every
    // launch has new work as well as recovery to do when it is killed.
    let per_launch: u64 = std::env::var("WEFT_CRASH_RUNS_PER_LAUNCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let mut seed: u64 = std::env::var("WEFT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let n = per_launch * (u64::from(kills) + 1);
    eprintln!(
        "crash test: {kills} kills, {n} runs, seed {seed}, dir {}",
        dir.display()
    );
    let spawn = |n: u64| {
        Command::new(bin)
            .args([
                db.to_str().unwrap(),
                effects.to_str().unwrap(),
                &n.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut killed_mid_run = 0;
    for i in 0..kills {
        let mut child = spawn(per_launch * (u64::from(i) + 1));
        let wait_ms = 10 + xorshift(&mut seed) % 250;
        std::thread::sleep(Duration::from_millis(wait_ms));
        match child.try_wait().unwrap() {
            Some(status) => {
                // Finished before the kill: it must have succeeded.
                assert!(status.success(), "the workload failed: {status}");
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                killed_mid_run += 1;
            }
        }
        let _ = child.wait();
    }
    // The last run goes to the end.
    let out = spawn(n).wait_with_output().unwrap();
    assert!(out.status.success(), "final run failed: {}", out.status);
    assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"));
    eprintln!("killed mid-run {killed_mid_run} of {kills} times");

    // Check everything from the store and the effects file.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store: Arc<dyn Store> =
            Arc::new(weft_store_sqlite::SqliteStore::open(&db).await.unwrap());
        let mut effects_by_key: HashMap<String, Vec<(String, String)>> = HashMap::new();
        for line in std::fs::read_to_string(&effects).unwrap_or_default().lines() {
            let mut p = line.split('\t');
            let (k, t, o) = (p.next().unwrap(), p.next().unwrap(), p.next().unwrap());
            effects_by_key
                .entry(k.to_string())
                .or_default()
                .push((t.to_string(), o.to_string()));
        }
        // No non-idempotent effect twice; idempotent ones always with the same outcome.
        let mut repeated_idem = 0;
        for (k, v) in &effects_by_key {
            if v[0].0 == "fx.once" {
                assert_eq!(v.len(), 1, "non-idempotent effect {k} ran {} times", v.len());
            } else {
                assert!(v.iter().all(|e| e == &v[0]), "{k}: different outcomes {v:?}");
                if v.len() > 1 {
                    repeated_idem += 1;
                }
            }
        }
        let mut by_k: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        let mut unknown = 0;
        let mut completed = 0;
        let mut late_timers = 0;
        let mut page = Page::first(10_000);
        loop {
            let recs = store.list_instances("crash", None, page.clone()).await.unwrap();
            let Some(last) = recs.last() else { break };
            page.after = Some(last.id.clone());
            for r in &recs {
                store.verify(&r.id).await.unwrap();
                let recs = store.read(&r.id, 1, 10_000).await.unwrap();
                let first: Value = recs[0].json().unwrap();
                let k = first.pointer("/input/k").and_then(Value::as_u64).unwrap();
                by_k.entry(k).or_default().push(r.id.clone());
                let last: Value = recs.last().unwrap().json().unwrap();
                match r.status {
                    InstanceStatus::Completed => {
                        completed += 1;
                        // The result is the three effects' outcomes under this instance's keys.
                        let res = &last["result"];
                        assert_eq!(res["k"], k, "{}", r.id);
                        for (step, prefix) in [("a", 'i'), ("b", 'o'), ("c", 'i')] {
                            let got = res[step].as_str().unwrap();
                            assert!(got.starts_with(prefix), "{}: {step} = {got}", r.id);
                        }
                        // The timer was set once and fired once, across every restart.
                        for kind in ["timer.set", "timer.fired"] {
                            let n = recs.iter().filter(|x| x.kind == kind).count();
                            assert_eq!(n, 1, "{}: {n} × {kind}", r.id);
                        }
                        let fired: Value = recs
                            .iter()
                            .find(|x| x.kind == "timer.fired")
                            .unwrap()
                            .json()
                            .unwrap();
                        if fired["late_ms"].as_i64().unwrap() > 100 {
                            late_timers += 1;
                        }
                        // b's effect ran exactly once, with the outcome the run recorded.
                        let b_key = recs
                            .iter()
                            .filter(|x| x.kind == "action.dispatched")
                            .filter_map(|x| x.json::<Value>().ok())
                            .find(|v| v["step"] == "b")
                            .and_then(|v| v["key"].as_str().map(str::to_string))
                            .unwrap();
                        let e = &effects_by_key[&b_key];
                        assert_eq!(e.len(), 1);
                        assert_eq!(e[0].1, res["b"].as_str().unwrap());
                    }
                    InstanceStatus::Failed => {
                        let reason = r.reason.clone().unwrap_or_default();
                        assert!(reason.contains("outcome_unknown"), "{}: {reason}", r.id);
                        unknown += 1;
                    }
                    // (The status is the instance record's, which lags the journal:
                    // the workload flushes the statuses before it reports DONE.)
                    other => panic!(
                        "{} ended {other:?}; its journal ends with {}",
                        r.id,
                        String::from_utf8_lossy(&recs.last().unwrap().body)
                    ),
                }
            }
            if recs.len() < 10_000 {
                break;
            }
        }
        eprintln!(
            "{completed} completed, {unknown} outcome_unknown (b in flight at a kill), {repeated_idem} idempotent effects repeated with the same outcome, {late_timers} timers fired more than 100 ms late (re-armed after a kill)"
        );
        assert!(late_timers > 0, "no timer was pending at any kill");
        assert_eq!(by_k.len() as u64, n, "every run exists");
        // Every timer fired: none is left in the store's timer table.
        let left = store.due_timers(i64::MAX, 10).await.unwrap();
        assert!(left.is_empty(), "timers left: {left:?}");
        for (k, ids) in &by_k {
            assert_eq!(ids.len(), 1, "run {k} started twice: {ids:?}");
        }
    });
    // Kept only when the test fails (a panic above skips this), for inspection.
    let _ = std::fs::remove_dir_all(&dir);
}
