//! What both crash-test binaries (`weft-crashtest`, `weft-crashtest-tools`) do once their
//! durable engine is open: recover what a killed process left, start the runs no process
//! durably started yet, wait for every instance and print `DONE`. Shared so that the two
//! tests (`tests/crash.rs`, `tests/crash_tools.rs`) prove the same launch bookkeeping.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use weft_durable::Durable;
use weft_store::{Page, Store};

/// Pseudo-journal of launches: which runs each process started, from which id.
pub const LAUNCHES: &str = "crash.launches";

/// Recovers, then makes sure runs `0..n` of `plan` (input `{"k": k}`) each exist once for
/// `tenant`, waits for all of them, flushes the instance statuses and prints `DONE`.
pub async fn drive(
    store: &Arc<dyn Store>,
    d: &Durable,
    tenant: &str,
    plan: &str,
    n: u64,
) -> Result<(), String> {
    let rep = d.recover().await.map_err(|e| e.to_string())?;
    if !rep.errors.is_empty() {
        return Err(format!("recovery errors: {:?}", rep.errors));
    }
    eprintln!(
        "recovered: {} restored, {} finished, {} re-dispatched, {} outcome_unknown",
        rep.restored, rep.finished, rep.redispatched, rep.unknown
    );
    // Which runs were durably started (by any process)? Each launch records, before it
    // starts anything, the first instance id it will use and the runs it starts in order
    // (ids are consecutive: nothing else takes ids in this process), so an instance id in
    // the store maps to its run without reading its journal.
    let mut id_to_k: HashMap<u64, u64> = HashMap::new();
    for r in store
        .read(LAUNCHES, 1, 100_000)
        .await
        .map_err(|e| e.to_string())?
    {
        let v: Value = r.json().map_err(|e| e.to_string())?;
        let first = v["first"].as_u64().unwrap_or(0);
        let mut id = first;
        for range in v["ranges"].as_array().into_iter().flatten() {
            let (a, b) = (
                range[0].as_u64().unwrap_or(0),
                range[1].as_u64().unwrap_or(0),
            );
            for k in a..b {
                id_to_k.insert(id, k);
                id += 1;
            }
        }
    }
    let mut started = vec![false; n as usize];
    let mut page = Page::first(10_000);
    loop {
        let recs = store
            .list_instances(tenant, None, page.clone())
            .await
            .map_err(|e| e.to_string())?;
        let Some(last) = recs.last() else { break };
        page.after = Some(last.id.clone());
        for r in &recs {
            let id = d.engine().instance_number(&r.id);
            match id.and_then(|id| id_to_k.get(&id)) {
                Some(&k) if k < n => started[k as usize] = true,
                Some(_) => {}
                None => return Err(format!("instance {} is in no launch record", r.id)),
            }
        }
        if recs.len() < 10_000 {
            break;
        }
    }
    let mut ranges: Vec<[u64; 2]> = Vec::new();
    for (k, s) in started.iter().enumerate() {
        let k = k as u64;
        if !s {
            match ranges.last_mut() {
                Some(r) if r[1] == k => r[1] = k + 1,
                _ => ranges.push([k, k + 1]),
            }
        }
    }
    let mut handles = rep.handles;
    if !ranges.is_empty() {
        let engine = d.engine();
        let first: u64 = engine
            .instance_number(&engine.allocate_id())
            .ok_or("the allocated instance id does not parse")?
            + 1;
        store
            .append(
                LAUNCHES,
                vec![
                    weft_store::NewRecord::json(
                        "launch",
                        &json!({"first": first, "ranges": ranges}),
                        weft_store::now_ms(),
                    )
                    .map_err(|e| e.to_string())?,
                ],
            )
            .await
            .map_err(|e| e.to_string())?;
        for [a, b] in &ranges {
            for k in *a..*b {
                handles.push(
                    d.start(tenant, plan, json!({"k": k}))
                        .map_err(|e| e.to_string())?,
                );
            }
        }
    }
    eprintln!("waiting for {} instances", handles.len());
    let outs = futures::future::join_all(handles.iter().map(|h| d.wait(h))).await;
    for o in outs {
        o.map_err(|e| e.to_string())?;
    }
    // The instance records' statuses go with the journal's next batch after each wait:
    // write them before reporting (a fixed sleep here lost them when that batch took
    // longer, and the test then found finished runs still `running`).
    d.flush().await.map_err(|e| e.to_string())?;
    println!("DONE");
    Ok(())
}

/// Runs a crash-test binary's `work` on a two-thread runtime; prints `name: error` and exits
/// 1 when the runtime cannot start or `work` fails.
pub fn block_on(name: &str, work: impl std::future::Future<Output = Result<(), String>>) {
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(work));
    if let Err(e) = result {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}
