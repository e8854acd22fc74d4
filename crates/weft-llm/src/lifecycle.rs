//! The planner lifecycle of seed 001, shared by every planner: validate inputs → prepare
//! context → draft plan (or the fallback plan) → execute steps (before / execute / evaluate /
//! after, with a retry policy, conditional skip, optional self-critique and a max-iteration
//! guard) → finalise, emitting `planner.*` telemetry with correlation ids throughout.

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ids::Correlation;
use crate::provider::BoxFuture;
use crate::telemetry::{TelemetryEvent, TelemetryKind, TelemetrySink};

/// One planned step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepInstance {
    /// Id (unique in the plan).
    pub id: String,
    /// Instructions / input for the step.
    pub input: Value,
    /// Retries after the first attempt.
    #[serde(default)]
    pub max_retries: u32,
}

/// What evaluation says about a step's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluation {
    /// Keep it.
    Accept,
    /// Try again (counts against the step's retries).
    Retry(String),
    /// Give up on the run.
    Fail(String),
}

/// A self-critique verdict (seed 001's `SelfCritiqueResult`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SelfCritiqueResult {
    /// Approved?
    pub is_approved: bool,
    /// Notes.
    pub notes: String,
    /// Suggested changes, passed to the retry.
    pub suggested_changes: Vec<String>,
}

/// What has happened so far in a run.
#[derive(Debug, Clone, Default)]
pub struct RunState {
    /// Outputs of completed steps, by id.
    pub artifacts: Map<String, Value>,
    /// Completed step ids, in order.
    pub completed: Vec<String>,
    /// Skipped step ids.
    pub skipped: Vec<String>,
    /// Notes from failed evaluations and critiques for the step being retried.
    pub feedback: Vec<String>,
    /// Step executions so far (with retries).
    pub iterations: u32,
    /// Retries so far.
    pub retries: u32,
}

/// A planner: the lifecycle calls these in order. Only `draft_plan` and `execute_step` are
/// required; the rest default to pass-through.
pub trait PlannerSteps: Send + Sync {
    /// Name, for telemetry.
    fn name(&self) -> &str;
    /// Checks the parameters.
    fn validate_inputs(&self, _params: &Value) -> Result<(), String> {
        Ok(())
    }
    /// Loads what the plan needs.
    fn prepare_context<'a>(&'a self, params: &'a Value) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(std::future::ready(Ok(params.clone())))
    }
    /// Drafts the steps.
    fn draft_plan<'a>(&'a self, ctx: &'a Value)
    -> BoxFuture<'a, Result<Vec<StepInstance>, String>>;
    /// Whether to skip a step (conditional skip).
    fn should_skip(&self, _step: &StepInstance, _state: &RunState) -> bool {
        false
    }
    /// Before a step.
    fn before_step(&self, _step: &StepInstance, _state: &RunState) {}
    /// Runs a step.
    fn execute_step<'a>(
        &'a self,
        ctx: &'a Value,
        step: &'a StepInstance,
        state: &'a RunState,
    ) -> BoxFuture<'a, Result<Value, String>>;
    /// Scores a step's output.
    fn evaluate_step(&self, _step: &StepInstance, _output: &Value) -> Evaluation {
        Evaluation::Accept
    }
    /// After a step.
    fn after_step(&self, _step: &StepInstance, _output: &Value, _state: &RunState) {}
    /// Consolidates the outputs.
    fn finalize<'a>(&'a self, state: &'a RunState) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(std::future::ready(Ok(Value::Object(
            state.artifacts.clone(),
        ))))
    }
}

/// Self-critique hook.
pub type SelfCritique = Arc<dyn Fn(&StepInstance, &Value) -> SelfCritiqueResult + Send + Sync>;
/// Fallback plan hook: steps to use when drafting fails or drafts nothing.
pub type FallbackPlan = Arc<dyn Fn(&Value) -> Vec<StepInstance> + Send + Sync>;

/// How a run ended (seed 001's `PlannerOutcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every step completed or was skipped.
    Success,
    /// Finalised with outstanding steps.
    Partial,
    /// Failed.
    Failed,
}

/// A run's result (seed 001's `PlannerResult`).
#[derive(Debug, Clone)]
pub struct PlannerResult {
    /// Outcome.
    pub outcome: Outcome,
    /// Completed step ids.
    pub completed_steps: Vec<String>,
    /// Steps not completed.
    pub outstanding_steps: Vec<String>,
    /// Final output.
    pub artifacts: Value,
    /// Step executions, retries, duration.
    pub iterations: u32,
    /// Retries.
    pub retries: u32,
    /// Wall time.
    pub duration_ms: u64,
    /// Warnings and the failure reason.
    pub diagnostics: Vec<String>,
    /// Whether the fallback plan was used.
    pub used_fallback: bool,
}

/// The lifecycle runner.
#[derive(Clone)]
pub struct Lifecycle {
    telemetry: Arc<dyn TelemetrySink>,
    max_iterations: u32,
    self_critique: Option<SelfCritique>,
    fallback: Option<FallbackPlan>,
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifecycle")
            .field("max_iterations", &self.max_iterations)
            .finish_non_exhaustive()
    }
}

