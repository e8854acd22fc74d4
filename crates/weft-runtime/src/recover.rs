//! Restoring an instance rebuilt from its journal (crash recovery, `weft resume`): the
//! durability layer folds the journal with the pure core and hands the resulting
//! `weft_core::Instance` to [`Engine::restore`], which makes it live again under the same id
//! and decides what happens to actions that were in flight when the process stopped.
//!
//! Rule (DESIGN "Durability"): an action whose dispatch was never recorded durably cannot
//! have run, so it is dispatched again; one that was recorded as dispatched is dispatched
//! again with the same idempotency key only if its tool is idempotent; otherwise the step
//! gets an error outcome `outcome_unknown` (never a silent duplicate). The outcome goes
//! through the journal like any other input.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use weft_core::token::FiringId;
use weft_core::{ActionError, Instance};

use crate::Error;
use crate::cell::{Cell, Ready, lock};
use crate::engine::{Engine, InstanceHandle};
use crate::journal_hook::Extras;
use crate::plans::CompiledPlan;

/// What [`Engine::restore`] did with an in-flight action.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Redispatch {
    /// Called again with the same idempotency key.
    Again {
        /// The firing.
        firing: FiringId,
        /// The step.
        step: String,
    },
    /// Completed with the error `outcome_unknown`.
    Unknown {
        /// The firing.
        firing: FiringId,
        /// The step.
        step: String,
    },
}

impl Engine {
    /// Makes sure new instance ids are numbered from at least `next` (ids already used by a
    /// store must never be handed out again).
    pub fn reserve_ids(&self, next: u64) {
        self.shared().next_id.fetch_max(next, Ordering::Relaxed);
    }

    /// Takes a fresh instance id without starting anything (for forks): its name.
    pub fn allocate_id(&self) -> String {
        let shared = self.shared();
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        shared.ids().name(id).to_string()
    }

    /// Names instances opaquely from now on (a durable node, before it starts or restores
    /// any instance; see [`IdNames`](crate::IdNames)). False when names were set already.
    pub fn set_id_names(&self, names: crate::IdNames) -> bool {
        self.shared().ids.set(names).is_ok()
    }

    /// The engine's number of the instance called `name`, when it names one.
    pub fn instance_number(&self, name: &str) -> Option<u64> {
        self.shared().ids().parse(name)
    }

    /// Makes a rebuilt instance live again under its id (`i<n>`), then deals with its
    /// in-flight actions: `dispatched` holds the firings whose dispatch was recorded durably.
    /// Returns the handle and what was done per in-flight action.
    pub fn restore(
        &self,
        tenant: &str,
        plan: &Arc<CompiledPlan>,
        instance: Instance,
        dispatched: &BTreeSet<FiringId>,
    ) -> Result<(InstanceHandle, Vec<Redispatch>), Error> {
        self.restore_with(tenant, plan, instance, dispatched, &Extras::default())
    }

    /// [`Engine::restore`] with what the fold kept beside the marking: the key-value
    /// context comes back and every pending timer is re-armed under its id at its due time
    /// (one whose due time passed while weft was down fires at once; its `Timer` input
    /// carries the lateness). Timers come back before in-flight actions are dispatched
    /// again, so a re-dispatched `timer.*` step finds its timer instead of setting another.
    pub fn restore_with(
        &self,
        tenant: &str,
        plan: &Arc<CompiledPlan>,
        instance: Instance,
        dispatched: &BTreeSet<FiringId>,
        extras: &Extras,
    ) -> Result<(InstanceHandle, Vec<Redispatch>), Error> {
        let shared = self.shared();
        let id: u64 = shared
            .ids()
            .parse(&instance.id)
            .ok_or_else(|| Error::UnknownInstance(instance.id.to_string()))?;
        if shared.cell(id).is_some() {
            return Err(Error::UnknownInstance(format!(
                "{} is already live",
                instance.id
            )));
        }
        shared.next_id.fetch_max(id, Ordering::Relaxed);
        let cell = Cell::new(
            id,
            Arc::from(tenant),
            Arc::clone(plan),
            Arc::clone(shared),
            shared.trace,
        );
        if !extras.context.is_empty() {
            *lock(&cell.kv) = Some(Box::new(extras.context.clone()));
        }
        if !extras.set_by.is_empty() {
            *lock(&cell.timer_keys) = extras.set_by.clone();
        }
        cell.depth.store(extras.depth, Ordering::Relaxed);
        *lock(&cell.budget) = crate::budget::Budget {
            used: extras.usage,
            started_ms: extras.started_ms,
        };
        if !extras.approvals.is_empty() {
            cell.asked_approval.store(true, Ordering::Relaxed);
            *lock(&cell.approvals) = extras
                .approvals
                .iter()
                .map(|(k, a)| (k.clone(), crate::approvals::Live::restored(a.clone())))
                .collect();
        }
        let mut actions = Vec::new();
        {
            let mut g = lock(&cell.core);
            let now = shared.clock.now_ms();
            g.last_activity = now;
            let in_flight: Vec<(FiringId, u32, bool, String)> = instance
                .in_flight
                .iter()
                .map(|(f, inf)| {
                    let srt = &plan.steps[inf.step as usize];
                    let idem = srt.tool.as_ref().is_some_and(|t| t.spec().idempotent);
                    (*f, inf.attempt, idem, srt.name.to_string())
                })
                .collect();
            let name = instance.id.to_string();
            g.inst = Some(instance);
            // Armed once the instance is in place (a timer already due fires at once and
            // must find it live), before in-flight actions are dispatched again.
            for (id, t) in &extras.timers {
                shared.timers.reserve(*id);
                cell.arm(*id, t.due_ms, t.clone())
                    .map_err(|e| Error::TimersUnavailable(format!("timer t{id} of {name}: {e}")))?;
            }
            let mut ready: VecDeque<Ready> = VecDeque::new();
            for (firing, attempt, idempotent, step) in in_flight {
                if !dispatched.contains(&firing) || idempotent {
                    cell.retry(&mut g, firing, attempt, 0, &mut ready);
                    actions.push(Redispatch::Again { firing, step });
                } else {
                    ready.push_back(Ready::Outcome(
                        firing,
                        Err(ActionError::fatal(
                            "outcome_unknown",
                            format!(
                                "step `{step}` was dispatched before a restart and its tool is not idempotent; whether it took effect is unknown"
                            ),
                        )),
                    ));
                    actions.push(Redispatch::Unknown { firing, step });
                }
            }
            // Applies the outcomes (and what they enable), then settles.
            cell.run_ready(&mut g, ready);
            cell.release(g);
        }
        Ok((InstanceHandle { cell }, actions))
    }
}
