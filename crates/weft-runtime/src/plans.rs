//! Registered plans: a validated plan compiled once into an `Arc<Net>` plus what the runtime
//! needs per step (the resolved tool, the args validator, the timeout), so the hot path never
//! looks anything up by name.

use std::collections::HashMap;
use std::sync::Arc;

use weft_core::catalog::ToolCatalog;
use weft_core::{ApprovalDefault, Effect, EventKind, Limits, Net, Plan, validate};
use weft_tools::{ApprovalRequest, Approved, Chain, Interceptor, Registry, Stage, Tool};

use crate::Error;

/// Runtime view of one step.
pub(crate) struct StepRt {
    pub name: Arc<str>,
    pub action: String,
    pub tool: Option<Arc<dyn Tool>>,
    /// Validator for rendered args; `None` when the args are literal (checked statically) or
    /// the schema accepts everything.
    pub validator: Option<Arc<weft_core::schema::Schema>>,
    pub timeout_ms: Option<u64>,
    pub spawn: bool,
    /// The tool finishes at once ([`Tool::is_immediate`]) and no timeout applies: called
    /// with [`Tool::call_now`], no future.
    pub immediate: bool,
    /// An immediate tool that is called only once the instance's journal is durable
    /// ([`Tool::waits_for_journal`]): queued in the loop until then.
    pub gated: bool,
    /// The event (id and name) of each input, in `on` order; the names are shared by every
    /// tool context.
    pub inputs: Vec<(weft_core::EventId, Arc<str>)>,
}

/// A plan ready to run.
pub struct CompiledPlan {
    /// Plan name.
    pub name: Arc<str>,
    /// The plan as registered.
    pub plan: Arc<Plan>,
    /// The compiled net.
    pub net: Arc<Net>,
    pub(crate) steps: Vec<StepRt>,
    /// Per step: fired by taking its tokens rather than recording it as in flight, when
    /// nothing reads the firing in between ([`weft_core::Instance::next_taking`]): its tool
    /// is immediate and does not wait for the journal.
    pub(crate) takes: Vec<bool>,
    /// The room a batch's queue of ready outcomes is made with: the net's width if a step's
    /// tool is immediate (its outcome is ready at once), else none (an outcome that is, a
    /// failure to dispatch, grows it).
    pub(crate) ready_room: usize,
    /// The names of its input events, for the engine's routing index (made once here, not
    /// per instance).
    pub(crate) inputs: Box<[Arc<str>]>,
}

impl std::fmt::Debug for CompiledPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledPlan")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl CompiledPlan {
    /// Validates `plan` (against `registry` when `check_tools`) and compiles it. `registry`
    /// holds the tools wrapped by `chain`; a step with links of its own (its `approval`, the
    /// plan's `limits`) gets its tool from `raw`, wrapped by `chain` with them at their stages.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn compile(
        plan: Plan,
        registry: &Registry,
        raw: &Registry,
        chain: &Chain,
        validators: &mut HashMap<String, Option<Arc<weft_core::schema::Schema>>>,
        check_tools: bool,
        limits: &Limits,
    ) -> Result<CompiledPlan, Error> {
        let catalog: Option<&dyn ToolCatalog> = check_tools.then_some(registry as &dyn ToolCatalog);
        let v = validate(&plan, catalog, limits);
        let net = match v.net {
            Some(net) if !v.has_errors() => net,
            _ => {
                return Err(Error::InvalidPlan {
                    plan: plan.plan_name.clone(),
                    findings: v.findings.into_iter().filter(|f| f.is_error()).collect(),
                });
            }
        };
        let limited = plan.limits.as_ref().is_some_and(|l| !l.is_empty());
        let steps = net
            .steps
            .iter()
            .map(|s| {
                let approval = plan.steps.get(s.name.as_str()).and_then(|st| {
                    st.approval.as_ref().map(|a| ApprovalRequest {
                        reasons: vec![
                            a.reason
                                .clone()
                                .or_else(|| st.description.clone())
                                .unwrap_or_else(|| format!("step `{}` needs approval", s.name)),
                        ],
                        timeout_ms: a.timeout_ms,
                        default_grant: a.default == ApprovalDefault::Grant,
                    })
                });
                let tool = if approval.is_some() || limited {
                    step_tool(raw, chain, &s.action, approval, limited)
                } else {
                    registry.get(&s.action).cloned()
                };
                let validator = match &tool {
                    Some(t) if !s.args.is_literal() || !check_tools => validators
                        .entry(s.action.clone())
                        .or_insert_with(|| {
                            let schema = &t.spec().args_schema;
                            let trivial = schema.as_object().is_some_and(|o| o.is_empty())
                                || schema == &serde_json::Value::Bool(true);
                            if trivial {
                                None
                            } else {
                                weft_core::schema::compile(schema).ok().map(Arc::new)
                            }
                        })
                        .clone(),
                    _ => None,
                };
                let spawn = tool
                    .as_ref()
                    .is_some_and(|t| t.spec().effect == Effect::Write);
                let gated = tool.as_ref().is_some_and(|t| t.waits_for_journal());
                let immediate = gated || tool.as_ref().is_some_and(|t| t.is_immediate());
                StepRt {
                    immediate,
                    gated,
                    inputs: s
                        .inputs
                        .iter()
                        .map(|&e| (e, Arc::from(net.event(e).name.as_str())))
                        .collect(),
                    name: Arc::from(s.name.as_str()),
                    action: s.action.clone(),
                    tool,
                    validator,
                    timeout_ms: s.timeout_ms,
                    spawn,
                }
            })
            .collect::<Vec<StepRt>>();
        let takes = steps
            .iter()
            .map(|s| s.tool.is_some() && s.immediate && !s.gated)
            .collect();
        let ready_room = if steps.iter().any(|s| s.immediate) {
            net.width()
        } else {
            0
        };
        let inputs = net
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Input)
            .map(|e| Arc::from(e.name.as_str()))
            .collect();
        Ok(CompiledPlan {
            name: Arc::from(plan.plan_name.as_str()),
            plan: Arc::new(plan),
            net: Arc::new(net),
            steps,
            takes,
            ready_room,
            inputs,
        })
    }

    /// The input events of this plan (`kind: input`, including initial events).
    pub fn input_events(&self) -> impl Iterator<Item = &str> {
        self.inputs.iter().map(|n| &**n)
    }
}

