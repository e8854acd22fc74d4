//! The operator's quotas across processes and restarts: a durable node's quota counters
//! (`[budget] plan`, `tenant`, `planner`, all in one [`SharedCounts`]) start from the totals
//! the store holds, and a task adds what this process counted to the store's counters every
//! `[budget] sync_ms`, reading the other processes' counts back (`Store::add_counts`). The
//! counting itself stays in memory, on the engine's hot path; see `weft_tools::shared` for
//! what is exact and what may pass a quota.

use std::sync::Arc;
use std::time::Duration;

use weft_store::{CountRow, Counts, Store};
use weft_tools::SharedCounts;
use weft_tools::shared::Delta;

use crate::Error;
use crate::config::BudgetConfig;

/// One quota: its limits and what was used of it in the current period.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QuotaUse {
    /// The limits (`max_tool_calls`, `max_llm_calls`, `max_llm_tokens`, `max_cost`; the
    /// planner's also `calls_per_minute`, counted per process).
    pub limits: serde_json::Value,
    /// What was used (`tool_calls`, `llm_calls`, `cost`, `llm_tokens`).
    pub used: weft_tools::Usage,
}

/// A tenant's quotas in the current period (`GET /v1/quotas`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QuotaReport {
    /// The period's length.
    pub period_secs: u64,
    /// When the current period ends (epoch ms), and its counts start again at zero.
    pub period_ends_ms: i64,
    /// Whether the counts are every process's on the store (`true`) or this process's.
    pub shared: bool,
    /// `[budget] tenant`, when set.
    pub tenant: Option<QuotaUse>,
    /// `[budget] plan`, when set: each plan of the tenant counted in this period, by name.
    pub plans: std::collections::BTreeMap<String, QuotaUse>,
    /// `[budget] plan`'s limits, when set: what each plan may use, counted yet or not (so a
    /// quota no plan has used is told apart from no quota).
    pub plan_limits: Option<serde_json::Value>,
    /// `[budget.planner]`, when set.
    pub planner: Option<QuotaUse>,
}

impl QuotaReport {
    /// The current period's index and end, for `budget`'s `period_secs`.
    pub(crate) fn period(budget: &BudgetConfig, now_ms: i64) -> (u64, i64) {
        weft_tools::shared::period_of(budget.period_secs.saturating_mul(1000), now_ms)
    }

    /// `tenant`'s report from the counters `totals` (key, period, total).
    pub(crate) fn new(
        budget: &BudgetConfig,
        tenant: &str,
        now_ms: i64,
        shared: bool,
        totals: &[(String, u64, weft_tools::Usage)],
    ) -> QuotaReport {
        let (period, ends) = QuotaReport::period(budget, now_ms);
        let used = |key: &str| {
            totals
                .iter()
                .find(|(k, p, _)| k == key && *p == period)
                .map_or(weft_tools::Usage::default(), |(_, _, u)| *u)
        };
        let quota = budget.quotas();
        let tenant_use = quota
            .as_ref()
            .and_then(|q| q.tenant.as_ref())
            .map(|l| QuotaUse {
                limits: to_json(l),
                used: used(&weft_tools::shared::tenant_key(tenant)),
            });
        let mut plans = std::collections::BTreeMap::new();
        let plan_limits = quota.as_ref().and_then(|q| q.plan.as_ref());
        if let Some(limits) = plan_limits {
            let prefix = weft_tools::shared::plan_key(tenant, "");
            for (key, p, u) in totals {
                if let (Some(name), true) = (key.strip_prefix(&prefix), *p == period) {
                    plans.insert(
                        name.to_string(),
                        QuotaUse {
                            limits: to_json(limits),
                            used: *u,
                        },
                    );
                }
            }
        }
        let planner = budget.planner.as_ref().map(|p| QuotaUse {
            limits: to_json(p),
            used: used(&weft_tools::shared::planner_key(tenant)),
        });
        QuotaReport {
            period_secs: budget.period_secs,
            period_ends_ms: ends,
            shared,
            tenant: tenant_use,
            plans,
            plan_limits: plan_limits.map(to_json),
            planner,
        }
    }
}

