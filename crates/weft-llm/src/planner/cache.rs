//! The plan cache: an instruction already planned with the same tool set and model returns
//! its plan without calling the model. Keyed by the normalised instruction (trimmed,
//! lower-cased, whitespace collapsed), the sorted tool names and the model id. A trait (async,
//! so a store can back it: [`crate::stored::StorePlanCache`]); only validated plans are put.

use std::collections::HashMap;
use std::sync::Mutex;

use weft_core::Plan;

use crate::provider::BoxFuture;

/// Where planned plans are kept.
pub trait PlanCache: Send + Sync {
    /// The plan cached under `key`.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<Plan>>;
    /// Caches `plan` under `key` (best effort: a cache that cannot write logs and goes on).
    fn put<'a>(&'a self, key: &'a str, plan: &'a Plan) -> BoxFuture<'a, ()>;
}

/// The cache key with the model: a different model plans afresh.
pub fn cache_key_for_model<'a>(
    instruction: &str,
    tools: impl IntoIterator<Item = &'a str>,
    model: &str,
) -> String {
    format!("{}\u{1f}{model}", cache_key(instruction, tools))
}

/// The cache key of an instruction and tool set.
pub fn cache_key<'a>(instruction: &str, tools: impl IntoIterator<Item = &'a str>) -> String {
    let norm = instruction
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    let mut names: Vec<&str> = tools.into_iter().collect();
    names.sort_unstable();
    names.dedup();
    format!("{norm}\u{1f}{}", names.join(","))
}

/// An in-memory cache.
#[derive(Debug, Default)]
pub struct MemoryPlanCache {
    plans: Mutex<HashMap<String, Plan>>,
}

impl MemoryPlanCache {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
    /// Entries.
    pub fn len(&self) -> usize {
        self.plans.lock().map(|m| m.len()).unwrap_or(0)
    }
    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PlanCache for MemoryPlanCache {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<Plan>> {
        let p = self.plans.lock().ok().and_then(|m| m.get(key).cloned());
        Box::pin(std::future::ready(p))
    }
    fn put<'a>(&'a self, key: &'a str, plan: &'a Plan) -> BoxFuture<'a, ()> {
        if let Ok(mut m) = self.plans.lock() {
            m.insert(key.to_string(), plan.clone());
        }
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_normalise() {
        assert_eq!(
            cache_key("  Send   an EMAIL\n", ["log", "send_email"]),
            cache_key("send an email", ["send_email", "log"])
        );
        assert_ne!(cache_key("a", ["x"]), cache_key("a", ["y"]));
    }
}
