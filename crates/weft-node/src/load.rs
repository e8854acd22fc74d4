//! Loading the configuration in layers — defaults, then `weft.toml`, then `WEFT_…`
//! environment variables, then command-line flags (each wins over the one before) — and
//! remembering where every value came from, for `weft config`.
//!
//! The layers are merged as TOML trees before the model (`config.rs`) is deserialized, so a
//! key is checked once whatever layer sets it: unknown keys and values of the wrong kind are
//! findings with the key's path, never silently dropped. Nothing here panics on input: a
//! file that is not UTF-8, not TOML or too large is a finding too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use weft_core::{Finding, Severity};

use crate::config::{Config, Kind, OPTIONAL_KEYS, SECRET_KEYS, STRUCTURED_KEYS};

/// The file looked for in the working directory when `--config` is not given.
pub const DEFAULT_FILE: &str = "weft.toml";
/// Largest configuration file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Source {
    /// weft's default.
    Default,
    /// The configuration file.
    File,
    /// An environment variable (its name).
    Env(String),
    /// A command-line flag (its name).
    Flag(String),
    /// Nothing sets it (a key without a default).
    Unset,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File => f.write_str("file"),
            Source::Env(n) => write!(f, "env {n}"),
            Source::Flag(n) => write!(f, "flag {n}"),
            Source::Unset => f.write_str("unset"),
        }
    }
}

/// A value set by a command-line flag.
#[derive(Debug, Clone)]
pub struct FlagValue {
    /// The key it sets, e.g. `store.url`.
    pub key: &'static str,
    /// The flag as typed, e.g. `--store`.
    pub flag: &'static str,
    /// The value.
    pub value: toml::Value,
}

impl FlagValue {
    /// A flag setting `key` to `value`.
    pub fn new(key: &'static str, flag: &'static str, value: impl Into<toml::Value>) -> Self {
        FlagValue {
            key,
            flag,
            value: value.into(),
        }
    }
}

/// What to load from.
pub struct Inputs<'a> {
    /// `--config FILE` (must exist), or `None` to use `weft.toml` in `dir` if there is one.
    pub file: Option<PathBuf>,
    /// Where `weft.toml` is looked for.
    pub dir: PathBuf,
    /// Reads an environment variable.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Values given on the command line.
    pub flags: Vec<FlagValue>,
}

impl std::fmt::Debug for Inputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inputs")
            .field("file", &self.file)
            .field("dir", &self.dir)
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

impl Inputs<'static> {
    /// The process's environment and working directory, with `file` and `flags`.
    pub fn process(file: Option<PathBuf>, flags: Vec<FlagValue>) -> Self {
        Inputs {
            file,
            dir: PathBuf::from("."),
            env: &|k| std::env::var(k).ok(),
            flags,
        }
    }
}

/// One effective key.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Dotted path, e.g. `store.url`.
    pub key: String,
    /// The value (`<secret>` for secrets; `None` when unset).
    pub value: Option<toml::Value>,
    /// Where it came from.
    pub source: Source,
    /// The environment variable that sets it (none for structured keys).
    pub env: Option<String>,
}

/// The loaded configuration, where each value came from, and what is wrong with it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The configuration (the defaults where the layers could not be read).
    pub config: Config,
    /// The file that was read, if any.
    pub file: Option<PathBuf>,
    /// Effective values by key, with their source.
    values: BTreeMap<String, (toml::Value, Source)>,
    /// Problems found, errors and warnings.
    pub findings: Vec<Finding>,
}

