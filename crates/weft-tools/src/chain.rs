//! The one tool-call chain: the ordered list of interceptors every tool call passes, on
//! every path (inline, spawned, retried, re-dispatched after recovery, a child plan's
//! steps, a repaired plan's steps).
//!
//! The order is declared here and nowhere else: it is the order of [`Stage`]'s variants,
//! outermost first. A component installs its interceptor at its stage ([`Chain::set`]) and
//! the engine wraps every tool of its registry once, when it is built ([`Chain::apply`]), so
//! a call costs what the installed wrappers cost and an empty chain costs nothing. The model
//! is tower's `ServiceBuilder`: each link is a [`Tool`] around the next one.
//!
//! Why this order:
//! - **policy** first: a denied call must not consume an approval, a budget or a journal
//!   record, and the policy decides whether an approval is needed at all;
//! - **approval** next: a call waits for a person before anything is spent on it;
//! - **budget** after the decisions and before anything happens: only calls that will run
//!   count against a budget;
//! - **profile** (the step's security profile: hosts, paths, limits) applies to the call
//!   that is about to run;
//! - **durability** (the journal gate of `weft-durable`) last before the call: the
//!   dispatch is recorded and durable before the tool runs, after every check that could
//!   still refuse it, so a refused call leaves no `action.dispatched`;
//! - **metrics** innermost: it times the tool itself, not the waits of the stages above.

use std::sync::Arc;

use crate::{Registry, Tool};

/// A place in the chain. The variants are in chain order, outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// Policy decisions (allow, deny, require approval) before every call.
    Policy,
    /// Human approval, before the call and before anything is spent on it.
    Approval,
    /// Budgets and quotas (calls, cost, time).
    Budget,
    /// Enforcement of the step's security profile.
    Profile,
    /// The journal gate: the dispatch is durable before the tool runs.
    Durability,
    /// Step counts and action latency.
    Metrics,
}

impl Stage {
    /// Every stage, in chain order (outermost first).
    pub const ORDER: [Stage; 6] = [
        Stage::Policy,
        Stage::Approval,
        Stage::Budget,
        Stage::Profile,
        Stage::Durability,
        Stage::Metrics,
    ];

    /// Lower-case name, as `weft config` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Policy => "policy",
            Stage::Approval => "approval",
            Stage::Budget => "budget",
            Stage::Profile => "profile",
            Stage::Durability => "durability",
            Stage::Metrics => "metrics",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One link of the chain: wraps a tool in a tool with the same spec that does its part of
/// the work around (or instead of) calling the one inside.
pub trait Interceptor: Send + Sync {
    /// What this link is, for people (`weft config` prints it).
    fn describe(&self) -> String;

    /// `tool`, wrapped. The wrapper must keep the tool's spec and its
    /// [`Tool::profile_needs`], and say honestly whether it is immediate
    /// ([`Tool::is_immediate`]) and whether it waits for the journal, since the runtime picks
    /// its fast paths by them.
    fn wrap(&self, tool: Arc<dyn Tool>) -> Arc<dyn Tool>;

    /// Whether this link only makes sense for calls of an instance (the journal gate
    /// records the dispatch in the instance's journal). Calls outside any instance (the
    /// ReAct planner's) pass the chain without such links.
    fn instance_only(&self) -> bool {
        false
    }
}

/// The interceptors installed at each stage. Cheap to clone.
#[derive(Clone, Default)]
pub struct Chain {
    links: [Option<Arc<dyn Interceptor>>; Stage::ORDER.len()],
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let installed: Vec<&str> = Stage::ORDER
            .iter()
            .filter(|s| self.links[s.index()].is_some())
            .map(|s| s.name())
            .collect();
        f.debug_struct("Chain").field("stages", &installed).finish()
    }
}

impl Chain {
    /// An empty chain: tools are called as they are.
    pub fn new() -> Self {
        Self::default()
    }

    /// This chain with `link` installed at `stage`.
    #[must_use]
    pub fn with(mut self, stage: Stage, link: Arc<dyn Interceptor>) -> Self {
        self.set(stage, link);
        self
    }

    /// Installs `link` at `stage`, replacing what was there.
    pub fn set(&mut self, stage: Stage, link: Arc<dyn Interceptor>) {
        self.links[stage.index()] = Some(link);
    }

    /// The link at `stage`.
    pub fn get(&self, stage: Stage) -> Option<&Arc<dyn Interceptor>> {
        self.links[stage.index()].as_ref()
    }