/// A limits value as JSON.
fn to_json<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

fn row(d: &Delta) -> CountRow {
    CountRow {
        key: d.key.to_string(),
        period: d.period,
        ends_ms: d.ends_ms,
        counts: Counts {
            tool_calls: d.add.tool_calls,
            llm_calls: d.add.llm_calls,
            llm_tokens: d.add.llm_tokens,
            cost: d.add.cost,
        },
    }
}

pub(crate) fn usage(c: &Counts) -> weft_tools::Usage {
    weft_tools::Usage {
        tool_calls: c.tool_calls,
        llm_calls: c.llm_calls,
        llm_tokens: c.llm_tokens,
        cost: c.cost,
    }
}

/// Counters synced with a store, and the task that syncs them (stopped when the last clone
/// of the node that owns it goes).
pub(crate) struct Synced {
    counts: Arc<SharedCounts>,
    store: Arc<dyn Store>,
    /// One sync at a time: the task's and [`Synced::sync`]'s.
    turn: tokio::sync::Mutex<()>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Synced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Synced")
            .field("store", &self.store.backend())
            .finish_non_exhaustive()
    }
}

impl Drop for Synced {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.abort();
        }
    }
}

impl Synced {
    /// Starts `counts` from `store`'s live counters and syncs them every `every`. A store
    /// that keeps no counters is an error.
    pub(crate) async fn start(
        counts: Arc<SharedCounts>,
        store: Arc<dyn Store>,
        every: Duration,
    ) -> Result<Arc<Synced>, Error> {
        let live = store
            .live_counts(weft_store::now_ms())
            .await
            .map_err(|e| Error::Durable(weft_durable::DurableError::from(e)))?;
        counts.seed(live.iter().map(|r| {
            (
                Arc::from(r.key.as_str()),
                r.period,
                r.ends_ms,
                usage(&r.counts),
            )
        }));
        let synced = Arc::new(Synced {
            counts,
            store,
            turn: tokio::sync::Mutex::new(()),
            task: std::sync::Mutex::new(None),
        });
        let weak = Arc::downgrade(&synced);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut failing = false;
            loop {
                tick.tick().await;
                let Some(s) = weak.upgrade() else { return };
                match s.sync().await {
                    Ok(()) if failing => {
                        failing = false;
                        tracing::info!("the quota counters are synced with the store again");
                    }
                    Ok(()) => {}
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(
                            error = %e,
                            "cannot sync the quota counters with the store; this process \
                             counts alone until it can (what it counts is sent then)"
                        );
                    }
                    Err(_) => {}
                }
            }
        });
        *synced.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        Ok(synced)
    }

    /// Adds what was counted since the last sync to the store and reads the totals back.
    pub(crate) async fn sync(&self) -> Result<(), Error> {
        self.sync_store()
            .await
            .map_err(|e| Error::Durable(weft_durable::DurableError::from(e)))
    }

    async fn sync_store(&self) -> Result<(), weft_store::Error> {
        let _turn = self.turn.lock().await;
        let now = weft_store::now_ms();
        let deltas = self.counts.take(now);
        if deltas.is_empty() {
            return Ok(());
        }
        if deltas.iter().all(|d| d.add.is_zero()) {
            // Nothing to add: read the others' counts without a write transaction (an idle
            // node does not write every `sync_ms`).
            let live = self.store.live_counts(now).await?;
            let settled: Vec<_> = live
                .iter()
                .map(|r| (Arc::from(r.key.as_str()), r.period, usage(&r.counts)))
                .collect();
            self.counts.settle(&settled);
            return Ok(());
        }
        match self
            .store
            .add_counts(deltas.iter().map(row).collect(), now)
            .await
        {
            Ok(totals) => {
                let settled: Vec<_> = deltas
                    .iter()
                    .zip(&totals)
                    .map(|(d, t)| (Arc::clone(&d.key), d.period, usage(t)))
                    .collect();
                self.counts.settle(&settled);
                Ok(())
            }
            Err(e) => {
                self.counts.failed();
                Err(e)
            }
        }
    }
}