impl Lifecycle {
    /// A runner emitting into `telemetry`, with a guard of 100 step executions.
    pub fn new(telemetry: Arc<dyn TelemetrySink>) -> Self {
        Lifecycle {
            telemetry,
            max_iterations: 100,
            self_critique: None,
            fallback: None,
        }
    }
    /// Sets the max-iteration guard.
    pub fn max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = n;
        self
    }
    /// Installs a self-critique hook.
    pub fn use_self_critique(mut self, f: SelfCritique) -> Self {
        self.self_critique = Some(f);
        self
    }
    /// Installs a fallback plan.
    pub fn use_fallback_plan(mut self, f: FallbackPlan) -> Self {
        self.fallback = Some(f);
        self
    }

    fn emit(&self, e: TelemetryEvent) {
        self.telemetry.emit(e);
    }

    /// Runs `planner` on `params`.
    pub async fn run(
        &self,
        planner: &dyn PlannerSteps,
        corr: &Correlation,
        params: &Value,
    ) -> PlannerResult {
        let started = Instant::now();
        let name = planner.name().to_string();
        self.emit(TelemetryEvent::new(TelemetryKind::Started, corr, &name));
        let mut state = RunState::default();
        let mut used_fallback = false;
        let mut diagnostics = Vec::new();
        let fail = |state: &RunState, steps: &[StepInstance], reason: String, fb: bool| {
            self.emit(TelemetryEvent::new(TelemetryKind::Failed, corr, &name).detail(&reason));
            PlannerResult {
                outcome: Outcome::Failed,
                completed_steps: state.completed.clone(),
                outstanding_steps: steps
                    .iter()
                    .filter(|s| !state.completed.contains(&s.id) && !state.skipped.contains(&s.id))
                    .map(|s| s.id.clone())
                    .collect(),
                artifacts: Value::Object(state.artifacts.clone()),
                iterations: state.iterations,
                retries: state.retries,
                duration_ms: started.elapsed().as_millis() as u64,
                diagnostics: vec![reason],
                used_fallback: fb,
            }
        };
        if let Err(e) = planner.validate_inputs(params) {
            return fail(&state, &[], format!("invalid inputs: {e}"), false);
        }
        let ctx = match planner.prepare_context(params).await {
            Ok(c) => c,
            Err(e) => {
                return fail(
                    &state,
                    &[],
                    format!("preparing the context failed: {e}"),
                    false,
                );
            }
        };
        let steps = match planner.draft_plan(&ctx).await {
            Ok(s) if !s.is_empty() => s,
            other => {
                let why = match other {
                    Err(e) => format!("drafting failed: {e}"),
                    Ok(_) => "the draft has no steps".to_string(),
                };
                match &self.fallback {
                    Some(f) => {
                        diagnostics.push(format!("{why}; used the fallback plan"));
                        used_fallback = true;
                        f(&ctx)
                    }
                    None => return fail(&state, &[], why, false),
                }
            }
        };
        for step in &steps {
            if planner.should_skip(step, &state) {
                state.skipped.push(step.id.clone());
                continue;
            }
            state.feedback.clear();
            let mut attempt = 0u32;
            loop {
                if state.iterations >= self.max_iterations {
                    let r = format!(
                        "max iterations ({}) reached at step `{}`",
                        self.max_iterations, step.id
                    );
                    return fail(&state, &steps, r, used_fallback);
                }
                state.iterations += 1;
                attempt += 1;
                self.emit(
                    TelemetryEvent::new(TelemetryKind::StepStarted, corr, &name)
                        .step(&step.id)
                        .iteration(attempt),
                );
                planner.before_step(step, &state);
                let verdict = match planner.execute_step(&ctx, step, &state).await {
                    Err(e) => Err(Evaluation::Retry(format!("step failed: {e}"))),
                    Ok(out) => match planner.evaluate_step(step, &out) {
                        Evaluation::Accept => match &self.self_critique {
                            Some(c) => {
                                let r = c(step, &out);
                                if r.is_approved {
                                    Ok(out)
                                } else {
                                    let mut notes = vec![r.notes];
                                    notes.extend(r.suggested_changes);
                                    Err(Evaluation::Retry(format!(
                                        "self-critique: {}",
                                        notes.join("; ")
                                    )))
                                }
                            }
                            None => Ok(out),
                        },
                        other => Err(other),
                    },
                };
                match verdict {
                    Ok(out) => {
                        planner.after_step(step, &out, &state);
                        state.artifacts.insert(step.id.clone(), out);
                        state.completed.push(step.id.clone());
                        self.emit(
                            TelemetryEvent::new(TelemetryKind::StepCompleted, corr, &name)
                                .step(&step.id)
                                .iteration(attempt)
                                .detail("completed"),
                        );
                        break;
                    }
                    Err(Evaluation::Retry(why)) if attempt <= step.max_retries => {
                        self.emit(
                            TelemetryEvent::new(TelemetryKind::StepCompleted, corr, &name)
                                .step(&step.id)
                                .iteration(attempt)
                                .detail(format!("retrying: {why}")),
                        );
                        state.retries += 1;
                        state.feedback.push(why);
                    }
                    Err(Evaluation::Retry(why) | Evaluation::Fail(why)) => {
                        let r = format!(
                            "step `{}` failed after {attempt} attempt(s): {why}",
                            step.id
                        );
                        return fail(&state, &steps, r, used_fallback);
                    }
                    Err(Evaluation::Accept) => break,
                }
            }
        }
        let artifacts = match planner.finalize(&state).await {
            Ok(a) => a,
            Err(e) => {
                return fail(
                    &state,
                    &steps,
                    format!("finalising failed: {e}"),
                    used_fallback,
                );
            }
        };
        self.emit(
            TelemetryEvent::new(TelemetryKind::Completed, corr, &name)
                .iteration(state.iterations)
                .detail("success"),
        );
        PlannerResult {
            outcome: Outcome::Success,
            completed_steps: state.completed,
            outstanding_steps: Vec::new(),
            artifacts,
            iterations: state.iterations,
            retries: state.retries,
            duration_ms: started.elapsed().as_millis() as u64,
            diagnostics,
            used_fallback,
        }
    }
}
