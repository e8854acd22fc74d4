//! Transcripts and the plan cache kept in a weft store, so `weft` runs and the server keep
//! them across processes, on SQLite or PostgreSQL alike.
//!
//! Both use the store's append-only, hash-chained journal under reserved names (as
//! weft-durable's `weft.ids` does), so no backend needs a new table:
//! - transcripts: one `llm.exchange` record per exchange in the journal
//!   `llm.transcript/<tenant>/<scope>`, where the scope is `instance/<id>` when the exchange
//!   ran for an instance, else `plan/<name>`, else `corr/<correlation id>`
//!   ([`list_transcripts`] reads one back);
//! - plan cache: one `llm.plan` record `{key, plan}` per put in the journal
//!   `llm.plan-cache/<tenant>/<sha256 of the key>`; the head record is the cached plan.
//!
//! [`TranscriptSink::record`] is synchronous (it runs inside the LLM call), so
//! [`StoreTranscript`] hands exchanges to one writer task that appends them in order;
//! [`StoreTranscript::flush`] waits until everything recorded so far is stored.

use std::sync::{Arc, Mutex};

use sha2::Digest;
use tokio::sync::{mpsc, oneshot};
use weft_core::Plan;
use weft_store::{NewRecord, Store};

use crate::error::{Error, Result};
use crate::ids::Correlation;
use crate::planner::PlanCache;
use crate::provider::BoxFuture;
use crate::transcript::{Exchange, TranscriptSink};

/// Which transcript to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TranscriptScope {
    /// The exchanges made for an instance (repairs, `llm.complete`, `agent.react`).
    Instance(String),
    /// The exchanges made for a plan without an instance (planning, explain).
    Plan(String),
    /// One operation without plan or instance (a `weft plan` run before it has a name).
    Correlation(String),
}

impl TranscriptScope {
    /// The scope an exchange is filed under.
    pub fn of(c: &Correlation) -> TranscriptScope {
        match (&c.instance, &c.plan) {
            (Some(i), _) => TranscriptScope::Instance(i.clone()),
            (None, Some(p)) => TranscriptScope::Plan(p.clone()),
            (None, None) => TranscriptScope::Correlation(c.correlation_id.clone()),
        }
    }

    fn journal(&self, tenant: &str) -> String {
        let (kind, id) = match self {
            TranscriptScope::Instance(i) => ("instance", i),
            TranscriptScope::Plan(p) => ("plan", p),
            TranscriptScope::Correlation(c) => ("corr", c),
        };
        format!("llm.transcript/{tenant}/{kind}/{id}")
    }
}

/// The exchanges of one tenant's scope, oldest first.
pub async fn list_transcripts(
    store: &dyn Store,
    tenant: &str,
    scope: &TranscriptScope,
) -> Result<Vec<Exchange>> {
    let name = scope.journal(tenant);
    let mut out = Vec::new();
    let mut from = 1u64;
    loop {
        let page = store
            .read(&name, from, 1_000)
            .await
            .map_err(|e| Error::Transcript(e.to_string()))?;
        let Some(last) = page.last() else { break };
        from = last.seq + 1;
        for r in &page {
            out.push(
                r.json::<Exchange>()
                    .map_err(|e| Error::Transcript(e.to_string()))?,
            );
        }
        if page.len() < 1_000 {
            break;
        }
    }
    Ok(out)
}

enum Msg {
    Record(Box<Exchange>),
    Flush(oneshot::Sender<()>),
}

/// A [`TranscriptSink`] over a store (see the module doc).
#[derive(Debug, Clone)]
pub struct StoreTranscript {
    tx: mpsc::UnboundedSender<Msg>,
    failed: Arc<Mutex<Option<String>>>,
}

impl StoreTranscript {
    /// A sink appending to `store`; its writer task runs on `rt`.
    pub fn new(store: Arc<dyn Store>, rt: &tokio::runtime::Handle) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        let failed: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let f = Arc::clone(&failed);
        rt.spawn(async move {
            while let Some(m) = rx.recv().await {
                match m {
                    Msg::Record(ex) => {
                        let name =
                            TranscriptScope::of(&ex.correlation).journal(&ex.correlation.tenant);
                        let rec = NewRecord::json("llm.exchange", &*ex, ex.started_at_ms);
                        let res = match rec {
                            Ok(r) => store.append(&name, vec![r]).await.map(|_| ()),
                            Err(e) => Err(e),
                        };
                        if let Err(e) = res {
                            tracing::warn!(error = %e, message = "Transcript not stored");
                            if let Ok(mut g) = f.lock() {
                                g.get_or_insert_with(|| e.to_string());
                            }
                        }
                    }
                    Msg::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        StoreTranscript { tx, failed }
    }

    /// Waits until every exchange recorded so far is stored; the first store error, if any.
    pub async fn flush(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Msg::Flush(tx))
            .map_err(|_| Error::Transcript("the transcript writer has stopped".into()))?;
        rx.await
            .map_err(|_| Error::Transcript("the transcript writer has stopped".into()))?;
        match self.failed.lock().ok().and_then(|g| g.clone()) {
            Some(e) => Err(Error::Transcript(e)),
            None => Ok(()),
        }
    }
}

impl TranscriptSink for StoreTranscript {
    fn record(&self, exchange: &Exchange) -> Result<()> {
        self.tx
            .send(Msg::Record(Box::new(exchange.clone())))
            .map_err(|_| Error::Transcript("the transcript writer has stopped".into()))
    }
}

/// A [`PlanCache`] over a store, per tenant (see the module doc).
#[derive(Clone)]
pub struct StorePlanCache {
    store: Arc<dyn Store>,
    tenant: String,
}

impl std::fmt::Debug for StorePlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorePlanCache")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Cached {
    key: String,
    plan: Plan,
}

impl StorePlanCache {
    /// The cache of `tenant` in `store`.
    pub fn new(store: Arc<dyn Store>, tenant: impl Into<String>) -> Self {
        StorePlanCache {
            store,
            tenant: tenant.into(),
        }
    }

    fn journal(&self, key: &str) -> String {
        let d = sha2::Sha256::digest(key.as_bytes());
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        format!("llm.plan-cache/{}/{hex}", self.tenant)
    }
}

impl PlanCache for StorePlanCache {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<Plan>> {
        Box::pin(async move {
            let name = self.journal(key);
            let (seq, _) = match self.store.head(&name).await {
                Ok(Some(h)) => h,
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!(error = %e, message = "Plan cache unreadable");
                    return None;
                }
            };
            let rec = self.store.read(&name, seq, 1).await.ok()?;
            let c: Cached = rec.first()?.json().ok()?;
            // The journal is named by the key's hash; the key itself must match too.
            (c.key == key).then_some(c.plan)
        })
    }

    fn put<'a>(&'a self, key: &'a str, plan: &'a Plan) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let body = Cached {
                key: key.to_string(),
                plan: plan.clone(),
            };
            let res = match NewRecord::json("llm.plan", &body, crate::ids::now_ms()) {
                Ok(r) => self.store.append(&self.journal(key), vec![r]).await,
                Err(e) => Err(e),
            };
            if let Err(e) = res {
                tracing::warn!(error = %e, message = "Plan not cached");
            }
        })
    }
}
