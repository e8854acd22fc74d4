//! The governance checks a plan passes before it is accepted, assembled in one place so
//! `POST /v1/plans`, `weft run`, `weft analyze` and the LLM planner's critic loop apply the
//! same ones: the tools' facts (effect class, cost, model calls) for approval coverage and
//! the cost bound, the properties the `[policy]` bundle declares, and its decision on the
//! whole plan (`weft_policy::PlanPolicy`).

use std::sync::Arc;

use weft_analysis::Governance;
use weft_core::ToolCatalog;
use weft_policy::{PlanPolicy, Policy};

/// The checks for `tenant`'s plans, whose tools `catalog` describes, under `policy`.
pub fn governance(
    catalog: Arc<dyn ToolCatalog + Send + Sync>,
    policy: Option<&Policy>,
    tenant: &str,
) -> Governance {
    let properties = policy.map(|p| p.properties().to_vec()).unwrap_or_default();
    let mut g = Governance::from_catalog(&*catalog, properties);
    if let Some(p) = policy {
        g.acceptance = Some(Arc::new(PlanPolicy::new(p.clone(), tenant, catalog)));
    }
    g
}
