//! Governance before every effect (seed 003's Rego policies): a [`Policy`] is a bundle of
//! `.rego` files evaluated in process with `regorus`, and [`PolicyLink`] is the interceptor
//! at the policy stage of the tool-call chain (`weft_tools::Stage::Policy`, outermost), so
//! every tool call of every kind is decided before anything else happens to it: a denied
//! call consumes no budget, records no dispatch and never reaches the tool.
//!
//! ## The contract with a bundle
//! The bundle declares `package weft` and a rule `deny`: a set of reasons (strings). weft
//! evaluates `data.weft.deny` for each call's input document; a call is denied when the set
//! is not empty, with its reasons (sorted, joined) as the step error `policy_denied`, which
//! is not retried. An undefined `deny` allows. A rule that cannot be evaluated (a runtime
//! error, the time limit) denies: policies fail closed.
//!
//! A bundle may also define `require_approval`, a set of reasons: a call it names (and
//! `deny` does not) waits for a person's decision before it runs (the engine's approvals:
//! `approval.requested`, `POST /v1/instances/{id}/approvals/{step}`, `weft approve`), at most
//! `data.weft.approval_timeout_ms` if the bundle defines it, then it is denied. Such a
//! bundle makes every call behind it asynchronous, since any call may have to wait.
//!
//! The input document, version [`INPUT_VERSION`]:
//! ```json
//! {"version": 1, "kind": "tool_call", "tenant": "acme", "instance": "i…", "plan": "billing",
//!  "step": "charge", "attempt": 1,
//!  "tool": {"name": "http.request", "effect": "write", "idempotent": false},
//!  "args": {"url": "https://…"},
//!  "profile": {"tool": "http.request", "source": "unknown", "effect": "write",
//!              "deterministic": false, "network": {"hosts": ["*"]},
//!              "filesystem": {"read": ["/"], "write": ["/"], "read_only": false},
//!              "limits": {"time_ms": null, "memory_mb": null, "cpu_seconds": null},
//!              "isolation": "none"}}
//! ```
//! `instance`, `plan` and `step` are empty for calls made outside an instance (the ReAct
//! planner's). `profile` is the step security profile (`weft_tools::profile`, the shape
//! `weft profile --json` prints) as derived from the tool's spec alone: a `pure` tool needs
//! nothing, any other is assumed to need everything.
//!
//! ## Cost
//! A bundle that reads its input is compiled when it loads (`compiled.rs`): its rules are
//! evaluated for each call by weft's own evaluator, exactly as regorus's interpreter decides
//! (a call that fails is handed to the interpreter, which fails the same way), in about
//! 8–11 µs for a realistic bundle of twenty rules against 80 µs for the interpreter
//! (docs/performance.md). A bundle outside the compiled subset runs the interpreter on a
//! clone of the engine prepared at load ([`Policy::evaluator`] says which and why). A
//! bundle none of whose files mentions the word `input` gives every call the same decision,
//! so it is decided once, when it loads ([`Policy::is_constant`]): an allow-all bundle costs
//! a call only the record of its decision.

mod compiled;
mod plans;
mod set;

pub use compiled::WORK_LIMIT;

pub use plans::{PROPERTIES_RULE, PlanPolicy, plan_input};
pub use set::{Bundles, PolicySet, ReloadStatus, Watcher};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weft_tools::approval::approve_then_call;
use weft_tools::{ApprovalRequest, BoxFuture, Interceptor, Tool, ToolContext, ToolError, ToolSpec};

/// The version of the input document; a change that removes or renames a field raises it.
pub const INPUT_VERSION: u32 = 1;

/// The rule weft evaluates.
pub const DENY_RULE: &str = "data.weft.deny";

/// How long one decision may take before it denies.
pub const EVAL_LIMIT: Duration = Duration::from_millis(250);

