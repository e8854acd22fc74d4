//! weft's own workloads on reactive instances: `latency` (an external event arriving →
//! the step's tool being called, p50/p99) and `idle` (memory of many idle instances).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{Value, json};
use weft_core::{Effect, ToolSpec};
use weft_tools::{BoxFuture, Registry, Tool, ToolContext, ToolError};

use super::sys::{median, peak_rss_mib, rss_mib};
use super::{line, round};
use weft_runtime::{Engine, EngineOptions, StartOptions};

/// Records when it was called (ns since `base`).
struct Probe {
    spec: ToolSpec,
    base: Instant,
    at: Arc<AtomicU64>,
}

impl Tool for Probe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(
        &self,
        _ctx: ToolContext,
        _args: Value,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.at
            .store(self.base.elapsed().as_nanos() as u64, Ordering::Release);
        Box::pin(std::future::ready(Ok(Value::Null)))
    }
}

fn reactive_plan(name: &str, action: &str) -> Value {
    json!({"plan_name": name, "graph_type": "reactive",
        "events": {"start": {}, "ping": {"kind": "input"}, "pong": {"kind": "output"}},
        "steps": {"probe": {"on": ["ping"], "action": action, "args": {}, "emits": []}}})
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let k = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[k.min(sorted.len() - 1)]
}

/// `latency`: 5 × 20,000 events routed by (tenant, event) to one waiting instance.
pub(crate) async fn latency() -> Result<Value, String> {
    let base = Instant::now();
    let at = Arc::new(AtomicU64::new(0));
    let mut registry = Registry::new();
    registry.register(Arc::new(Probe {
        spec: ToolSpec {
            name: "bench.probe".into(),
            description: "Records the time it is called.".into(),
            args_schema: json!({}),
            effect: Effect::Pure,
            idempotent: true,
            cost: None,
            llm: false,
        },
        base,
        at: Arc::clone(&at),
    }));
    let engine = Engine::new(EngineOptions {
        registry: Arc::new(registry),
        max_firings_per_sec: None,
        ..EngineOptions::default()
    });
    let plan = engine
        .compile_value(reactive_plan("latency", "bench.probe"))
        .map_err(|e| e.to_string())?;
    let h = engine
        .start_with("bench", &plan, json!({}), StartOptions::default())
        .map_err(|e| e.to_string())?;
    let one = |i: usize| -> Result<f64, String> {
        let t0 = base.elapsed().as_nanos() as u64;
        let n = engine
            .ingest("bench", "ping", json!({"i": i}), None, None)
            .map_err(|e| e.to_string())?;
        let t1 = at.load(Ordering::Acquire);
        if n != 1 || t1 < t0 {
            return Err("the event did not reach the tool".to_string());
        }
        Ok((t1 - t0) as f64 / 1000.0)
    };
    for i in 0..1000 {
        one(i)?;
    }
    let mut samples = Vec::with_capacity(100_000);
    let mut reps = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..20_000 {
            samples.push(one(i)?);
        }
        reps.push(t.elapsed().as_secs_f64());
    }
    let fired = h.state().fired;
    if fired != 101_000 {
        return Err(format!("expected 101000 firings, saw {fired}"));
    }
    h.stop();
    samples.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    Ok(line(
        "latency",
        "p99_us",
        p99,
        "us",
        json!({"p50_us": round(p50), "p99_us": round(p99), "max_us": round(percentile(&samples, 1.0)),
            "samples": samples.len(), "rep_seconds": reps, "median_rep_seconds": median(&reps),
            "peak_rss_mib": round(peak_rss_mib())}),
    ))
}

/// `idle`: `n` reactive instances each waiting for an event.
pub(crate) fn idle(n: usize) -> Result<Value, String> {
    let mut registry = Registry::new();
    weft_builtins::register_pure(&mut registry);
    let engine = Engine::new(EngineOptions {
        registry: Arc::new(registry),
        ..EngineOptions::default()
    });
    let plan = engine
        .compile_value(reactive_plan("idle", "noop"))
        .map_err(|e| e.to_string())?;
    let before = rss_mib();
    let t = Instant::now();
    let mut last = None;
    for _ in 0..n {
        let h = engine
            .start_with("bench", &plan, json!({}), StartOptions::default())
            .map_err(|e| e.to_string())?;
        last = Some(h.id().to_string());
    }
    let secs = t.elapsed().as_secs_f64();
    let after = rss_mib();
    let live = engine.live_instances();
    if live != n {
        return Err(format!("expected {n} live instances, found {live}"));
    }
    // Liveness: the last one still answers an event.
    let id = last.ok_or("no instance")?;
    engine
        .ingest("bench", "ping", json!({}), None, Some(&id))
        .map_err(|e| e.to_string())?;
    let fired = engine.state(&id).map_err(|e| e.to_string())?.fired;
    if fired != 1 {
        return Err("an idle instance did not wake up".to_string());
    }
    let per = (after - before) * 1024.0 * 1024.0 / n as f64;
    Ok(line(
        "idle",
        "bytes_per_instance",
        per,
        "B",
        json!({"instances": n, "total_mib": round(after - before), "rss_before_mib": round(before),
            "rss_after_mib": round(after), "seconds_to_create": round(secs),
            "instances_per_second": round(n as f64 / secs), "peak_rss_mib": round(peak_rss_mib())}),
    ))
}

#[cfg(test)]
mod tests {
    /// Every reactive workload builds its engine with the tools its plan names (a small
    /// `idle` here: the real one is a million instances).
    #[test]
    fn idle_runs_with_the_tools_it_needs() {
        let v = super::idle(100).expect("idle");
        assert_eq!(v["workload"], "idle", "{v}");
    }
}