impl Loaded {
    /// Is any finding an error?
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(Finding::is_error)
    }

    /// Where the value of `key` came from (`None`: unset).
    pub fn source(&self, key: &str) -> Option<&Source> {
        self.values.get(key).map(|(_, s)| s)
    }

    /// Every key, sorted, secrets masked; keys without a default that nothing sets are
    /// listed as [`Source::Unset`].
    pub fn entries(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = self
            .values
            .iter()
            .map(|(k, (v, s))| Entry {
                key: k.clone(),
                value: Some(if SECRET_KEYS.contains(&k.as_str()) {
                    toml::Value::String("<secret>".into())
                } else {
                    v.clone()
                }),
                source: s.clone(),
                env: (!STRUCTURED_KEYS.contains(&k.as_str())).then(|| env_name(k)),
            })
            .collect();
        for (k, _) in OPTIONAL_KEYS {
            if !self.values.contains_key(*k) {
                out.push(Entry {
                    key: (*k).to_string(),
                    value: None,
                    source: Source::Unset,
                    env: Some(env_name(k)),
                });
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    pub(crate) fn push(&mut self, f: Finding) {
        self.findings.push(f);
    }
}

/// The environment variable of `key`: `WEFT_` and the path in capitals, dots as `_`.
pub fn env_name(key: &str) -> String {
    format!("WEFT_{}", key.replace('.', "_").to_ascii_uppercase())
}

/// Older or standard variable names that set a key too (read only when the key's own
/// variable is unset).
const ENV_ALIASES: &[(&str, &str)] = &[("WEFT_API_TOKENS", "server.tokens")];

/// A config finding: an error at `key` (RFC 6901 pointer into the configuration).
pub(crate) fn finding(
    code: &str,
    name: &str,
    key: &str,
    message: String,
    hint: Option<String>,
) -> Finding {
    Finding {
        code: code.to_string(),
        name: name.to_string(),
        severity: Severity::Error,
        pointer: if key.is_empty() {
            String::new()
        } else {
            format!("/{}", key.replace('.', "/"))
        },
        message,
        hint,
        witness: None,
        depends_on_guards: false,
    }
}

/// Every key the model knows, with the kind of value it takes.
pub(crate) fn known_keys() -> BTreeMap<String, Kind> {
    let mut out = BTreeMap::new();
    if let Ok(toml::Value::Table(t)) = toml::Value::try_from(Config::default()) {
        leaves(&t, "", &mut |k, v| {
            if let Some(kind) = Kind::of(v) {
                out.insert(k, kind);
            }
        });
    }
    for k in STRUCTURED_KEYS {
        out.insert((*k).to_string(), Kind::Tables);
    }
    for (k, kind) in OPTIONAL_KEYS {
        out.insert((*k).to_string(), *kind);
    }
    out
}

fn leaves(t: &toml::Table, prefix: &str, f: &mut dyn FnMut(String, &toml::Value)) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => leaves(inner, &path, f),
            _ => f(path, v),
        }
    }
}

/// Loads the configuration from `inputs`. Never fails: what is wrong is in
/// [`Loaded::findings`].
pub fn load(inputs: &Inputs<'_>) -> Loaded {
    let known = known_keys();
    let defaults = toml::Value::try_from(Config::default())
        .ok()
        .and_then(|v| v.as_table().cloned())
        .unwrap_or_default();
    let mut values = BTreeMap::new();
    leaves(&defaults, "", &mut |k, v| {
        values.insert(k, (v.clone(), Source::Default));
    });
    let mut loaded = Loaded {
        config: Config::default(),
        file: None,
        values,
        findings: Vec::new(),
    };

    // The file.
    let path = match &inputs.file {
        Some(p) => Some(p.clone()),
        None => Some(inputs.dir.join(DEFAULT_FILE)).filter(|p| p.is_file()),
    };
    if let Some(path) = path {
        if let Some(table) = read_file(&path, &mut loaded) {
            check_table(&table, "", &known, &mut loaded, &mut |k, v| {
                (k, v, Source::File)
            });
        }
        loaded.file = Some(path);
    }

    // The environment.
    for (key, kind) in known.iter().filter(|(_, k)| **k != Kind::Tables) {
        let var = env_name(key);
        let (var, raw) = match (inputs.env)(&var).filter(|v| !v.is_empty()) {
            Some(raw) => (var, raw),
            None => match ENV_ALIASES
                .iter()
                .find(|(_, k)| k == key)
                .and_then(|(a, _)| (inputs.env)(a).filter(|v| !v.is_empty()).map(|v| (a, v)))
            {
                Some((alias, raw)) => ((*alias).to_string(), raw),
                None => continue,
            },
        };
        match parse_env(&raw, *kind) {
            Some(v) => {
                loaded
                    .values
                    .insert(key.clone(), (v, Source::Env(var.clone())));
            }
            None => loaded.push(finding(
                "C004",
                "wrong-type",
                key,
                format!("{var} must be {} (got {:?})", kind.name(), short(&raw)),
                Some(env_hint(*kind)),
            )),
        }
    }

    // The flags.
    for f in &inputs.flags {
        match known.get(f.key) {
            Some(kind) if fits(&f.value, *kind) => {
                loaded.values.insert(
                    f.key.to_string(),
                    (
                        coerce(f.value.clone(), *kind),
                        Source::Flag(f.flag.to_string()),
                    ),
                );
            }
            Some(kind) => loaded.push(finding(
                "C004",
                "wrong-type",
                f.key,
                format!("{} must be {}", f.flag, kind.name()),
                None,
            )),
            // A flag that sets a whole table (`--tools-config`).
            None => {
                if let toml::Value::Table(t) = &f.value {
                    let flag = f.flag.to_string();
                    check_table(t, f.key, &known, &mut loaded, &mut |k, v| {
                        (k, v, Source::Flag(flag.clone()))
                    });
                }
            }
        }
    }

    // The model.
    let mut tree = toml::Table::new();
    for (k, (v, _)) in &loaded.values {
        set_path(&mut tree, k, v.clone());
    }
    match toml::Value::Table(tree).try_into::<Config>() {
        Ok(c) => loaded.config = c,
        Err(e) => loaded.push(finding(
            "C005",
            "invalid-value",
            "",
            format!(
                "the configuration does not fit weft's model: {}",
                e.message().trim()
            ),
            None,
        )),
    }
    loaded
}