/// The plans a plan runs by a literal name through `plan.run` (`"args": {"plan": "x"}`); a
/// name computed by an expression cannot be known before the run.
pub(crate) fn static_children(plan: &Plan) -> Vec<String> {
    plan.steps
        .values()
        .filter(|s| s.action == "plan.run")
        .filter_map(|s| {
            let name = s.args.get("plan")?.as_str()?;
            (!name.contains("${")).then(|| name.to_string())
        })
        .collect()
}

/// A chain of static `plan.run` names from `plan` back to itself, when registering it next
/// to the plans `registered` gives would make one (`a → b → a`).
pub(crate) fn child_cycle(
    plan: &CompiledPlan,
    registered: impl Fn(&str) -> Option<Arc<CompiledPlan>>,
) -> Option<Vec<String>> {
    let root = plan.name.to_string();
    let children = |name: &str| -> Vec<String> {
        if name == root {
            static_children(&plan.plan)
        } else {
            registered(name).map_or_else(Vec::new, |p| static_children(&p.plan))
        }
    };
    // Depth-first with an explicit stack: (name, path to it).
    let mut stack = vec![(root.clone(), vec![root.clone()])];
    let mut seen = std::collections::HashSet::new();
    while let Some((name, path)) = stack.pop() {
        for child in children(&name) {
            if child == root {
                let mut cycle = path.clone();
                cycle.push(child);
                return Some(cycle);
            }
            if seen.insert(child.clone()) {
                let mut p = path.clone();
                p.push(child.clone());
                stack.push((child, p));
            }
        }
    }
    None
}

/// A step's `approval`, at the chain's approval stage: after the policy, before the budget.
struct StepApproval(ApprovalRequest);

impl Interceptor for StepApproval {
    fn describe(&self) -> String {
        "the step's approval".into()
    }
    fn wrap(&self, tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
        Approved::wrap(tool, self.0.clone())
    }
    fn instance_only(&self) -> bool {
        true
    }
}

/// The tool `action` of a step with links of its own: the unwrapped tool, wrapped by `chain`
/// with the step's approval and the plan's budget at their stages (replacing what is there).
fn step_tool(
    raw: &Registry,
    chain: &Chain,
    action: &str,
    approval: Option<ApprovalRequest>,
    limited: bool,
) -> Option<Arc<dyn Tool>> {
    let tool = Arc::clone(raw.get(action)?);
    let mut c = chain.clone();
    if let Some(request) = approval {
        c.set(Stage::Approval, Arc::new(StepApproval(request)));
    }
    // The node's budget link, when it sets budgets, counts the plan's limits too.
    if limited && c.get(Stage::Budget).is_none() {
        c.set(
            Stage::Budget,
            Arc::new(weft_tools::BudgetLink {
                pausing: false,
                what: "the plan's limits",
            }),
        );
    }
    Some(
        Stage::ORDER
            .iter()
            .rev()
            .filter_map(|s| c.get(*s))
            .fold(tool, |t, link| link.wrap(t)),
    )
}