/// Largest policy file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why a bundle is refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A file or directory could not be read.
    #[error("policy bundle: cannot read {path}: {message}")]
    Read {
        /// What was read.
        path: String,
        /// Why it failed.
        message: String,
    },
    /// A file is not valid Rego.
    #[error("policy bundle: {path} does not compile: {message}")]
    Compile {
        /// The file.
        path: String,
        /// regorus's message (with the line and column).
        message: String,
    },
    /// `data.weft.properties` does not declare properties weft can check.
    #[error(
        "policy bundle: data.weft.properties: {message}; each property is {{\"name\", \"before\": {{…}}, \"always\": {{…}}}} with selectors step, tool, tool_prefix, effect, approval"
    )]
    Properties {
        /// What is wrong.
        message: String,
    },
    /// A reload that cannot take effect while weft runs.
    #[error("policy bundle: not reloaded: {message}; restart weft to use it")]
    NeedsRestart {
        /// Why.
        message: String,
    },
    /// No file declares `package weft`, so `data.weft.deny` could never be defined.
    #[error(
        "policy bundle: no file declares `package weft` (files: {files}); weft evaluates `data.weft.deny`, a set of reasons"
    )]
    NoWeftPackage {
        /// The files read.
        files: String,
    },
}

/// A decision about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The call may go on.
    Allow,
    /// The call is refused, for these reasons (sorted, at least one).
    Deny(Vec<String>),
    /// The call may go on once a person approves it, asked for these reasons (sorted, at
    /// least one), waiting at most `timeout_ms` (then it is denied).
    RequireApproval {
        /// What the approver is asked.
        reasons: Vec<String>,
        /// `data.weft.approval_timeout_ms`, if the bundle defines it.
        timeout_ms: Option<u64>,
    },
}

/// The rule naming the reasons a call needs a person's approval.
pub const APPROVAL_RULE: &str = "data.weft.require_approval";

/// The rule bounding the wait for an approval, in milliseconds.
pub const APPROVAL_TIMEOUT_RULE: &str = "data.weft.approval_timeout_ms";

/// A compiled bundle. Cheap to clone; each decision runs on a clone of the prepared engine.
#[derive(Clone)]
pub struct Policy {
    engine: regorus::Engine,
    files: Arc<[String]>,
    /// The `test_*` rules of the bundle, as `data.<package>.<rule>` ([`Policy::run_tests`]).
    tests: Arc<[String]>,
    /// Whether `package weft` defines `deny` (regorus refuses to evaluate a rule that no
    /// file defines; an absent `deny` allows).
    denies: bool,
    /// Whether `package weft` defines `require_approval`: then a call may wait for a person,
    /// so no tool behind this bundle is called inline.
    approvals: bool,
    /// Whether `package weft` defines `approval_timeout_ms`.
    approval_timeout: bool,
    /// The properties `data.weft.properties` declares, read at load.
    properties: Arc<[weft_analysis::Property]>,
    /// The decision of a bundle that never reads its input (no file mentions `input`):
    /// every call gets the same one, so it is made once, when the bundle loads.
    constant: Option<Decision>,
    /// The bundle's rules compiled (`compiled.rs`), or why the interpreter evaluates them.
    compiled: Result<Arc<compiled::Compiled>, Arc<str>>,
}

/// What evaluates a bundle's rules for each call ([`Policy::evaluator`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evaluator {
    /// The decision is made once, when the bundle loads (no file mentions `input`).
    Constant,
    /// weft's compiled rules (the interpreter only for a call they hand over).
    Compiled,
    /// regorus's interpreter, for this reason (a construct outside the compiled subset).
    Interpreter(String),
}

/// Whether a Rego text mentions the word `input` anywhere (comments and strings included,
/// so a bundle can only be judged to read its input when it does not).
fn mentions_input(text: &str) -> bool {
    words(text).any(|w| w == "input")
}

/// The words of a Rego text (runs of ASCII letters, digits and `_`), comments and strings
/// included.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// Whether a Rego file of `package weft` defines the rule `rule` (a rule head at the start
/// of a line).
fn defines(text: &str, rule: &str) -> bool {
    let weft = text
        .lines()
        .any(|l| l.trim_start().strip_prefix("package ").map(str::trim) == Some("weft"));
    weft && text.lines().any(|l| {
        l.strip_prefix(rule)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '[', ':', '=', '{']))
    })
}

/// The result of one `test_*` rule ([`Policy::run_tests`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestOutcome {
    /// `data.<package>.<rule>`.
    pub rule: String,
    /// Whether the rule evaluated to `true`.
    pub passed: bool,
    /// What it evaluated to instead (`false`, undefined, an error).
    pub detail: Option<String>,
}

/// The `test_*` rules a Rego file defines, as `data.<package>.<rule>`: rule heads at the start
/// of a line (`test_name if {`), as OPA's test runner finds them by name.
fn test_rules(text: &str) -> Vec<String> {
    let package = text.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix("package ")?;
        let name: String = rest
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'))
            .collect();
        (!name.is_empty()).then_some(name)
    });
    let Some(package) = package else {
        return Vec::new();
    };
    let mut out: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("test_"))
        .map(|l| {
            let name: String = l
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            format!("data.{package}.{name}")
        })
        .collect();
    out.dedup();
    out
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("files", &self.files)
            .finish()
    }
}