    /// Has no stage a link?
    pub fn is_empty(&self) -> bool {
        self.links.iter().all(Option::is_none)
    }

    /// Each stage in order with what is installed there.
    pub fn describe(&self) -> Vec<(Stage, Option<String>)> {
        Stage::ORDER
            .iter()
            .map(|s| (*s, self.links[s.index()].as_ref().map(|l| l.describe())))
            .collect()
    }

    /// `registry` with every tool wrapped by every installed link: the innermost stage is
    /// applied first, so a call enters at the outermost one. Registration order is kept.
    pub fn apply(&self, registry: &Registry) -> Registry {
        self.apply_where(registry, |_| true)
    }

    /// [`Chain::apply`] without the instance-only links, for calls made outside any
    /// instance.
    pub fn apply_outside_instances(&self, registry: &Registry) -> Registry {
        self.apply_where(registry, |l| !l.instance_only())
    }

    fn apply_where(
        &self,
        registry: &Registry,
        keep: impl Fn(&dyn Interceptor) -> bool,
    ) -> Registry {
        let mut out = Registry::new();
        for tool in registry.iter() {
            let wrapped = self
                .links
                .iter()
                .rev()
                .flatten()
                .filter(|l| keep(l.as_ref()))
                .fold(Arc::clone(tool), |t, l| l.wrap(t));
            out.register(wrapped);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;
    use crate::{BoxFuture, ToolContext, ToolError, ToolSpec};

    /// A tool that appends its name to a shared log, and a link that appends the stage's
    /// name before calling the tool it wraps.
    struct Leaf(ToolSpec, Arc<Mutex<Vec<String>>>);
    impl Tool for Leaf {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn call(&self, _: ToolContext, _: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
            self.1.lock().expect("log").push("tool".into());
            Box::pin(async { Ok(json!(null)) })
        }
    }
    struct Logged(&'static str, Arc<dyn Tool>, Arc<Mutex<Vec<String>>>);
    impl Tool for Logged {
        fn spec(&self) -> &ToolSpec {
            self.1.spec()
        }
        fn call(&self, c: ToolContext, a: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
            self.2.lock().expect("log").push(self.0.into());
            self.1.call(c, a)
        }
        fn profile_needs(&self) -> Option<crate::Needs> {
            self.1.profile_needs()
        }
    }
    struct Link(&'static str, Arc<Mutex<Vec<String>>>, bool);
    impl Interceptor for Link {
        fn describe(&self) -> String {
            self.0.into()
        }
        fn wrap(&self, tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
            Arc::new(Logged(self.0, tool, Arc::clone(&self.1)))
        }
        fn instance_only(&self) -> bool {
            self.2
        }
    }

    fn spec() -> ToolSpec {
        serde_json::from_value(json!({"name": "t", "description": "t"})).expect("spec")
    }

    /// Links run in stage order whatever order they were installed in, and the
    /// outside-instance view leaves instance-only links out.
    #[test]
    fn calls_enter_at_the_outermost_stage() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut reg = Registry::new();
        reg.register(Arc::new(Leaf(spec(), Arc::clone(&log))));
        let chain = Chain::new()
            .with(
                Stage::Metrics,
                Arc::new(Link("metrics", Arc::clone(&log), false)),
            )
            .with(
                Stage::Policy,
                Arc::new(Link("policy", Arc::clone(&log), false)),
            )
            .with(
                Stage::Durability,
                Arc::new(Link("gate", Arc::clone(&log), true)),
            );
        let call = |r: &Registry| {
            let t = r.get("t").expect("tool");
            drop(t.call(ToolContext::detached("s"), json!({})));
            std::mem::take(&mut *log.lock().expect("log"))
        };
        assert_eq!(
            call(&chain.apply(&reg)),
            ["policy", "gate", "metrics", "tool"]
        );
        assert_eq!(
            call(&chain.apply_outside_instances(&reg)),
            ["policy", "metrics", "tool"]
        );
        assert_eq!(call(&Chain::new().apply(&reg)), ["tool"]);
        let described: Vec<_> = chain
            .describe()
            .into_iter()
            .map(|(s, l)| format!("{}={}", s.name(), l.unwrap_or_default()))
            .collect();
        assert_eq!(
            described,
            [
                "policy=policy",
                "approval=",
                "budget=",
                "profile=",
                "durability=gate",
                "metrics=metrics"
            ]
        );
    }
}
