//! `/metrics`: OpenMetrics text from `prometheus-client`, or the Prometheus text format 0.0.4
//! ([`prometheus_text`]) for clients that do not ask for OpenMetrics. Counters are bumped by
//! the handlers (events ingested and routed, instances started, HTTP responses, LLM tokens,
//! lifecycle events an SSE stream missed, and, when an instance of a plan with `limits` ends,
//! what it used and whether a call was refused for it) and by `StepTimer`, which times every
//! tool call the engine makes (steps fired, action latency) through `weft_tools::Timed`;
//! gauges (live instances, journal work) are read at scrape time.
//!
//! Step metrics come from a tool wrapper rather than from a bus subscriber on purpose: with
//! a subscriber the engine builds and publishes two CloudEvents per step even when nobody
//! streams them, ~10% of the server's CPU under the event load of `weft-loadgen`. Without
//! one (no SSE client connected) the engine skips building lifecycle events altogether.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use weft_runtime::Engine;

/// `status` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// The status.
    pub status: String,
}

/// `code` label (HTTP status).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// The HTTP status code.
    pub code: String,
}

/// `kind` label (LLM tokens: prompt / completion).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The kind.
    pub kind: String,
}

/// Every metric the server exports.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// Instances started.
    pub started: Counter,
    /// Instances that reached a terminal status, by status.
    pub finished: Family<StatusLabel, Counter>,
    /// Live instances (gauge, set at scrape).
    pub live: Gauge,
    /// Steps fired (tool calls: one per attempt).
    pub steps_fired: Counter,
    /// Action latency (seconds): the tool's own time, from its call to its outcome.
    pub action_latency: Histogram,
    /// Events accepted by `POST /v1/events`.
    pub events_ingested: Counter,
    /// Deliveries of ingested events to instances.
    pub events_routed: Counter,
    /// Time from accepting events to their journal records being durable (seconds).
    pub journal_commit: Histogram,
    /// Journal records appended (gauge, from the journal's counters at scrape).
    pub journal_records: Gauge,
    /// Journal appends issued.
    pub journal_appends: Gauge,
    /// HTTP responses by status code.
    pub http_responses: Family<CodeLabel, Counter>,
    /// The counters of `http_responses` by status code, looked up once each.
    by_status: Arc<[std::sync::OnceLock<Counter>]>,
    /// LLM tokens used by the API's LLM calls.
    pub llm_tokens: Family<KindLabel, Counter>,
    /// Lifecycle events SSE streams missed (bus overflow).
    pub bus_lagged: Counter,
    /// What finished instances of plans with `limits` used, by measure (`tool_calls`,
    /// `llm_calls`, `cost` in thousandths).
    pub budget_used: Family<KindLabel, Counter>,
    /// Instances that ended after a call was refused for their plan's `limits`.
    pub budget_exceeded: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("weft");
        let started = Counter::default();
        r.register("instances_started", "Instances started", started.clone());
        let finished = Family::<StatusLabel, Counter>::default();
        r.register(
            "instances_finished",
            "Instances that reached a terminal status, by status",
            finished.clone(),
        );
        let live = Gauge::default();
        r.register(
            "instances_live",
            "Live instances (running, waiting, stuck or paused)",
            live.clone(),
        );
        let steps_fired = Counter::default();
        r.register(
            "steps_fired",
            "Steps fired (action calls, one per attempt)",
            steps_fired.clone(),
        );
        let action_latency = Histogram::new(exponential_buckets(0.000_05, 4.0, 12));
        r.register(
            "action_latency_seconds",
            "Time from an action's call to its outcome (after its journal records are durable)",
            action_latency.clone(),
        );
        let events_ingested = Counter::default();
        r.register(
            "events_ingested",
            "CloudEvents accepted by POST /v1/events",
            events_ingested.clone(),
        );
        let events_routed = Counter::default();
        r.register(
            "events_routed",
            "Deliveries of ingested events to instances",
            events_routed.clone(),
        );
        let journal_commit = Histogram::new(exponential_buckets(0.000_05, 4.0, 12));
        r.register(
            "journal_commit_seconds",
            "Time from accepting events or a start to their journal records being durable",
            journal_commit.clone(),
        );
        let journal_records = Gauge::default();
        r.register(
            "journal_records",
            "Journal records appended by this process",
            journal_records.clone(),
        );
        let journal_appends = Gauge::default();
        r.register(
            "journal_appends",
            "Journal appends issued by this process",
            journal_appends.clone(),
        );
        let http_responses = Family::<CodeLabel, Counter>::default();
        r.register(
            "http_responses",
            "HTTP responses by status code",
            http_responses.clone(),
        );
        let llm_tokens = Family::<KindLabel, Counter>::default();
        r.register(
            "llm_tokens",
            "LLM tokens used by API calls (prompt, completion)",
            llm_tokens.clone(),
        );
        let bus_lagged = Counter::default();
        r.register(
            "bus_lagged_events",
            "Lifecycle events SSE streams missed (slow clients)",
            bus_lagged.clone(),
        );
        let budget_used = Family::<KindLabel, Counter>::default();
        r.register(
            "budget_used",
            "What finished instances of plans with limits used (tool_calls, llm_calls, cost in thousandths)",
            budget_used.clone(),
        );
        let budget_exceeded = Counter::default();
        r.register(
            "budget_exceeded_instances",
            "Instances that ended after a call was refused for their plan's limits",
            budget_exceeded.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            started,
            finished,
            live,
            steps_fired,
            action_latency,
            events_ingested,
            events_routed,
            journal_commit,
            journal_records,
            journal_appends,
            http_responses,
            by_status: (100..600).map(|_| std::sync::OnceLock::new()).collect(),
            llm_tokens,
            bus_lagged,
            budget_used,
            budget_exceeded,
        }
    }

    /// Counts what a finished instance of a plan with `limits` used; `exceeded` when a call
    /// was refused for them.
    pub fn budget(&self, used: weft_runtime::Usage, exceeded: bool) {
        let cost_milli = (used.cost * 1000.0).round().max(0.0) as u64;
        for (kind, n) in [
            ("tool_calls", used.tool_calls),
            ("llm_calls", used.llm_calls),
            ("cost", cost_milli),
        ] {
            self.budget_used
                .get_or_create(&KindLabel { kind: kind.into() })
                .inc_by(n);
        }
        if exceeded {
            self.budget_exceeded.inc();
        }
    }

    /// Counts an HTTP response.
    pub fn response(&self, status: axum::http::StatusCode) {
        let code = status.as_u16();
        let new = || {
            self.http_responses
                .get_or_create(&CodeLabel {
                    code: status.as_str().to_string(),
                })
                .clone()
        };
        match self.by_status.get(usize::from(code).wrapping_sub(100)) {
            Some(slot) => slot.get_or_init(new).inc(),
            None => new().inc(),
        };
    }

    /// Counts a terminal status.
    pub fn finished(&self, status: &str) {
        self.finished
            .get_or_create(&StatusLabel {
                status: status.to_string(),
            })
            .inc();
    }

    /// Counts LLM usage.
    pub fn llm_usage(&self, prompt: u64, completion: u64) {
        for (kind, n) in [("prompt", prompt), ("completion", completion)] {
            self.llm_tokens
                .get_or_create(&KindLabel {
                    kind: kind.to_string(),
                })
                .inc_by(n);
        }
    }

    /// The link of the tool-call chain that feeds these metrics (its metrics stage):
    /// every tool the engine runs is wrapped in [`weft_tools::Timed`] with `StepTimer`.
    pub fn link(&self) -> Arc<dyn weft_tools::Interceptor> {
        Arc::new(weft_tools::TimeCalls(Arc::new(StepTimer {
            steps: self.steps_fired.clone(),
            latency: self.action_latency.clone(),
        })))
    }

    /// The text exposition, after refreshing the scrape-time gauges.
    pub fn render(&self, engine: &Engine, journal: &weft_durable::StoreJournal) -> String {
        self.live
            .set(i64::try_from(engine.live_instances()).unwrap_or(i64::MAX));
        let s = journal.stats();
        self.journal_records
            .set(i64::try_from(s.records).unwrap_or(i64::MAX));
        self.journal_appends
            .set(i64::try_from(s.appends).unwrap_or(i64::MAX));
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// The Prometheus text format 0.0.4 of an OpenMetrics 1.0 exposition as `prometheus-client`
/// writes it (counters, gauges, histograms; no exemplars, no `_created`): the same samples,
/// with a counter family's `HELP` and `TYPE` naming its `_total` sample, and no `UNIT` lines
/// or `# EOF` (0.0.4 has neither).
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(prefix);
                out.push_str(name);
                out.push_str(total);
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The server's timer of tool calls: counts each call as a step fired and observes its
/// latency.
struct StepTimer {
    steps: Counter,
    latency: Histogram,
}

impl weft_tools::CallTimer for StepTimer {
    fn describe(&self) -> String {
        "server metrics (steps fired, action latency)".into()
    }
    fn started(&self) {
        self.steps.inc();
    }
    fn ended(&self, since: Instant) {
        self.latency.observe(since.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod format_tests {
    #[test]
    fn openmetrics_becomes_prometheus_text() {
        let om = "# HELP weft_started Instances started.\n# TYPE weft_started counter\nweft_started_total 3\n# HELP weft_latency_seconds Latency.\n# TYPE weft_latency_seconds histogram\n# UNIT weft_latency_seconds seconds\nweft_latency_seconds_sum 0.5\nweft_latency_seconds_count 2\n# HELP weft_live Live.\n# TYPE weft_live gauge\nweft_live 1\n# EOF\n";
        assert_eq!(
            super::prometheus_text(om),
            "# HELP weft_started_total Instances started.\n# TYPE weft_started_total counter\nweft_started_total 3\n# HELP weft_latency_seconds Latency.\n# TYPE weft_latency_seconds histogram\nweft_latency_seconds_sum 0.5\nweft_latency_seconds_count 2\n# HELP weft_live Live.\n# TYPE weft_live gauge\nweft_live 1\n"
        );
    }
}