impl Policy {
    /// A bundle from `(name, rego text)` pairs; the name appears in errors.
    pub fn from_sources(sources: Vec<(String, String)>) -> Result<Policy, PolicyError> {
        let mut engine = regorus::Engine::new();
        engine.set_execution_timer_config(regorus::utils::limits::ExecutionTimerConfig {
            limit: EVAL_LIMIT,
            check_interval: std::num::NonZeroU32::MIN.saturating_add(99),
        });
        let mut files = Vec::with_capacity(sources.len());
        let texts = sources.clone();
        let mut tests = Vec::new();
        let (mut denies, mut approvals, mut approval_timeout) = (false, false, false);
        let mut declares_properties = false;
        let mut reads_input = false;
        for (name, text) in sources {
            // `rand.intn` answers differently each time: such a bundle is no constant.
            reads_input |= mentions_input(&text) || text.contains("rand.intn");
            tests.extend(test_rules(&text));
            denies |= defines(&text, "deny");
            approvals |= defines(&text, "require_approval");
            approval_timeout |= defines(&text, "approval_timeout_ms");
            declares_properties |= defines(&text, "properties");
            engine
                .add_policy(name.clone(), text)
                .map_err(|e| PolicyError::Compile {
                    path: name.clone(),
                    message: e.to_string(),
                })?;
            files.push(name);
        }
        let has_weft = engine
            .get_packages()
            .map(|p| p.iter().any(|p| p == "data.weft"))
            .unwrap_or(false);
        if !has_weft {
            return Err(PolicyError::NoWeftPackage {
                files: files.join(", "),
            });
        }
        tests.sort();
        tests.dedup();
        // Prepare the engine once (rule analysis, scheduling, loop hoisting): regorus does it
        // on the first evaluation, and every decision runs on a clone of this engine, which
        // would otherwise prepare again (measured: most of a decision's cost). The result is
        // not needed: the rule may be absent or need an input.
        let _ = engine.eval_rule(DENY_RULE.to_string());
        let mut policy = Policy {
            engine,
            files: files.into(),
            tests: tests.into(),
            denies,
            approvals,
            approval_timeout,
            properties: Arc::new([]),
            constant: None,
            compiled: Err("not compiled".into()),
        };
        // weft's regorus build has one builtin whose answer varies by itself, `rand.intn`
        // (its `time`, `uuid`, `http` and `opa-runtime` features are off), and a bundle has
        // no data besides its rules: without `input` or `rand.intn`, a decision is a
        // constant.
        if !reads_input {
            policy.constant = Some(policy.decide_rego(&regorus::Value::new_object()));
        } else {
            // Rules that do not read the input are evaluated here, by the interpreter.
            let mut constant = |rule: &str| policy.eval_rego(rule, None);
            policy.compiled = compiled::compile(&texts, &mut constant)
                .map(Arc::new)
                .map_err(Arc::from);
        }
        if declares_properties {
            let value = policy
                .eval(PROPERTIES_RULE, None)
                .map_err(|message| PolicyError::Properties { message })?;
            policy.properties = plans::parse_properties(value)?.into();
        }
        Ok(policy)
    }

