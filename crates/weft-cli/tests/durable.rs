//! The durability commands end to end with the real binary on the embedded SQLite store:
//! `weft run --store` journals an instance; `weft inspect` (also at an earlier point),
//! `weft replay`, `weft journal verify` and `weft checkpoint` read it back; a record altered
//! in the SQLite file (with rusqlite, in `journal` or in a journal log batch) is caught and
//! named by `verify`; unknown instances are clear errors.

mod common;

use common::{code, json, root, stdout, temp_dir, weft_in};

fn example(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

/// `weft run examples/fanout.json --store .weft/weft.db --json` in `dir`, which must succeed.
fn run_fanout_stored(dir: &std::path::Path) -> std::process::Output {
    let out = run_fanout(dir);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    out
}

/// `weft run examples/fanout.json --store .weft/weft.db --json` in `dir`.
fn run_fanout(dir: &std::path::Path) -> std::process::Output {
    weft_in(
        dir,
        &[
            "run",
            &example("fanout.json"),
            "--input",
            r#"{"dataset":"sales"}"#,
            "--store",
            ".weft/weft.db",
            "--json",
        ],
    )
}

#[test]
fn run_store_then_inspect_replay_verify_checkpoint() {
    let dir = temp_dir("durable");
    let out = run_fanout_stored(&dir);
    let doc = json(&out);
    assert_eq!(doc["outcome"], "completed");
    let id = doc["instance"].as_str().expect("instance id").to_string();

    let out = weft_in(&dir, &["inspect", &id, "--json"]);
    assert_eq!(code(&out), 0);
    let head = json(&out);
    assert_eq!(head["status"], "completed");
    let marked: Vec<String> = head["marking"]
        .as_array()
        .expect("marking")
        .iter()
        .map(|e| e[0].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        marked.contains(&"merged".to_string()) || !marked.is_empty(),
        "{head}"
    );

    // Time travel: right after the start the input token is on `start` and nothing has fired.
    let out = weft_in(&dir, &["inspect", &id, "--at", "1", "--json"]);
    assert_eq!(code(&out), 0);
    let early = json(&out);
    assert_eq!(early["at"], 1);
    assert_ne!(early["marking"], head["marking"]);

    let out = weft_in(&dir, &["replay", &id]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).contains("reproduces the recorded state"));

    let out = weft_in(&dir, &["journal", "verify", &id]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("journal of {id}: intact — records 1..="))
            && text.contains(", SHA-256 chain")
            && !text.contains("VerifyReport"),
        "{text}"
    );
    let out = weft_in(&dir, &["journal", "verify", &id, "--json"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(
        (&v["verdict"], &v["chain"], &v["ok"]),
        (&"intact".into(), &"sha256".into(), &true.into()),
        "{v}"
    );
    assert!(
        v["records"].as_u64().is_some_and(|n| n > 0)
            && v["head"].as_str().is_some_and(|h| h.len() == 64),
        "{v}"
    );

    let out = weft_in(&dir, &["checkpoint", &id]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).trim().starts_with("cp-"), "{}", stdout(&out));
    assert_eq!(stdout(&out).trim().len(), 3 + 64);

    // Tamper with one journal record behind the store's back: verify must notice and name
    // it. Every command above opened the store, which merged the run's records from the
    // journal log into `journal`: that is where the record is altered.
    let db = dir.join(".weft/weft.db");
    let table = tamper_body(&db, &id, 2);
    assert_eq!(table, "journal");
    assert_verify_names_altered(&dir, &id, 2);
    // A checkpoint of a tampered journal is refused: exit 1, the reason on stderr, nothing
    // on stdout.
    let out = weft_in(&dir, &["checkpoint", &id]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(stdout(&out), "");
    let err = common::stderr(&out);
    assert!(
        err.contains("[chain_broken/record_altered] no checkpoint of")
            && err.contains("seq 2")
            && err.contains("hint: "),
        "{err}"
    );
    let out = weft_in(&dir, &["journal", "verify", &id, "--json"]);
    assert_eq!(code(&out), 1);
    let v = json(&out);
    assert_eq!(
        (&v["verdict"], &v["fault"], &v["seq"]),
        (&"broken".into(), &"record_altered".into(), &2.into()),
        "{v}"
    );

    // A second run's records are still in the journal log (a batch blob per commit) when
    // its process exits; altered there, the record is merged into `journal` as it is when
    // the next process opens the store, and verify names it all the same.
    let out = weft_in(
        &dir,
        &[
            "run",
            &example("fanout.json"),
            "--input",
            r#"{"dataset":"log"}"#,
            "--store",
            ".weft/weft.db",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let id2 = json(&out)["instance"]
        .as_str()
        .expect("instance id")
        .to_string();
    let table = tamper_body(&db, &id2, 2);
    assert!(
        table.starts_with("journal_log_batch_"),
        "the second run's record 2 was expected in a journal log batch, found in {table}"
    );
    assert_verify_names_altered(&dir, &id2, 2);
    // The first instance is still reported, and nothing else broke the second one.
    assert_verify_names_altered(&dir, &id, 2);
}

/// `weft journal verify ID` exits 1 and names record `seq` as altered.
fn assert_verify_names_altered(dir: &std::path::Path, id: &str, seq: u64) {
    let out = weft_in(dir, &["journal", "verify", id]);
    let text = stdout(&out);
    assert_eq!(code(&out), 1, "verify after altering seq {seq}: {text}");
    assert!(
        text.contains("BROKEN [chain_broken/record_altered]")
            && text.contains(&format!("journal chain broken at seq {seq}:"))
            && text.contains("(altered)"),
        "verify must name the altered record (seq {seq}): {text}"
    );
}

/// The body `tamper_body` writes: valid JSON, unlike any record weft writes.
const TAMPERED: &[u8] = br#"{"tampered":true}"#;

/// Alters the body of record `seq` of `instance` in the SQLite store file `db` behind the
/// store's back, wherever that record is: a row of `journal` (keyed `(part, instance,
/// seq)`), or one record inside a batch blob of a `journal_log_batch_K` table (recent
/// appends not merged yet; the blob is re-encoded, see weft-store-sqlite's `batch.rs`).
/// Returns the table it changed; panics unless it changed exactly one record.
fn tamper_body(db: &std::path::Path, instance: &str, seq: u64) -> String {
    let conn = rusqlite::Connection::open(db).expect("open the store file");
    let seq_sql = i64::try_from(seq).expect("seq fits SQLite");
    let n = conn
        .execute(
            "UPDATE journal SET body = ?1 WHERE instance = ?2 AND seq = ?3",
            rusqlite::params![TAMPERED, instance, seq_sql],
        )
        .expect("update journal");
    let mut changed: Vec<String> = vec!["journal".to_string(); n];
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name LIKE 'journal_log_batch_%' ORDER BY name",
        )
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .expect("list the journal log tables");
    assert!(!tables.is_empty(), "no journal_log_batch_* table in {db:?}");
    for table in tables {
        let rows: Vec<(i64, Vec<u8>)> = conn
            .prepare(&format!("SELECT rowid, data FROM {table}"))
            .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .expect("read a journal log table");
        for (rowid, data) in rows {
            if let Some(new) = rewrite_batch(&data, instance, seq) {
                conn.execute(
                    &format!("UPDATE {table} SET data = ?1 WHERE rowid = ?2"),
                    rusqlite::params![new, rowid],
                )
                .expect("update a log batch");
                changed.push(table.clone());
            }
        }
    }
    assert_eq!(
        changed.len(),
        1,
        "record {seq} of {instance} must be stored exactly once: found in {changed:?}"
    );
    changed.remove(0)
}

/// A log batch with record `seq` of `instance` given the [`TAMPERED`] body, or `None` when
/// the batch does not hold that record. A batch is a sequence of `instance_len: u32,
/// instance, seq: u64, at_ms: i64, kind_len: u32, kind, body_len: u32, body,
/// prev_hash: [u8; 32], hash: [u8; 32]`, integers little-endian.
fn rewrite_batch(data: &[u8], instance: &str, seq: u64) -> Option<Vec<u8>> {
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
        assert!(rest.len() >= n, "a journal log batch ends inside a record");
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        head
    }
    fn len(rest: &mut &[u8]) -> usize {
        u32::from_le_bytes(take(rest, 4).try_into().expect("4 bytes")) as usize
    }
    let mut rest = data;
    let mut out = Vec::with_capacity(data.len() + TAMPERED.len());
    let mut found = false;
    while !rest.is_empty() {
        let n = len(&mut rest);
        let inst = take(&mut rest, n);
        let seq_at = take(&mut rest, 8 + 8);
        let n = len(&mut rest);
        let kind = take(&mut rest, n);
        let n = len(&mut rest);
        let body = take(&mut rest, n);
        let hashes = take(&mut rest, 64);
        let this = inst == instance.as_bytes()
            && u64::from_le_bytes(seq_at[..8].try_into().expect("8 bytes")) == seq;
        let body = if this {
            found = true;
            TAMPERED
        } else {
            body
        };
        for (part, sized) in [(inst, true), (seq_at, false), (kind, true), (body, true)] {
            if sized {
                let n = u32::try_from(part.len()).expect("a field fits u32");
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.extend_from_slice(part);
        }
        out.extend_from_slice(hashes);
    }
    found.then_some(out)
}

/// Issue #27 item 7 end to end: the last record of a completed run deleted and the stored
/// chain head moved back onto the one before. `weft journal verify` names the cut
/// (`tail_missing`: the instance record's status was set at the removed seq), `weft replay`
/// does not claim to reproduce the recorded state, and `weft checkpoint` refuses.
#[test]
fn a_cut_tail_with_its_head_moved_back_is_found() {
    let dir = temp_dir("durable-tail");
    let out = run_fanout_stored(&dir);
    let id = json(&out)["instance"].as_str().expect("id").to_string();
    // Opening the store once merges the run's records into `journal` and `chain_heads`.
    assert_eq!(code(&weft_in(&dir, &["journal", "verify", &id])), 0);
    let conn = rusqlite::Connection::open(dir.join(".weft/weft.db")).expect("open");
    let last: i64 = conn
        .query_row(
            "SELECT max(seq) FROM journal WHERE instance = ?1",
            [&id],
            |r| r.get(0),
        )
        .expect("last seq");
    conn.execute_batch(&format!(
        "DELETE FROM journal WHERE instance = '{id}' AND seq = {last};
         UPDATE chain_heads SET head_seq = {prev}, head_hash =
           (SELECT hash FROM journal WHERE instance = '{id}' AND seq = {prev})
         WHERE instance = '{id}';",
        prev = last - 1
    ))
    .expect("tamper");
    drop(conn);

    let out = weft_in(&dir, &["journal", "verify", &id]);
    let text = stdout(&out);
    assert_eq!(code(&out), 1, "{text}");
    assert!(
        text.contains("BROKEN [chain_broken/tail_missing]")
            && text.contains(&format!("ends before seq {last}"))
            && text.contains("hint: "),
        "{text}"
    );
    let out = weft_in(&dir, &["replay", &id]);
    let text = stdout(&out);
    assert_eq!(code(&out), 1, "{text}");
    assert!(
        text.contains("MISMATCH") && text.contains("the instance record says completed"),
        "{text}"
    );
    let out = weft_in(&dir, &["checkpoint", &id]);
    assert_eq!(code(&out), 1);
    assert!(
        common::stderr(&out).contains("tail_missing"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn unknown_instance_is_a_clear_error() {
    let dir = temp_dir("durable-unknown");
    let out = weft_in(&dir, &["inspect", "nope", "--store", ".weft/weft.db"]);
    assert_eq!(code(&out), 2);
    let out = weft_in(
        &dir,
        &["journal", "verify", "nope", "--store", ".weft/weft.db"],
    );
    assert_ne!(code(&out), 0);
}

/// `weft transcript` reads the model exchanges kept under an instance in the store: the
/// summary line, each exchange's purpose and the question asked; `--json` has them whole.
/// An instance not in the store is a clear error.
#[test]
fn transcript_reads_an_instances_model_exchanges() {
    use weft_llm::TranscriptSink as _;
    let dir = temp_dir("transcript");
    let doc = json(&run_fanout_stored(&dir));
    let id = doc["instance"].as_str().expect("instance id").to_string();
    // The exchanges a model tool of this instance would have kept (the server's tests run
    // them through `llm.complete`); written here through the same sink.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store: std::sync::Arc<dyn weft_store::Store> =
            weft_store_sqlite::open(dir.join(".weft/weft.db").to_str().unwrap())
                .await
                .unwrap();
        let sink = weft_llm::StoreTranscript::new(store, &tokio::runtime::Handle::current());
        let mut correlation = weft_llm::Correlation::new("local");
        correlation.instance = Some(id.clone());
        let exchange = weft_llm::Exchange {
            seq: 0,
            correlation,
            purpose: "complete".into(),
            provider: "test".into(),
            request: weft_llm::ChatRequest {
                messages: vec![weft_llm::Message::user("Summarise the sales figures.")],
                ..Default::default()
            },
            response: Some(weft_llm::ChatResponse {
                content: Some("Sales grew.".into()),
                ..Default::default()
            }),
            error: None,
            usage: weft_llm::Usage {
                prompt_tokens: 12,
                completion_tokens: 3,
                ..Default::default()
            },
            latency_ms: 7,
            started_at_ms: 0,
        };
        sink.record(&exchange).unwrap();
        sink.flush().await.unwrap();
    });
    let out = weft_in(&dir, &["transcript", &id]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("1 exchange, 12 prompt and 3 completion tokens"),
        "{text}"
    );
    assert!(
        text.contains("complete via test") && text.contains("Summarise the sales figures."),
        "{text}"
    );
    assert!(text.contains("answer: Sales grew."), "{text}");
    let out = weft_in(&dir, &["transcript", &id, "--json"]);
    let v = json(&out);
    assert_eq!(v["exchanges"][0]["response"]["content"], "Sales grew.");
    assert_eq!(v["usage"]["prompt_tokens"], 12);
    let out = weft_in(&dir, &["transcript", "nope"]);
    assert_ne!(code(&out), 0);
    assert!(
        common::stderr(&out).contains("not_found"),
        "{}",
        common::stderr(&out)
    );
}

/// `[budget]`'s tenant quota is counted in the store by one-shot `weft run`s: the first run's
/// eleven calls count against the second, which is refused its fifth.
#[test]
fn a_tenant_quota_counts_every_run_on_the_store() {
    let dir = temp_dir("durable-quota");
    std::fs::write(
        dir.join("weft.toml"),
        "[budget]\nperiod_secs = 1099511627776\ntenant = { max_tool_calls = 15 }\n",
    )
    .expect("weft.toml");
    let doc = json(&run_fanout_stored(&dir));
    assert_eq!(doc["outcome"], "completed", "{doc}");
    let doc = json(&run_fanout(&dir));
    assert_eq!(doc["outcome"], "failed", "{doc}");
    assert!(doc.to_string().contains("quota of tenant `local`"), "{doc}");
}