/// Reads and parses the file; a problem is a finding and `None`.
fn read_file(path: &Path, loaded: &mut Loaded) -> Option<toml::Table> {
    use std::io::Read as _;
    let name = path.display();
    let text = std::fs::File::open(path).and_then(|f| {
        let mut buf = Vec::new();
        f.take(MAX_FILE_BYTES + 1).read_to_end(&mut buf)?;
        Ok(buf)
    });
    let bytes = match text {
        Ok(b) if b.len() as u64 > MAX_FILE_BYTES => {
            loaded.push(finding(
                "C001",
                "unreadable",
                "",
                format!("`{name}` is larger than {MAX_FILE_BYTES} bytes"),
                None,
            ));
            return None;
        }
        Ok(b) => b,
        Err(e) => {
            loaded.push(finding(
                "C001",
                "unreadable",
                "",
                format!("cannot read `{name}`: {e}"),
                Some(
                    "pass an existing file with --config, or leave it out to use the defaults"
                        .into(),
                ),
            ));
            return None;
        }
    };
    let Ok(text) = String::from_utf8(bytes) else {
        loaded.push(finding(
            "C001",
            "unreadable",
            "",
            format!("`{name}` is not UTF-8 text"),
            None,
        ));
        return None;
    };
    match text.parse::<toml::Table>() {
        Ok(t) => Some(t),
        Err(e) => {
            let at = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                    format!(" at line {line}, column {col}")
                })
                .unwrap_or_default();
            loaded.push(finding(
                "C002",
                "toml-syntax",
                "",
                format!("`{name}` is not valid TOML{at}: {}", e.message().trim()),
                None,
            ));
            None
        }
    }
}

type Layer<'a> = dyn FnMut(String, toml::Value) -> (String, toml::Value, Source) + 'a;

/// Checks a table of one layer against the known keys and takes its values.
fn check_table(
    t: &toml::Table,
    prefix: &str,
    known: &BTreeMap<String, Kind>,
    loaded: &mut Loaded,
    layer: &mut Layer<'_>,
) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let is_table = known.keys().any(|key| {
            key.len() > path.len() && key.starts_with(&path) && key.as_bytes()[path.len()] == b'.'
        });
        match (known.get(&path), v) {
            (None, toml::Value::Table(inner)) if is_table => {
                check_table(inner, &path, known, loaded, layer);
            }
            (None, _) if is_table => loaded.push(finding(
                "C004",
                "wrong-type",
                &path,
                format!("`{path}` must be a table"),
                Some(format!("write it as a section: [{path}]")),
            )),
            (None, _) => loaded.push(finding(
                "C003",
                "unknown-key",
                &path,
                format!("unknown key `{path}`"),
                Some(match closest(&path, known) {
                    Some(c) => format!("did you mean `{c}`? `weft config` lists every key"),
                    None => "`weft config` lists every key".to_string(),
                }),
            )),
            (Some(kind), v) if fits(v, *kind) => {
                let (k, v, s) = layer(path, coerce(v.clone(), *kind));
                loaded.values.insert(k, (v, s));
            }
            (Some(kind), v) => loaded.push(finding(
                "C004",
                "wrong-type",
                &path,
                format!("`{path}` must be {}, not {}", kind.name(), v.type_str()),
                None,
            )),
        }
    }
}