    /// A bundle from files and directories (every `*.rego` file directly in a directory,
    /// in name order).
    pub fn load(paths: &[PathBuf]) -> Result<Policy, PolicyError> {
        let mut sources = Vec::new();
        for p in paths {
            if p.is_dir() {
                let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                    .map_err(|e| read_error(p, &e))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|f| f.extension().is_some_and(|x| x == "rego") && f.is_file())
                    .collect();
                found.sort();
                for f in found {
                    sources.push((f.display().to_string(), read(&f)?));
                }
            } else {
                sources.push((p.display().to_string(), read(p)?));
            }
        }
        Policy::from_sources(sources)
    }

    /// Whether every call gets the same decision, made when the bundle loaded (no file of
    /// the bundle mentions `input`).
    pub fn is_constant(&self) -> bool {
        self.constant.is_some()
    }

    /// What evaluates the bundle's rules for each call.
    pub fn evaluator(&self) -> Evaluator {
        match (&self.constant, &self.compiled) {
            (Some(_), _) => Evaluator::Constant,
            (None, Ok(_)) => Evaluator::Compiled,
            (None, Err(why)) => Evaluator::Interpreter(why.to_string()),
        }
    }

    /// How many rule evaluations the compiled rules handed to the interpreter since the
    /// bundle loaded (a call past [`WORK_LIMIT`], a shape regorus stores oddly).
    pub fn handed_over(&self) -> u64 {
        self.compiled.as_ref().map_or(0, |c| {
            c.handed_over.load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// The same bundle evaluated by regorus's interpreter alone, the reference the compiled
    /// rules are compared with (tests, `weft policy eval --interpreter`, benchmarks).
    pub fn interpreted(&self) -> Policy {
        Policy {
            compiled: Err("the interpreter was asked for".into()),
            ..self.clone()
        }
    }

    /// Whether the bundle defines `require_approval` (a call may wait for a person).
    pub fn may_require_approval(&self) -> bool {
        self.approvals
    }

    /// The properties the bundle declares (`data.weft.properties`), by name.
    pub fn properties(&self) -> &[weft_analysis::Property] {
        &self.properties
    }

    /// The files of the bundle, in the order they were read.
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// Evaluates `rule` (e.g. `data.weft.deny`) for `input` (none: an empty input), as JSON.
    pub fn eval(&self, rule: &str, input: Option<&Value>) -> Result<Value, String> {
        let input = input.map(rego_value).transpose()?;
        let out = self.eval_rego(rule, input)?;
        if out == regorus::Value::Undefined {
            return Ok(Value::Null);
        }
        let text = out.to_json_str().map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }

    /// Evaluates `rule`: by the compiled rules when they can, else on a clone of the
    /// prepared engine.
    fn eval_rego(
        &self,
        rule: &str,
        input: Option<regorus::Value>,
    ) -> Result<regorus::Value, String> {
        match (&self.compiled, input) {
            (Ok(compiled), Some(input)) => {
                self.eval_in(Some(&mut compiled.session(&input)), rule, &input)
            }
            (_, input) => self.interpret(rule, input),
        }
    }

    /// Evaluates `rule` in a decision's session of the compiled rules (the rules it
    /// evaluated are kept for the next), or by the interpreter when they hand it over.
    fn eval_in(
        &self,
        session: Option<&mut compiled::Session>,
        rule: &str,
        input: &regorus::Value,
    ) -> Result<regorus::Value, String> {
        if let Some(session) = session {
            match session.eval(rule) {
                Ok(value) => return Ok(value),
                Err(compiled::Fallback::NotCompiled) => {}
                Err(compiled::Fallback::HandedOver) => session.count_handed_over(),
            }
        }
        self.interpret(rule, Some(input.clone()))
    }

    /// Evaluates `rule` on a clone of the prepared engine.
    fn interpret(
        &self,
        rule: &str,
        input: Option<regorus::Value>,
    ) -> Result<regorus::Value, String> {
        let mut engine = self.engine.clone();
        if let Some(input) = input {
            engine.set_input(input);
        }
        engine
            .eval_rule(rule.to_string())
            .map_err(|e| e.to_string())
    }

    /// Runs the bundle's Rego tests: every `test_*` rule, which passes when it is `true`.
    pub fn run_tests(&self) -> Vec<TestOutcome> {
        self.tests
            .iter()
            .map(|rule| {
                let (passed, detail) = match self.eval(rule, None) {
                    Ok(Value::Bool(true)) => (true, None),
                    Ok(Value::Null) => (false, Some("undefined".to_string())),
                    Ok(other) => (false, Some(other.to_string())),
                    Err(e) => (false, Some(e)),
                };
                TestOutcome {
                    rule: rule.clone(),
                    passed,
                    detail,
                }
            })
            .collect()
    }

    /// The reasons a set rule gave: empty when it is undefined or empty; an error (which
    /// denies) when it is not a set or could not be evaluated.
    fn reasons(rule: &str, value: Result<regorus::Value, String>) -> Result<Vec<String>, String> {
        let set = match value {
            Ok(regorus::Value::Undefined) => return Ok(Vec::new()),
            Ok(regorus::Value::Set(set)) => set,
            Ok(other) => {
                let shown = other.to_json_str().unwrap_or_else(|_| format!("{other:?}"));
                return Err(format!("{rule} must be a set of reasons, it is {shown}"));
            }
            Err(e) => return Err(format!("the policy could not be evaluated ({rule}): {e}")),
        };
        // A set iterates in order and without repeats.
        Ok(set
            .iter()
            .map(|r| match r {
                regorus::Value::String(s) => s.to_string(),
                other => other.to_json_str().unwrap_or_else(|_| format!("{other:?}")),
            })
            .collect())
    }

    /// The `deny` rule alone for an input document: a plan's decision (approvals are per call).
    pub fn decide_deny(&self, input: &Value) -> Decision {
        if !self.denies {
            return Decision::Allow;
        }
        if let Some(d) = &self.constant {
            return match d {
                Decision::Deny(r) => Decision::Deny(r.clone()),
                _ => Decision::Allow,
            };
        }
        let input = match rego_value(input) {
            Ok(v) => v,
            Err(e) => return Decision::Deny(vec![format!("the input cannot be read: {e}")]),
        };
        match Self::reasons(DENY_RULE, self.eval_rego(DENY_RULE, Some(input))) {
            Ok(r) if r.is_empty() => Decision::Allow,
            Ok(r) => Decision::Deny(r),
            Err(e) => Decision::Deny(vec![e]),
        }
    }

    /// The decision for an input document: a denial wins over an approval.
    pub fn decide(&self, input: &Value) -> Decision {
        if let Some(d) = self.constant_decision() {
            return d.clone();
        }
        // Converted once (no JSON text), shared by the rules below (its clones are cheap).
        match rego_value(input) {
            Ok(v) => self.decide_rego(&v),
            Err(e) => Decision::Deny(vec![format!("the input cannot be read: {e}")]),
        }
    }

    /// The decision every call gets when the bundle's rules never read their input
    /// ([`Policy::is_constant`]), and when the bundle decides nothing (allow).
    fn constant_decision(&self) -> Option<&Decision> {
        const ALLOW: &Decision = &Decision::Allow;
        if !self.denies && !self.approvals {
            return Some(ALLOW);
        }
        self.constant.as_ref()
    }

    /// [`Policy::decide`] for an input already converted.
    fn decide_rego(&self, input: &regorus::Value) -> Decision {
        // One session for the decision's rules: those `deny` evaluated serve the others.
        let mut session = self.compiled.as_ref().ok().map(|c| c.session(input));
        let mut eval = |rule: &str| self.eval_in(session.as_mut(), rule, input);
        if self.denies {
            match Self::reasons(DENY_RULE, eval(DENY_RULE)) {
                Ok(r) if r.is_empty() => {}
                Ok(r) => return Decision::Deny(r),
                Err(e) => return Decision::Deny(vec![e]),
            }
        }
        if !self.approvals {
            return Decision::Allow;
        }
        let reasons = match Self::reasons(APPROVAL_RULE, eval(APPROVAL_RULE)) {
            Ok(r) if r.is_empty() => return Decision::Allow,
            Ok(r) => r,
            Err(e) => return Decision::Deny(vec![e]),
        };
        if !self.approval_timeout {
            return Decision::RequireApproval {
                reasons,
                timeout_ms: None,
            };
        }
        let timeout_ms = match eval(APPROVAL_TIMEOUT_RULE) {
            Ok(regorus::Value::Undefined) => None,
            Ok(n) if n.as_u64().is_ok_and(|t| t > 0) => n.as_u64().ok(),
            Ok(other) => {
                let shown = other.to_json_str().unwrap_or_else(|_| format!("{other:?}"));
                return Decision::Deny(vec![format!(
                    "{APPROVAL_TIMEOUT_RULE} must be a positive whole number of milliseconds, it is {shown}"
                )]);
            }
            Err(e) => {
                return Decision::Deny(vec![format!(
                    "the policy could not be evaluated ({APPROVAL_TIMEOUT_RULE}): {e}"
                )]);
            }
        };
        Decision::RequireApproval {
            reasons,
            timeout_ms,
        }
    }
}

/// A JSON document as a Rego value, through serde (no JSON text in between).
fn rego_value(v: &Value) -> Result<regorus::Value, String> {
    use serde::Deserialize as _;
    regorus::Value::deserialize(v).map_err(|e| e.to_string())
}

fn read_error(p: &Path, e: &std::io::Error) -> PolicyError {
    PolicyError::Read {
        path: p.display().to_string(),
        message: e.to_string(),
    }
}

fn read(p: &Path) -> Result<String, PolicyError> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(p)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| read_error(p, &e))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(PolicyError::Read {
            path: p.display().to_string(),
            message: format!("larger than {MAX_FILE_BYTES} bytes"),
        });
    }
    Ok(text)
}

