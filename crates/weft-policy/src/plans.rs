//! Policy before a plan is accepted: a bundle decides on whole plans (`POST /v1/plans`, `weft
//! run`, `weft analyze`, the LLM planner's candidates) and declares the properties `weft
//! analyze` proves over a plan's net.
//!
//! ## Plans
//! The same `data.weft.deny` rule is evaluated once per plan with an input of kind `plan`
//! ([`plan_input`]); a reason is a `G001` error finding, so the plan is refused and the
//! planner's critic loop hands the reason back to the model. `require_approval` does not
//! apply to plans (approvals are asked per call). Rules written for tool calls look at
//! `input.tool` or `input.args`, which a plan input does not have, so they do not fire on it;
//! `input.kind` tells the two apart.
//!
//! ```json
//! {"version": 1, "kind": "plan", "tenant": "acme", "plan": {…the plan document…},
//!  "steps": [{"name": "charge", "action": "crm.charge", "effect": "write",
//!             "approval": false, "cost": 2.5, "llm": false}],
//!  "bound": {"tool_calls": 7, "llm_calls": 2, "cost": 2.5},
//!  "properties": {"approval_coverage": false}}
//! ```
//! `bound` is the most one run can spend (acyclic plans whose runs could all be explored, else
//! absent); `properties` says which properties hold (`null` when undecided).
//!
//! ## Properties
//! A bundle declares properties as `data.weft.properties`, a set or array of objects
//! `{"name", "before": SELECTOR, "always": SELECTOR}` (selectors: `step`, `tool`,
//! `tool_prefix`, `effect`, `approval`; see `weft_analysis::governance`). Each must hold on
//! every run of a plan, or the plan is refused (`A009`). They are read once, when the bundle
//! loads: a malformed one refuses the bundle.

use std::sync::Arc;

use serde_json::{Value, json};
use weft_analysis::governance::{GovernanceReport, PlanAcceptance, Property};
use weft_core::{Code, Finding, Plan, Severity, ToolCatalog};

use crate::{Decision, INPUT_VERSION, Policy, PolicyError};

/// The rule declaring properties.
pub const PROPERTIES_RULE: &str = "data.weft.properties";

/// The properties `rule`'s value declares, or why they cannot be read.
pub(crate) fn parse_properties(value: Value) -> Result<Vec<Property>, PolicyError> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => {
            return Err(PolicyError::Properties {
                message: format!("it must be a set or array of objects, it is {other}"),
            });
        }
    };
    let mut out: Vec<Property> = Vec::with_capacity(items.len());
    for item in items {
        let shown = item.to_string();
        let p: Property = serde_json::from_value(item).map_err(|e| PolicyError::Properties {
            message: format!("{shown}: {e}"),
        })?;
        if out.iter().any(|q| q.name == p.name) {
            return Err(PolicyError::Properties {
                message: format!("two properties are named `{}`", p.name),
            });
        }
        out.push(p);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The input document of a plan decision (see the module docs).
pub fn plan_input(
    tenant: &str,
    plan: &Plan,
    catalog: &dyn ToolCatalog,
    report: &GovernanceReport,
) -> Value {
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|(name, s)| {
            let spec = catalog.spec(&s.action);
            json!({
                "name": name,
                "action": s.action,
                "effect": spec.map_or(json!("write"), |t| json!(t.effect)),
                "approval": s.approval.is_some(),
                "cost": spec.and_then(|t| t.cost),
                "llm": spec.is_some_and(|t| t.llm),
            })
        })
        .collect();
    let mut input = json!({
        "version": INPUT_VERSION,
        "kind": "plan",
        "tenant": tenant,
        "plan": plan,
        "steps": steps,
        "properties": report
            .properties
            .iter()
            .map(|p| (p.name.clone(), json!(p.holds)))
            .collect::<serde_json::Map<_, _>>(),
    });
    if let Some(b) = &report.bound {
        input["bound"] = json!({
            "tool_calls": b.tool_calls.max,
            "llm_calls": b.llm_calls.max,
            "cost": b.cost.as_ref().map(|c| c.max),
        });
    }
    input
}

/// A bundle deciding on one tenant's plans: the governance checks' [`PlanAcceptance`].
#[derive(Clone)]
pub struct PlanPolicy {
    policy: Policy,
    tenant: String,
    catalog: Arc<dyn ToolCatalog + Send + Sync>,
}

impl std::fmt::Debug for PlanPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanPolicy")
            .field("tenant", &self.tenant)
            .field("files", &self.policy.files())
            .finish_non_exhaustive()
    }
}

impl PlanPolicy {
    /// `policy` deciding on `tenant`'s plans, whose tools `catalog` describes.
    pub fn new(
        policy: Policy,
        tenant: impl Into<String>,
        catalog: Arc<dyn ToolCatalog + Send + Sync>,
    ) -> Self {
        PlanPolicy {
            policy,
            tenant: tenant.into(),
            catalog,
        }
    }
}

impl PlanAcceptance for PlanPolicy {
    fn findings(&self, plan: &Plan, report: &GovernanceReport) -> Vec<Finding> {
        let input = plan_input(&self.tenant, plan, &*self.catalog, report);
        match self.policy.decide_deny(&input) {
            Decision::Deny(reasons) => vec![
                Finding::new(
                    Code::PolicyDenied,
                    Severity::Error,
                    "",
                    format!(
                        "The policy ({}) refuses this plan: {}.",
                        self.policy.files().join(", "),
                        reasons.join("; ")
                    ),
                )
                .hint("Change the plan so the policy's `deny` rule for plans (input.kind == \"plan\") gives no reason, or ask whoever owns the policy."),
            ],
            _ => Vec::new(),
        }
    }
}