/// Does `v` fit a key of `kind`? (Integers fit numbers; lists hold strings.)
fn fits(v: &toml::Value, kind: Kind) -> bool {
    match (v, kind) {
        (toml::Value::Integer(_), Kind::Float) => true,
        (toml::Value::Array(items), Kind::List) => items.iter().all(toml::Value::is_str),
        (toml::Value::Array(items), Kind::Tables) => items.iter().all(toml::Value::is_table),
        (v, kind) => Kind::of(v) == Some(kind),
    }
}

fn coerce(v: toml::Value, kind: Kind) -> toml::Value {
    match (v, kind) {
        #[allow(clippy::cast_precision_loss)]
        (toml::Value::Integer(i), Kind::Float) => toml::Value::Float(i as f64),
        (v, _) => v,
    }
}

fn parse_env(raw: &str, kind: Kind) -> Option<toml::Value> {
    let t = raw.trim();
    Some(match kind {
        Kind::String => toml::Value::String(raw.to_string()),
        Kind::Integer => toml::Value::Integer(t.parse().ok()?),
        Kind::Float => toml::Value::Float(t.parse().ok()?),
        Kind::Boolean => match t.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => toml::Value::Boolean(true),
            "0" | "false" | "no" | "off" => toml::Value::Boolean(false),
            _ => return None,
        },
        Kind::Tables => return None,
        Kind::List => toml::Value::Array(
            t.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_string()))
                .collect(),
        ),
    })
}

fn env_hint(kind: Kind) -> String {
    match kind {
        Kind::Boolean => "use 1/0, true/false, yes/no or on/off".into(),
        Kind::List => "separate the items with commas".into(),
        _ => format!("the value must be {}", kind.name()),
    }
}

fn short(s: &str) -> String {
    s.chars().take(60).collect()
}

fn set_path(tree: &mut toml::Table, key: &str, v: toml::Value) {
    let mut parts = key.split('.').peekable();
    let mut t = tree;
    while let Some(p) = parts.next() {
        if parts.peek().is_none() {
            t.insert(p.to_string(), v);
            return;
        }
        let next = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !next.is_table() {
            *next = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(inner) = next else {
            return;
        };
        t = inner;
    }
}

/// The known key or table nearest to `path` (at most two edits away in its last part, one
/// more when it sits under another table).
fn closest(path: &str, known: &BTreeMap<String, Kind>) -> Option<String> {
    let mut names: Vec<&str> = Vec::new();
    for k in known.keys() {
        let mut end = k.len();
        loop {
            names.push(&k[..end]);
            match k[..end].rfind('.') {
                Some(i) => end = i,
                None => break,
            }
        }
    }
    names.sort_unstable();
    names.dedup();
    let split = |p: &str| -> (String, String) {
        match p.rsplit_once('.') {
            Some((t, l)) => (t.to_string(), l.to_string()),
            None => (String::new(), p.to_string()),
        }
    };
    let (table, last) = split(path);
    names
        .into_iter()
        .map(|k| {
            let (kt, kl) = split(k);
            (edit_distance(&last, &kl) + usize::from(kt != table), k)
        })
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k.to_string())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("snapshot_evry", "snapshot_every"), 1);
        assert_eq!(edit_distance("url", "url"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn env_names_follow_the_path() {
        assert_eq!(env_name("store.url"), "WEFT_STORE_URL");
        assert_eq!(
            env_name("tools.http.allow_hosts"),
            "WEFT_TOOLS_HTTP_ALLOW_HOSTS"
        );
        assert_eq!(env_name("llm.base_url"), "WEFT_LLM_BASE_URL");
    }
}