/// The input document of a tool call (see the module docs), with the profile a tool that
/// states no needs gets (see [`profile_input`]).
pub fn call_input(ctx: &ToolContext, spec: &ToolSpec, args: &Value) -> Value {
    call_input_with(ctx, spec, &profile_input(spec, None), args)
}

/// The `profile` object of the input: the security profile `weft_tools::profile` derives
/// from the tool's spec and the needs it states (a tool stating none: pure needs nothing,
/// anything else everything).
pub fn profile_input(spec: &ToolSpec, needs: Option<&weft_tools::Needs>) -> Value {
    serde_json::to_value(weft_tools::profile::derive(spec, needs, None)).unwrap_or(Value::Null)
}

/// [`call_input`] with the tool's `profile` object already made.
fn call_input_with(ctx: &ToolContext, spec: &ToolSpec, profile: &Value, args: &Value) -> Value {
    json!({
        "version": INPUT_VERSION,
        "kind": "tool_call",
        "tenant": &*ctx.tenant,
        "instance": &*ctx.instance,
        "plan": &*ctx.plan,
        "step": &*ctx.step,
        "attempt": ctx.attempt,
        "tool": {
            "name": spec.name,
            "effect": spec.effect,
            "idempotent": spec.idempotent,
        },
        "args": args,
        "profile": profile,
    })
}

