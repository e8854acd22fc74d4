//! The tool catalog: what the validator (and the LLM planner) knows about tools without
//! running any of them.
//!
//! A catalog maps an action name to a [`ToolSpec`]: its description, the JSON Schema of its
//! args, its effect class and whether it is idempotent. The runtime's tool registry exposes
//! the same specs, and a static description file (JSON) lets `weft validate --tools FILE`
//! check plans against tools that live elsewhere. The built-in tools' specs ship in
//! `builtin_tools.json` so a plan can be validated without starting a runtime.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What running a tool does to the world; decides what recovery may re-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// No side effects; the result depends only on the args.
    Pure,
    /// Reads the outside world but changes nothing.
    Read,
    /// Changes the outside world.
    Write,
}

/// Description of one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The action name plans use.
    pub name: String,
    /// What the tool does (shown to the LLM planner).
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the args.
    #[serde(default = "any_schema")]
    pub args_schema: Value,
    /// Effect class.
    #[serde(default = "default_effect")]
    pub effect: Effect,
    /// Whether calling twice with the same idempotency key is safe.
    #[serde(default)]
    pub idempotent: bool,
    /// Declared cost of one call, in the deployment's own unit (money, credits): what plan
    /// `limits.max_cost` and `weft analyze`'s cost bound add up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Each call asks a language model: counted against `limits.max_llm_calls`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub llm: bool,
}

impl ToolSpec {
    /// A spec with no description, any args and no declared cost, that asks no model.
    pub fn new(name: impl Into<String>, effect: Effect, idempotent: bool) -> Self {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            args_schema: any_schema(),
            effect,
            idempotent,
            cost: None,
            llm: false,
        }
    }
}

fn any_schema() -> Value {
    Value::Object(serde_json::Map::new())
}
fn default_effect() -> Effect {
    Effect::Write
}

/// Anything that can describe tools by name.
pub trait ToolCatalog {
    /// The spec of `name`, if the tool exists.
    fn spec(&self, name: &str) -> Option<&ToolSpec>;
    /// All tool names, for hints ("did you mean …").
    fn names(&self) -> Vec<&str>;
}

/// A catalog held in memory, e.g. loaded from a static description file.
#[derive(Debug, Clone, Default)]
pub struct StaticCatalog {
    tools: IndexMap<String, ToolSpec>,
}

/// The static description file format: `{"tools": [ToolSpec, …]}`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    tools: Vec<ToolSpec>,
}

impl StaticCatalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// The specs of weft's built-in tools.
    pub fn builtin() -> Self {
        Self::from_json(include_str!("builtin_tools.json")).unwrap_or_default()
    }

    /// Parses a static description file.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let file: CatalogFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut c = Self::new();
        for t in file.tools {
            c.insert(t);
        }
        Ok(c)
    }

    /// Adds or replaces a tool.
    pub fn insert(&mut self, spec: ToolSpec) {
        self.tools.insert(spec.name.clone(), spec);
    }

    /// Adds every tool of `other`, replacing same-named ones.
    pub fn extend(&mut self, other: StaticCatalog) {
        for (_, t) in other.tools {
            self.insert(t);
        }
    }

    /// Iterates over the specs in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values()
    }

    /// Serialises the catalog in the static description file format.
    pub fn to_json(&self) -> Value {
        serde_json::json!({ "tools": self.tools.values().collect::<Vec<_>>() })
    }
}

impl ToolCatalog for StaticCatalog {
    fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name)
    }
    fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }
}

/// The closest name to `name` among `candidates` (edit distance ≤ 1/3 of the length).
pub fn suggest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (levenshtein(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal-string-alignment distance: edits plus adjacent transpositions ("strat" → "start" is 1).
fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(256).collect();
    let b: Vec<char> = b.chars().take(256).collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_loads_and_has_the_seed_tool() {
        let c = StaticCatalog::builtin();
        assert!(c.spec("send_email").is_some());
        assert!(c.names().len() >= 10, "{:?}", c.names());
        for t in c.iter() {
            assert!(
                crate::schema::compile(&t.args_schema).is_ok(),
                "bad schema for {}",
                t.name
            );
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            suggest("send_emial", ["send_email", "log"]),
            Some("send_email")
        );
        assert_eq!(suggest("zzz", ["send_email", "log"]), None);
    }
}
