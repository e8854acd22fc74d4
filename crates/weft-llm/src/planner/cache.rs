//! The plan cache: an instruction already planned with the same tool set returns its plan
//! without calling the model. Keyed by the normalised instruction (trimmed, lower-cased,
//! whitespace collapsed) plus the sorted tool names. A trait so the store can persist it.

use std::collections::HashMap;
use std::sync::Mutex;

use weft_core::Plan;

/// Where planned plans are kept.
pub trait PlanCache: Send + Sync {
    /// The plan cached under `key`.
    fn get(&self, key: &str) -> Option<Plan>;
    /// Caches `plan` under `key`.
    fn put(&self, key: &str, plan: &Plan);
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
    fn get(&self, key: &str) -> Option<Plan> {
        self.plans.lock().ok()?.get(key).cloned()
    }
    fn put(&self, key: &str, plan: &Plan) {
        if let Ok(mut m) = self.plans.lock() {
            m.insert(key.to_string(), plan.clone());
        }
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