/// The policy stage of the chain: every call is decided by the bundle before it runs.
#[derive(Debug, Clone)]
pub struct PolicyLink {
    policies: PolicySet,
}

impl PolicyLink {
    /// The link for `policy`, the same for every tenant.
    pub fn new(policy: Policy) -> Self {
        PolicyLink {
            policies: PolicySet::fixed(policy),
        }
    }

    /// The link for the deployment's and tenants' policies of `policies` (which may be
    /// reloaded while it is in use).
    pub fn with_set(policies: PolicySet) -> Self {
        PolicyLink { policies }
    }
}

impl Interceptor for PolicyLink {
    fn describe(&self) -> String {
        let tenants = self.policies.tenants();
        let mut d = format!("Rego policy ({})", self.policies.files().join(", "));
        if !tenants.is_empty() {
            d.push_str(&format!(", own bundles of {}", tenants.join(", ")));
        }
        d
    }

    fn wrap(&self, tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
        // The links inside forward the tool's needs, so the profile is the tool's own.
        let profile = profile_input(tool.spec(), tool.profile_needs().as_ref());
        let input = CallInput::new(tool.spec(), &profile);
        Arc::new(Governed {
            inner: tool,
            policies: self.policies.clone(),
            input,
        })
    }
}

/// A tool's input documents as Rego values: what every call of the tool shares (version,
/// kind, tool, profile) made once, and the keys of the rest, so that a call converts only
/// its arguments. [`CallInput::document`] equals [`call_input`] converted (a unit test).
struct CallInput {
    /// The shared fields.
    base: regorus::Value,
    /// `tenant`, `instance`, `plan`, `step`, `attempt`, `args`.
    keys: [regorus::Value; 6],
}

impl CallInput {
    fn new(spec: &ToolSpec, profile: &Value) -> CallInput {
        let base = json!({
            "version": INPUT_VERSION,
            "kind": "tool_call",
            "tool": {
                "name": spec.name,
                "effect": spec.effect,
                "idempotent": spec.idempotent,
            },
            "profile": profile,
        });
        CallInput {
            base: rego_value(&base).unwrap_or(regorus::Value::Undefined),
            keys: ["tenant", "instance", "plan", "step", "attempt", "args"]
                .map(regorus::Value::from),
        }
    }

    /// The input document of one call.
    fn document(&self, ctx: &ToolContext, args: &Value) -> Result<regorus::Value, String> {
        let regorus::Value::Object(base) = &self.base else {
            return Err("the tool's spec cannot be converted".to_string());
        };
        let mut doc = regorus::Value::Object(Arc::clone(base));
        let map = doc.as_object_mut().map_err(|e| e.to_string())?;
        let [tenant, instance, plan, step, attempt, args_key] = &self.keys;
        let text = |s: &Arc<str>| regorus::Value::String(Arc::clone(s));
        map.insert(tenant.clone(), text(&ctx.tenant));
        map.insert(instance.clone(), text(&ctx.instance));
        map.insert(plan.clone(), text(&ctx.plan));
        map.insert(step.clone(), text(&ctx.step));
        map.insert(attempt.clone(), regorus::Value::from(ctx.attempt));
        map.insert(args_key.clone(), rego_value(args)?);
        Ok(doc)
    }
}

