//! Store-backed transcripts and plan cache on SQLite and PostgreSQL (ignored unless
//! `WEFT_TEST_POSTGRES_URL` was set at build time): every exchange of a planning run and of a repair
//! is kept per instance / plan and read back in order by a "new process"; the same
//! instruction, tool set and model is planned once and then served from the store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use weft_core::{StaticCatalog, ToolCatalog, ToolSpec};
use weft_llm::{
    Correlation, Llm, PlanOptions, ScriptedExchange, ScriptedProvider, StorePlanCache,
    StoreTranscript, TranscriptScope, list_transcripts,
};
use weft_store::Store;

static N: AtomicU64 = AtomicU64::new(0);

async fn sqlite() -> Arc<dyn Store> {
    let dir = std::env::temp_dir().join(format!(
        "weft-llm-stored-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Arc::new(
        weft_store_sqlite::SqliteStore::open(&dir.join("weft.db"))
            .await
            .unwrap(),
    )
}

/// A PostgreSQL store in a fresh schema. Its test is ignored unless `WEFT_TEST_POSTGRES_URL`
/// was set at build time (`cfg(weft_postgres)`), so a missing variable is a failure here.
async fn postgres() -> Arc<dyn Store> {
    let url = match std::env::var("WEFT_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "this test needs PostgreSQL and WEFT_TEST_POSTGRES_URL is not set (it was when the \
             test was built): export WEFT_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
             (bash .ci/run starts the server)"
        ),
    };
    let schema = format!(
        "llm_stored_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    Arc::new(
        weft_store_postgres::PgStore::open_in_schema(&url, Some(&schema))
            .await
            .unwrap(),
    )
}

fn tools() -> Vec<ToolSpec> {
    let c = StaticCatalog::builtin();
    ["log", "echo"]
        .iter()
        .filter_map(|n| c.spec(n).cloned())
        .collect()
}

fn good_plan() -> Value {
    json!({"plan_name": "greet", "graph_type": "acyclic",
      "events": {"start": {}, "done": {"kind": "output"}},
      "steps": {"say": {"on": ["start"], "action": "log", "args": {"message": "hi"}, "emits": ["done"]}}})
}

fn bad_plan() -> Value {
    json!({"plan_name": "greet", "graph_type": "acyclic",
      "events": {"start": {}, "done": {"kind": "output"}},
      "steps": {"say": {"on": ["start"], "action": "no_such_tool", "emits": ["done"]}}})
}

async fn transcripts_and_cache(store: Arc<dyn Store>) {
    let rt = tokio::runtime::Handle::current();
    let sink = StoreTranscript::new(Arc::clone(&store), &rt);
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::tool_call("create_plan", bad_plan()),
        ScriptedExchange::tool_call("create_plan", good_plan()).when_last("CRITIC"),
    ]));
    let llm = Llm::new(provider.clone()).with_transcripts(Arc::new(sink.clone()));
    let cache: Arc<dyn weft_llm::PlanCache> =
        Arc::new(StorePlanCache::new(Arc::clone(&store), "acme"));
    let opts = PlanOptions {
        correlation: Correlation::new("acme").with_plan("greet"),
        cache: Some(Arc::clone(&cache)),
        ..PlanOptions::default()
    };
    let first = weft_llm::plan(&llm, "Say  hi", &tools(), &opts)
        .await
        .unwrap();
    assert!(!first.from_cache);
    assert_eq!(first.attempts, 2);
    sink.flush().await.unwrap();

    // Read back in order (as another process would).
    let ex = list_transcripts(
        store.as_ref(),
        "acme",
        &TranscriptScope::Plan("greet".into()),
    )
    .await
    .unwrap();
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].purpose, "plan");
    assert!(
        ex[1]
            .request
            .messages
            .last()
            .unwrap()
            .content_str()
            .contains("CRITIC")
    );
    assert_eq!(ex[0].correlation.tenant, "acme");
    // Another tenant sees nothing.
    assert!(
        list_transcripts(
            store.as_ref(),
            "other",
            &TranscriptScope::Plan("greet".into())
        )
        .await
        .unwrap()
        .is_empty()
    );

    // Same instruction (normalised), tools and model: from the store, no model call, also
    // through a fresh cache object.
    let fresh: Arc<dyn weft_llm::PlanCache> =
        Arc::new(StorePlanCache::new(Arc::clone(&store), "acme"));
    let opts2 = PlanOptions {
        cache: Some(fresh),
        ..opts.clone()
    };
    let again = weft_llm::plan(&llm, "say hi", &tools(), &opts2)
        .await
        .unwrap();
    assert!(again.from_cache);
    assert_eq!(again.plan, first.plan);
    assert_eq!(provider.used(), 2, "the model was not called again");
    // A different tool set, or another tenant, is a miss.
    let other = StorePlanCache::new(Arc::clone(&store), "other");
    let key = weft_llm::planner::cache_key_for_model(
        "say hi",
        tools().iter().map(|t| t.name.as_str()),
        &llm.model_id(),
    );
    assert!(weft_llm::PlanCache::get(&other, &key).await.is_none());
    let key2 = weft_llm::planner::cache_key_for_model("say hi", ["log"], &llm.model_id());
    assert!(
        weft_llm::PlanCache::get(cache.as_ref(), &key2)
            .await
            .is_none()
    );
    assert!(
        weft_llm::PlanCache::get(cache.as_ref(), &key)
            .await
            .is_some()
    );

    // Exchanges made for an instance are filed under it.
    let llm_i = Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::content("ok"),
    ])))
    .with_transcripts(Arc::new(sink.clone()));
    let req = weft_llm::ChatRequest {
        messages: vec![weft_llm::Message::user("hello")],
        ..weft_llm::ChatRequest::default()
    };
    llm_i
        .chat(
            &Correlation::new("acme")
                .with_plan("greet")
                .with_instance("i7"),
            "llm.complete",
            "complete",
            req,
        )
        .await
        .unwrap();
    sink.flush().await.unwrap();
    let ex = list_transcripts(
        store.as_ref(),
        "acme",
        &TranscriptScope::Instance("i7".into()),
    )
    .await
    .unwrap();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].purpose, "complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcripts_and_plan_cache_sqlite() {
    transcripts_and_cache(sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn transcripts_and_plan_cache_postgres() {
    transcripts_and_cache(postgres().await).await;
}
