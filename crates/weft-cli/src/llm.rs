//! Which language model a command talks to: a scripted provider file (`--script`, offline
//! demos and tests), else the one the configuration's `[llm]` section describes
//! (`WEFT_LLM_*`), else an error saying what to set. Also how a command shows the model's
//! retries (a line per attempt on stderr) and which model errors are the environment's
//! (exit 2) rather than the plan's.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context as _;
use tracing_subscriber::layer::SubscriberExt as _;
use weft_llm::{ChatProvider, ScriptedProvider};

use crate::cmd::Ctx;
use crate::output::Palette;

/// A scripted provider read from `path`.
pub fn scripted(path: &Path) -> anyhow::Result<Arc<dyn ChatProvider>> {
    let p = ScriptedProvider::from_file(path)
        .with_context(|| format!("cannot use script `{}`", path.display()))?;
    Ok(Arc::new(p))
}

/// The model for a command: `script` when given, else the configured one.
pub fn model(ctx: &Ctx, script: Option<&Path>) -> anyhow::Result<Arc<dyn ChatProvider>> {
    if let Some(path) = script {
        return scripted(path);
    }
    weft_node::llm::provider(&ctx.config.config.llm)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{}, or use a scripted provider file (--script FILE)",
                weft_node::llm::NOT_CONFIGURED
            )
        })
}

/// Is `e` the environment's fault (no or bad configuration, the model unreachable, timing
/// out or failing with 5xx) rather than the plan's or the model's replies? Those exit 2, as
/// other usage and environment errors do.
pub fn is_environment(e: &weft_llm::Error) -> bool {
    matches!(
        e,
        weft_llm::Error::Config(_)
            | weft_llm::Error::File { .. }
            | weft_llm::Error::InvalidInput(_)
            | weft_llm::Error::Transport { .. }
            | weft_llm::Error::Timeout { .. }
            | weft_llm::Error::Unavailable { .. }
    )
}

/// Until the guard drops, every retry of the model client (weft-llm's `Retrying LLM
/// request` warning) prints a line on stderr, so an unreachable model is not seconds of
/// silence. Scoped to the calling thread (the commands' current-thread runtime).
pub fn retry_lines() -> tracing::subscriber::DefaultGuard {
    let sub = tracing_subscriber::registry().with(RetryLines {
        seen: AtomicU32::new(0),
    });
    tracing::subscriber::set_default(sub)
}

struct RetryLines {
    seen: AtomicU32,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RetryLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if !meta.target().starts_with("weft_llm") || *meta.level() != tracing::Level::WARN {
            return;
        }
        let mut f = Fields::default();
        event.record(&mut f);
        let Some(wait_ms) = f.wait_ms else { return };
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        let p = Palette::for_stderr();
        eprintln!(
            "{}: the model did not answer (attempt {}): {}; retrying in {wait_ms} ms",
            p.paint("note", Palette::severity(weft_core::Severity::Warning)),
            f.attempt.unwrap_or(u64::from(n)),
            crate::output::clean(&f.error),
        );
    }
}

/// The fields of a retry warning.
#[derive(Default)]
struct Fields {
    error: String,
    attempt: Option<u64>,
    wait_ms: Option<u64>,
}

impl tracing::field::Visit for Fields {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        match field.name() {
            "wait_ms" => self.wait_ms = Some(value),
            "attempt" => self.attempt = Some(value),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "error" {
            self.error.clear();
            let _ = write!(self.error, "{value:?}");
        }
    }
}