/// A tool behind the policy.
struct Governed {
    inner: Arc<dyn Tool>,
    policies: PolicySet,
    /// The tool's input documents, their shared part made once.
    input: CallInput,
}

impl Governed {
    /// The decision for this call: `Ok(None)` to call, `Ok(Some(request))` to call once a
    /// person approves, `Err` when denied.
    /// Every decision is recorded through the engine's services before it takes effect
    /// (journaled as `policy.decided` and published).
    fn check(&self, ctx: &ToolContext, args: &Value) -> Result<Option<ApprovalRequest>, ToolError> {
        let decision = self.policies.with_tenant(&ctx.tenant, |p| {
            let Some(p) = p else {
                return Decision::Allow;
            };
            if let Some(d) = p.constant_decision() {
                return d.clone();
            }
            match self.input.document(ctx, args) {
                Ok(doc) => p.decide_rego(&doc),
                Err(e) => Decision::Deny(vec![format!("the input cannot be read: {e}")]),
            }
        });
        let (name, reasons) = match &decision {
            Decision::Allow => ("allow", Vec::new()),
            Decision::Deny(r) => ("deny", r.clone()),
            Decision::RequireApproval { reasons, .. } => ("require_approval", reasons.clone()),
        };
        ctx.services.record_decision(
            ctx,
            weft_tools::PolicyDecision {
                decision: name.to_string(),
                reasons,
            },
        );
        match decision {
            Decision::Allow => Ok(None),
            Decision::Deny(reasons) => Err(ToolError::fatal(
                "policy_denied",
                format!(
                    "the policy denies `{}`: {}",
                    self.inner.spec().name,
                    reasons.join("; ")
                ),
            )),
            Decision::RequireApproval {
                reasons,
                timeout_ms,
            } => Ok(Some(ApprovalRequest {
                reasons,
                timeout_ms,
                default_grant: false,
            })),
        }
    }
}

impl Tool for Governed {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        self.inner.profile_needs()
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        match self.check(&ctx, &args) {
            Ok(None) => self.inner.call(ctx, args),
            Ok(Some(request)) => approve_then_call(Arc::clone(&self.inner), request, ctx, args),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    // A bundle that may ask for approvals makes every call a future (it may wait).
    fn is_immediate(&self) -> bool {
        self.inner.is_immediate() && !self.policies.may_require_approval()
    }

    fn waits_for_journal(&self) -> bool {
        self.inner.waits_for_journal() && !self.policies.may_require_approval()
    }

    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        match self.check(&ctx, &args)? {
            None => self.inner.call_now(ctx, args),
            Some(_) => Err(ToolError::fatal(
                "approval_unavailable",
                format!(
                    "the policy requires an approval for `{}`, and this call cannot wait for one",
                    self.inner.spec().name
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_word_input_counts_as_reading_the_input() {
        for text in [
            "x := input.a",
            "input",
            "f(input)",
            "# input",
            "\"input\"",
            "[input]",
        ] {
            assert!(mentions_input(text), "{text}");
        }
        for text in [
            "inputs := 1",
            "my_input",
            "input_x",
            "deny := set()",
            "inp ut",
        ] {
            assert!(!mentions_input(text), "{text}");
        }
    }

    /// The link's input documents, built from Rego values, are the documented ones.
    #[test]
    fn a_call_input_made_from_rego_values_equals_the_json_one() {
        let spec = ToolSpec::new("http.request", weft_tools::Effect::Write, false);
        let ctx = ToolContext {
            tenant: Arc::from("acme"),
            instance: Arc::from("i7"),
            plan: Arc::from("billing"),
            step: Arc::from("charge"),
            attempt: 3,
            ..ToolContext::detached("charge")
        };
        let args = json!({"url": "https://x.test/", "n": [1, 2.5, {"deep": null}], "b": true});
        let profile = profile_input(&spec, None);
        let made = CallInput::new(&spec, &profile)
            .document(&ctx, &args)
            .unwrap();
        assert_eq!(made, rego_value(&call_input(&ctx, &spec, &args)).unwrap());
    }
}
