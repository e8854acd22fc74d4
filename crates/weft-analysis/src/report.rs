//! Options and the report of an analysis run: the shape the CLI prints and `--json` emits.

use serde::Serialize;
use weft_core::Finding;

/// Limits and assumptions of an analysis run. Every limit ends the analysis with a partial
/// result and an A006 finding naming it; a partial exploration is never reported sound.
#[derive(Clone)]
pub struct AnalysisOptions {
    /// Markings stored before reachability gives up (then the verdict is `unknown`).
    pub max_states: usize,
    /// Tokens the environment may put on each non-initial `kind: input` event.
    pub env_tokens: u32,
    /// Nodes of the Karp–Miller coverability graph built when reachability is incomplete.
    pub max_coverability_nodes: usize,
    /// Bytes the stored markings of one exploration may take (markings, hashes, parent
    /// links, edges and the index over them; allocator slack not counted).
    pub max_bytes: usize,
    /// The caller's deadline: consulted every few thousand markings, and the analysis stops
    /// when it returns true. The crate reads no clock itself (a check of
    /// `Instant::now() >= deadline` is the usual one).
    pub interrupt: Option<Interrupt>,
    /// Tool facts and required properties for the governance checks (approval coverage,
    /// declared properties, the cost bound); `None` skips them.
    pub governance: Option<std::sync::Arc<crate::governance::Governance>>,
}

/// A check that says "stop now" (the same type as CEL evaluation's interrupt).
pub type Interrupt = weft_core::cel_budget::Interrupt;

/// Default of [`AnalysisOptions::max_bytes`]: 1 GiB.
pub const DEFAULT_MAX_BYTES: usize = 1 << 30;

impl Default for AnalysisOptions {
    fn default() -> Self {
        AnalysisOptions {
            max_states: 1_000_000,
            env_tokens: 1,
            max_coverability_nodes: 100_000,
            max_bytes: DEFAULT_MAX_BYTES,
            interrupt: None,
            governance: None,
        }
    }
}

impl std::fmt::Debug for AnalysisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnalysisOptions")
            .field("max_states", &self.max_states)
            .field("env_tokens", &self.env_tokens)
            .field("max_coverability_nodes", &self.max_coverability_nodes)
            .field("max_bytes", &self.max_bytes)
            .field("interrupt", &self.interrupt.is_some())
            .field("governance", &self.governance)
            .finish()
    }
}

/// The overall soundness verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Complete exploration: option to complete, proper completion, no dead steps, bounded.
    Sound,
    /// A violation was found (it holds even if exploration was partial).
    NotSound,
    /// Exploration was partial and found no violation: nothing can be concluded.
    Unknown,
    /// Soundness is defined for acyclic plans and workflow nets; reactive plans (and
    /// imported nets with no final marking that are not workflow nets, A008) only get
    /// deadlock, dead-step and boundedness findings.
    NotApplicable,
}

/// What an analysis run found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalysisReport {
    /// Findings (codes `A001`–`A008`), most severe kinds first as produced.
    pub findings: Vec<Finding>,
    /// Reachable markings stored.
    pub states: usize,
    /// Firings explored between them.
    pub edges: usize,
    /// False when a limit stopped the exploration before every reachable marking was seen.
    pub complete: bool,
    /// Soundness verdict.
    pub verdict: Verdict,
    /// `Some(true)` bounded, `Some(false)` some event unbounded, `None` undecided.
    pub bounded: Option<bool>,
    /// The state space was too large to store and the partial-order reduced one was explored
    /// instead (`states` and `edges` count that one).
    pub reduced: bool,
    /// Assumptions the analysis made (environment budgets, over-approximations), in words.
    pub notes: Vec<String>,
    /// Approval coverage, declared properties and the cost bound, when the options asked for
    /// them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub governance: Option<crate::governance::GovernanceReport>,
}
