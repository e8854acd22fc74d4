//! Static validation: schema, references, names, expressions and structure.
//!
//! [`validate`] checks a parsed [`Plan`] and, when there are no errors, hands back the
//! compiled [`Net`] so that expressions are compiled exactly once. Every problem becomes a
//! [`Finding`] with a stable code and a JSON pointer; nothing here panics on input.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::catalog::{ToolCatalog, suggest};
use crate::expr::{Expr, Scope, Template};
use crate::finding::{Code, Finding, Severity, event_ptr, step_ptr};
use crate::load::{Limits, escape_pointer};
use crate::net::{EmitNode, EventId, FailPolicy, Net, StepNode};
use crate::plan::{Emit, EventKind, GraphType, OnFail, Plan};

/// The outcome of validation.
#[derive(Debug)]
pub struct Validation {
    /// Everything found, errors first, then in plan order.
    pub findings: Vec<Finding>,
    /// The compiled net, present when there are no errors.
    pub net: Option<Net>,
}

impl Validation {
    /// Does the plan have errors?
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(Finding::is_error)
    }
}

struct Ctx<'a> {
    plan: &'a Plan,
    limits: &'a Limits,
    findings: Vec<Finding>,
    exprs: HashMap<String, Result<Expr, String>>,
}

impl Ctx<'_> {
    fn push(&mut self, f: Finding) {
        self.findings.push(f);
    }

    fn unknown_event(&mut self, name: &str, pointer: String, role: &str) {
        let mut f = Finding::new(
            Code::UnknownEvent,
            Severity::Error,
            pointer,
            format!("{role} `{name}` is not declared in `events`"),
        );
        f = match suggest(name, self.plan.events.keys().map(String::as_str)) {
            Some(s) => f.hint(format!(
                "did you mean `{s}`? Otherwise declare `{name}` under `events`"
            )),
            None => f.hint(format!("declare `{name}` under `events`")),
        };
        self.push(f);
    }

    /// Compiles an expression, caching by source so repeated expressions compile once.
    fn compile(&mut self, src: &str, at: &dyn Fn() -> (String, String)) -> Option<Expr> {
        if src.len() > self.limits.max_expr_len {
            let (pointer, what) = at();
            self.push(
                Finding::new(
                    Code::InvalidExpression,
                    Severity::Error,
                    pointer,
                    format!(
                        "{what} is {} bytes, over the limit of {}",
                        src.len(),
                        self.limits.max_expr_len
                    ),
                )
                .hint("shorten the expression or move the logic into a tool"),
            );
            return None;
        }
        let r = match self.exprs.get(src) {
            Some(r) => r.clone(),
            None => {
                let r = Expr::compile(src).map_err(|e| e.message);
                self.exprs.insert(src.to_string(), r.clone());
                r
            }
        };
        match r {
            Ok(e) => Some(e),
            Err(msg) => {
                let (pointer, what) = at();
                self.push(
                    Finding::new(
                        Code::InvalidExpression,
                        Severity::Error,
                        pointer,
                        format!("{what} `{}` does not compile: {msg}", truncate(src, 120)),
                    )
                    .hint("expressions are CEL, e.g. `order.total > 100 && order.currency == \"EUR\"`"),
                );
                None
            }
        }
    }

    fn template(&mut self, value: &Value, at: &dyn Fn() -> (String, String)) -> Option<Template> {
        if !has_template(value) {
            return Some(Template::Literal(value.clone()));
        }
        let cache = &mut self.exprs;
        let mut compile = |src: &str| -> Result<Expr, crate::expr::CompileError> {
            let r = match cache.get(src) {
                Some(r) => r.clone(),
                None => {
                    let r = Expr::compile(src).map_err(|e| e.message);
                    cache.insert(src.to_string(), r.clone());
                    r
                }
            };
            r.map_err(|message| crate::expr::CompileError { message })
        };
        match Template::compile_with(value, &mut compile) {
            Ok(t) => {
                let limit = self.limits.max_expr_len;
                let mut too_long = Vec::new();
                t.for_each_expr(&mut |e| {
                    if e.source().len() > limit {
                        too_long.push(e.source().len());
                    }
                });
                for len in too_long {
                    let (pointer, what) = at();
                    self.push(
                        Finding::new(
                            Code::InvalidExpression,
                            Severity::Error,
                            pointer,
                            format!(
                                "a template in {what} is {len} bytes, over the limit of {limit}"
                            ),
                        )
                        .hint("shorten the expression or move the logic into a tool"),
                    );
                }
                Some(t)
            }
            Err(errs) => {
                let (pointer, what) = at();
                for e in errs {
                    self.push(
                        Finding::new(
                            Code::InvalidExpression,
                            Severity::Error,
                            format!("{pointer}{}", e.pointer),
                            format!(
                                "template `${{{}}}` in {what} does not compile: {}",
                                truncate(&e.source, 120),
                                e.error.message
                            ),
                        )
                        .hint("write `${expr}` with a CEL expression, or `$${` for a literal `${`"),
                    );
                }
                None
            }
        }
    }

    /// A guard or `when` that evaluates without any binding (it mentions no input) must
    /// give a boolean; anything else is a constant mistake such as `1 + 1` or `"yes"`.
    fn check_constant_bool(&mut self, e: &Expr, at: &dyn Fn() -> (String, String)) {
        // Only expressions that read no input can be judged without a binding.
        if e.free_variables()
            .iter()
            .any(|v| !matches!(v.as_str(), "instance" | "plan"))
        {
            return;
        }
        let scope = Scope {
            inputs: &[],
            result: None,
            instance: "",
            plan: "",
            fresh: "",
        };
        let budget = self.limits.cel_budget;
        let value = match crate::cel_budget::with_budget(budget, || e.eval(&scope)) {
            Err(err) if err.exhausted => {
                let (pointer, what) = at();
                self.push(
                    Finding::new(
                        Code::ExprBudget,
                        Severity::Error,
                        pointer,
                        format!("{what} `{}`: {}", truncate(e.source(), 80), err.message),
                    )
                    .hint(
                        "comprehensions (`map`, `filter`, `all`, `exists`) multiply: \
                         iterate over the inputs instead of large literals",
                    ),
                );
                return;
            }
            other => other,
        };
        if let Ok(other) = value
            && !other.is_boolean()
        {
            let (pointer, what) = at();
            self.push(
                Finding::new(
                    Code::NotBoolean,
                    Severity::Error,
                    pointer,
                    format!(
                        "{what} `{}` evaluates to {}, not a boolean",
                        truncate(e.source(), 80),
                        truncate(&other.to_string(), 40)
                    ),
                )
                .hint("a guard must evaluate to true or false, e.g. `order.total > 100`"),
            );
        }
    }
}

/// Does `v` contain a `${` anywhere (so that it needs compiling as a template)?
fn has_template(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains("${"),
        Value::Array(a) => a.iter().any(has_template),
        Value::Object(m) => m.values().any(has_template),
        _ => false,
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

fn check_name(ctx: &mut Ctx<'_>, name: &str, pointer: String, what: &str) {
    let problem = if name.is_empty() {
        Some("is empty".to_string())
    } else if name.chars().count() > ctx.limits.max_name_len {
        Some(format!(
            "is {} characters long, over the limit of {}",
            name.chars().count(),
            ctx.limits.max_name_len
        ))
    } else if name.chars().any(char::is_control) {
        Some("contains control characters".to_string())
    } else if name.trim() != name {
        Some("starts or ends with whitespace".to_string())
    } else {
        None
    };
    if let Some(p) = problem {
        ctx.push(
            Finding::new(
                Code::InvalidName,
                Severity::Error,
                pointer,
                format!("{what} name `{}` {p}", truncate(name, 40)),
            )
            .hint("use a short name such as `order.received` or `send_reply`"),
        );
    }
}

/// V015 for plan `limits` that no run could meet or that are not numbers.
fn check_limits(ctx: &mut Ctx<'_>, l: &crate::plan::PlanLimits) {
    let zero = [
        ("max_tool_calls", l.max_tool_calls == Some(0)),
        ("max_llm_tokens", l.max_llm_tokens == Some(0)),
        ("max_wall_ms", l.max_wall_ms == Some(0)),
    ];
    for (field, bad) in zero {
        if bad {
            ctx.push(
                Finding::new(
                    Code::InvalidPolicy,
                    Severity::Error,
                    format!("/limits/{field}"),
                    format!("`limits.{field}` is 0: no run of the plan could stay within it"),
                )
                .hint("raise the limit, or remove it to leave this unlimited"),
            );
        }
    }
    if let Some(c) = l.max_cost
        && (!c.is_finite() || c < 0.0)
    {
        ctx.push(
            Finding::new(
                Code::InvalidPolicy,
                Severity::Error,
                "/limits/max_cost",
                format!("`limits.max_cost` is {c}; it must be a finite number ≥ 0"),
            )
            .hint("e.g. \"max_cost\": 2.5, in the unit the tools' `cost` is declared in"),
        );
    }
}

/// Validates `plan`. With a `catalog`, actions and literal args are checked against it.
pub fn validate(plan: &Plan, catalog: Option<&dyn ToolCatalog>, limits: &Limits) -> Validation {
    let mut ctx = Ctx {
        plan,
        limits,
        findings: Vec::new(),
        exprs: HashMap::new(),
    };

    if plan.steps.is_empty() {
        ctx.push(
            Finding::new(
                Code::EmptyPlan,
                Severity::Error,
                "/steps",
                "the plan has no steps",
            )
            .hint("add at least one step"),
        );
    }
    check_name(&mut ctx, &plan.plan_name, "/plan_name".into(), "plan");
    if let Some(l) = &plan.limits {
        check_limits(&mut ctx, l);
    }
    for name in plan.events.keys() {
        check_name(&mut ctx, name, event_ptr(name), "event");
    }
    for name in plan.steps.keys() {
        check_name(&mut ctx, name, step_ptr(name, ""), "step");
    }

    // Start events.
    match &plan.initial {
        Some(list) => {
            if list.is_empty() {
                ctx.push(
                    Finding::new(Code::NoStart, Severity::Error, "/initial", "`initial` is empty")
                        .hint("list the events that receive the instance's input, or remove `initial` to use `start`"),
                );
            }
            for (i, e) in list.iter().enumerate() {
                if !plan.events.contains_key(e) {
                    ctx.unknown_event(e, format!("/initial/{i}"), "initial event");
                }
            }
        }
        None => {
            if !plan.events.contains_key("start") {
                let has_input = plan
                    .events
                    .values()
                    .any(|d| d.kind == Some(EventKind::Input));
                if !has_input {
                    ctx.push(
                        Finding::new(
                            Code::NoStart,
                            Severity::Error,
                            "/events",
                            "the plan has no `start` event, no `initial` list and no `input` events, so nothing can ever begin",
                        )
                        .hint("declare a `start` event, or list the entry events in `initial`"),
                    );
                }
            }
        }
    }

    // Events: payload schemas, compiled once for the net.
    let mut event_schemas: Vec<Option<Arc<crate::schema::Schema>>> =
        Vec::with_capacity(plan.events.len());
    for (name, def) in &plan.events {
        let Some(schema) = &def.schema else {
            event_schemas.push(None);
            continue;
        };
        match crate::schema::compile(schema) {
            Ok(s) => event_schemas.push(Some(Arc::new(s))),
            Err(e) => {
                event_schemas.push(None);
                ctx.push(
                    Finding::new(
                        Code::InvalidSchema,
                        Severity::Error,
                        format!("{}/schema", event_ptr(name)),
                        format!(
                            "the payload schema of event `{name}` is not a valid JSON Schema: {e}"
                        ),
                    )
                    .hint("write a JSON Schema object, e.g. {\"type\":\"object\"}"),
                );
            }
        }
    }

    let mut validators: HashMap<String, Option<crate::schema::Schema>> = HashMap::new();
    let mut steps: Vec<StepNode> = Vec::with_capacity(plan.steps.len());
    let event_id = |n: &str| plan.events.get_index_of(n).map(|i| i as EventId);

    for (sname, step) in &plan.steps {
        let sp = |f: &str| step_ptr(sname, f);
        if step.on.is_empty() {
            ctx.push(
                Finding::new(
                    Code::NoInputs,
                    Severity::Error,
                    sp("on"),
                    format!("step `{sname}` has no input events; it would fire forever"),
                )
                .hint("list the event(s) that trigger the step in `on`, e.g. [\"start\"]"),
            );
        }
        let mut seen = HashSet::new();
        let mut inputs = Vec::with_capacity(step.on.len());
        for (i, e) in step.on.iter().enumerate() {
            if !seen.insert(e.as_str()) {
                ctx.push(
                    Finding::new(
                        Code::DuplicateInput,
                        Severity::Error,
                        sp(&format!("on/{i}")),
                        format!("step `{sname}` lists input `{e}` more than once"),
                    )
                    .hint("list each input event once; to consume two tokens of one event, use two events"),
                );
            }
            match event_id(e) {
                Some(id) => inputs.push(id),
                None => ctx.unknown_event(
                    e,
                    sp(&format!("on/{i}")),
                    &format!("input of step `{sname}`"),
                ),
            }
        }

        // Action and args.
        if let Some(cat) = catalog {
            match cat.spec(&step.action) {
                None => {
                    let mut f = Finding::new(
                        Code::UnknownTool,
                        Severity::Error,
                        sp("action"),
                        format!(
                            "step `{sname}` uses unknown tool `{}`",
                            truncate(&step.action, 80)
                        ),
                    );
                    f = match suggest(&step.action, cat.names()) {
                        Some(s) => f.hint(format!("did you mean `{s}`?")),
                        None => f.hint(format!("available tools: {}", cat.names().join(", "))),
                    };
                    ctx.push(f);
                }
                Some(spec) => {
                    let validator = validators
                        .entry(spec.name.clone())
                        .or_insert_with(|| crate::schema::compile(&spec.args_schema).ok());
                    if let Some(v) = validator {
                        check_args(&mut ctx, v, &step.args, sname, &step.action);
                    }
                }
            }
        }
        let mut args = ctx.template(&step.args, &|| {
            (sp("args"), format!("the args of step `{sname}`"))
        });

        // Guard.
        let mut guard = None;
        if let Some(g) = &step.guard
            && let Some(e) =
                ctx.compile(g, &|| (sp("guard"), format!("the guard of step `{sname}`")))
        {
            ctx.check_constant_bool(&e, &|| {
                (sp("guard"), format!("the guard of step `{sname}`"))
            });
            guard = Some(e);
        }

        // Emits.
        let mut emits = Vec::with_capacity(step.emits.len());
        for (i, em) in step.emits.iter().enumerate() {
            let ep = || sp(&format!("emits/{i}"));
            let target = event_id(em.event());
            if target.is_none() {
                ctx.unknown_event(
                    em.event(),
                    ep(),
                    &format!("event emitted by step `{sname}`"),
                );
            }
            let mut when = None;
            let mut data = None;
            if let Emit::Shaped(s) = em {
                if let Some(w) = &s.when {
                    let at = || {
                        (
                            format!("{}/when", ep()),
                            format!("the `when` of step `{sname}`"),
                        )
                    };
                    if let Some(e) = ctx.compile(w, &at) {
                        ctx.check_constant_bool(&e, &at);
                        when = Some(e);
                    }
                }
                if let Some(d) = &s.data {
                    if let Some(schema) = target.and_then(|e| event_schemas[e as usize].as_ref()) {
                        let event = em.event();
                        check_literal(
                            &mut ctx,
                            schema,
                            d,
                            (Code::DataMismatch, format!("{}/data", ep())),
                            &format!(
                                "the data step `{sname}` emits on `{event}` does not match the event's schema"
                            ),
                            &format!("see the `schema` of event `{event}`"),
                        );
                    }
                    data = ctx.template(d, &|| {
                        (
                            format!("{}/data", ep()),
                            format!("the emit data of step `{sname}`"),
                        )
                    });
                }
            }
            if let Some(event) = target {
                emits.push(EmitNode { event, when, data });
            }
        }

        // Policy.
        if let Some(r) = &step.retry
            && (r.max > 1000
                || !r.multiplier.is_finite()
                || r.multiplier < 1.0
                || r.backoff_ms > 86_400_000)
        {
            ctx.push(
                    Finding::new(
                        Code::InvalidPolicy,
                        Severity::Error,
                        sp("retry"),
                        format!(
                            "step `{sname}` has retry max {} / backoff_ms {} / multiplier {}; allowed: max ≤ 1000, backoff_ms ≤ 86400000, 1 ≤ multiplier (finite)",
                            r.max, r.backoff_ms, r.multiplier
                        ),
                    )
                    .hint("e.g. {\"max\": 3, \"backoff_ms\": 200, \"multiplier\": 2}"),
                );
        }
        if step.timeout_ms == Some(0) {
            ctx.push(
                Finding::new(
                    Code::InvalidPolicy,
                    Severity::Error,
                    sp("timeout_ms"),
                    format!("step `{sname}` has a zero timeout"),
                )
                .hint("give the action at least 1 ms, or remove `timeout_ms`"),
            );
        }
        if let Some(a) = &step.approval {
            if a.timeout_ms == Some(0) {
                ctx.push(
                    Finding::new(
                        Code::InvalidPolicy,
                        Severity::Error,
                        sp("approval"),
                        format!("step `{sname}` waits 0 ms for its approval"),
                    )
                    .hint("give people time to decide (e.g. `\"timeout_ms\": 3600000`), or remove `timeout_ms` to wait until someone does"),
                );
            }
            if step.timeout_ms.is_some() {
                ctx.push(
                    Finding::new(
                        Code::InvalidPolicy,
                        Severity::Warning,
                        sp("timeout_ms"),
                        format!(
                            "step `{sname}` needs an approval and has `timeout_ms`: the wait for the decision counts towards it"
                        ),
                    )
                    .hint("bound the wait with `approval.timeout_ms` and remove the step's `timeout_ms`"),
                );
            }
        }
        let on_fail = match &step.on_fail {
            None | Some(OnFail::Abort) => FailPolicy::Abort,
            Some(OnFail::Continue) => FailPolicy::Continue,
            Some(OnFail::Repair) => FailPolicy::Repair,
            Some(OnFail::Emit(e)) => match event_id(e) {
                Some(id) => FailPolicy::Emit(id),
                None => {
                    ctx.unknown_event(
                        e,
                        sp("on_fail"),
                        &format!("`on_fail` target of step `{sname}`"),
                    );
                    FailPolicy::Abort
                }
            },
        };
        let failed_event = event_id(&format!("{sname}.failed"));
        let denied_event = event_id(&format!("{sname}.denied"));

        let names: Vec<&str> = step.on.iter().map(String::as_str).collect();
        check_references(
            &mut ctx,
            sname,
            &names,
            guard.as_ref(),
            args.as_ref(),
            &emits,
        );
        if let Some(g) = guard.as_mut() {
            g.bind_names(names.iter().copied());
        }
        if let Some(a) = args.as_mut() {
            a.for_each_expr_mut(&mut |e| e.bind_names(names.iter().copied()));
        }
        for em in &mut emits {
            if let Some(w) = em.when.as_mut() {
                w.bind_names(names.iter().copied());
            }
            if let Some(d) = em.data.as_mut() {
                d.for_each_expr_mut(&mut |e| e.bind_names(names.iter().copied()));
            }
        }
        steps.push(StepNode {
            name: sname.clone(),
            inputs,
            action: step.action.clone(),
            args: args.unwrap_or(Template::Literal(Value::Null)),
            emits,
            guard,
            correlate: step.correlate,
            retry: step.retry.clone(),
            timeout_ms: step.timeout_ms,
            on_fail,
            failed_event,
            denied_event,
        });
    }

    if ctx.findings.iter().any(Finding::is_error) {
        let mut findings = ctx.findings;
        sort(&mut findings);
        return Validation {
            findings,
            net: None,
        };
    }
    let net = Net::build(plan, steps, event_schemas);
    structure(&mut ctx, &net);
    let mut findings = ctx.findings;
    sort(&mut findings);
    let net = if findings.iter().any(Finding::is_error) {
        None
    } else {
        Some(net)
    };
    Validation { findings, net }
}

/// String-literal keys the expression reads from the `inputs` map: `inputs["a.b"]` and
/// `inputs.a` (unless a comprehension rebinds `inputs`, when nothing is reported).
fn input_keys(e: &Expr) -> Vec<String> {
    use cel::common::ast::{EntryExpr, Expr as E, LiteralValue};
    let mut keys: Vec<String> = Vec::new();
    let mut stack: Vec<&cel::common::ast::Expr> = vec![e.ast()];
    let is_inputs = |x: &cel::IdedExpr| matches!(&x.expr, E::Ident(n) if n == "inputs");
    while let Some(x) = stack.pop() {
        match x {
            E::Call(c) => {
                if c.func_name == cel::common::ast::operators::INDEX
                    && c.target.is_none()
                    && let [m, k] = c.args.as_slice()
                    && is_inputs(m)
                    && let E::Literal(LiteralValue::String(s)) = &k.expr
                    && !keys.iter().any(|x| x == &**s)
                {
                    keys.push(s.to_string());
                }
                if let Some(t) = &c.target {
                    stack.push(&t.expr);
                }
                stack.extend(c.args.iter().map(|a| &a.expr));
            }
            E::Select(sel) => {
                // `has(inputs.x)` tests presence: a legitimate question about any key.
                if !sel.test && is_inputs(&sel.operand) && !keys.contains(&sel.field) {
                    keys.push(sel.field.clone());
                }
                stack.push(&sel.operand.expr);
            }
            E::Comprehension(c) => {
                if c.iter_var == "inputs"
                    || c.accu_var == "inputs"
                    || c.iter_var2.as_deref() == Some("inputs")
                {
                    return Vec::new();
                }
                stack.extend([
                    &c.iter_range.expr,
                    &c.accu_init.expr,
                    &c.loop_cond.expr,
                    &c.loop_step.expr,
                    &c.result.expr,
                ]);
            }
            E::List(l) => stack.extend(l.elements.iter().map(|a| &a.expr)),
            E::Map(m) => {
                for en in &m.entries {
                    if let EntryExpr::MapEntry(me) = &en.expr {
                        stack.push(&me.key.expr);
                        stack.push(&me.value.expr);
                    }
                }
            }
            E::Struct(st) => {
                for en in &st.entries {
                    if let EntryExpr::StructField(f) = &en.expr {
                        stack.push(&f.value.expr);
                    }
                }
            }
            _ => {}
        }
    }
    keys
}

/// Every name an expression reads must be one of the step's inputs (or `inputs`,
/// `instance`, `plan`, and `result` in emits). A misspelt or missing input would otherwise
/// make a guard silently never hold, or fail every firing at run time.
fn check_references(
    ctx: &mut Ctx<'_>,
    sname: &str,
    inputs: &[&str],
    guard: Option<&Expr>,
    args: Option<&Template>,
    emits: &[EmitNode],
) {
    let report = |ctx: &mut Ctx<'_>, e: &Expr, pointer: String, what: &str, result_ok: bool| {
        for name in e.free_variables() {
            let known = matches!(name.as_str(), "inputs" | "instance" | "plan")
                || (result_ok && name == "result")
                || inputs.contains(&name.as_str());
            if known {
                continue;
            }
            let (message, hint) = if name == "result" {
                (
                    format!("{what} of step `{sname}` uses `result`, which only exists once the action has run"),
                    "use `result` in `emits` (`when` / `data`); guards and args see the input events".to_string(),
                )
            } else {
                let listed = inputs
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                (
                    format!(
                        "{what} of step `{sname}` refers to `{name}`, which is not one of its inputs ({listed})"
                    ),
                    format!(
                        "add `{name}` to the step's `on`, or read an input; an event whose name is not an identifier is `inputs[\"name\"]`"
                    ),
                )
            };
            ctx.push(
                Finding::new(
                    Code::UnknownReference,
                    Severity::Error,
                    pointer.clone(),
                    message,
                )
                .hint(hint),
            );
        }
        // `inputs["email.recieved"]` (or `inputs.x`) must name an input too.
        for key in input_keys(e) {
            if inputs.contains(&key.as_str()) {
                continue;
            }
            let listed = inputs
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            let close = suggest(&key, inputs.iter().copied())
                .map(|n| format!("did you mean `inputs[\"{n}\"]`? "))
                .unwrap_or_default();
            ctx.push(
                Finding::new(
                    Code::UnknownReference,
                    Severity::Error,
                    pointer.clone(),
                    format!(
                        "{what} of step `{sname}` reads `inputs[\"{key}\"]`, but `{key}` is not one of its inputs ({listed})"
                    ),
                )
                .hint(format!(
                    "{close}`inputs` holds exactly the events in the step's `on`; add `{key}` there or fix the name"
                )),
            );
        }
    };
    if let Some(g) = guard {
        report(ctx, g, step_ptr(sname, "guard"), "the guard", false);
    }
    if let Some(a) = args {
        let mut exprs = Vec::new();
        a.for_each_expr(&mut |e| exprs.push(e.clone()));
        for e in exprs {
            report(ctx, &e, step_ptr(sname, "args"), "the args", false);
        }
    }
    for (i, em) in emits.iter().enumerate() {
        if let Some(w) = &em.when {
            report(
                ctx,
                w,
                step_ptr(sname, &format!("emits/{i}/when")),
                "a `when`",
                true,
            );
        }
        if let Some(d) = &em.data {
            let mut exprs = Vec::new();
            d.for_each_expr(&mut |e| exprs.push(e.clone()));
            for e in exprs {
                report(
                    ctx,
                    &e,
                    step_ptr(sname, &format!("emits/{i}/data")),
                    "the emit data",
                    true,
                );
            }
        }
    }
}

fn sort(findings: &mut [Finding]) {
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
}

/// Checks literal args against the tool's schema (see [`check_literal`]).
fn check_args(
    ctx: &mut Ctx<'_>,
    validator: &crate::schema::Schema,
    args: &Value,
    sname: &str,
    action: &str,
) {
    check_literal(
        ctx,
        validator,
        args,
        (Code::ArgsMismatch, step_ptr(sname, "args")),
        &format!("args of step `{sname}` do not match tool `{action}`"),
        &format!("see the args schema of `{action}` (`weft tools`)"),
    );
}

/// Checks the literal parts of a template (args, emit data) against a schema, a finding of
/// `code` under pointer `base` for each of the first five mismatches. Templated values are
/// unknown until run time, so they are replaced by `null` and errors located at or under
/// them are ignored.
fn check_literal(
    ctx: &mut Ctx<'_>,
    validator: &crate::schema::Schema,
    template: &Value,
    (code, base): (Code, String),
    what: &str,
    hint: &str,
) {
    let mut templated = Vec::new();
    let concrete = blank_templates(template, "", &mut templated);
    let mut reported = 0;
    for err in validator.mismatches(&concrete) {
        let at = err.at().to_owned();
        if templated
            .iter()
            .any(|t| at == *t || at.starts_with(&format!("{t}/")))
        {
            continue;
        }
        if reported >= 5 {
            break;
        }
        reported += 1;
        let msg = err.to_string();
        ctx.push(
            Finding::new(
                code,
                Severity::Error,
                format!("{base}{at}"),
                format!("{what}: {}", truncate(&msg, 200)),
            )
            .hint(hint),
        );
    }
}

fn blank_templates(v: &Value, pointer: &str, out: &mut Vec<String>) -> Value {
    match v {
        Value::String(s) if s.contains("${") => {
            out.push(pointer.to_string());
            Value::Null
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| blank_templates(x, &format!("{pointer}/{i}"), out))
                .collect(),
        ),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    (
                        k.clone(),
                        blank_templates(x, &format!("{pointer}/{}", escape_pointer(k)), out),
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Structural checks on the compiled net: reachability of steps, unused events, cycles.
fn structure(ctx: &mut Ctx<'_>, net: &Net) {
    let plan = ctx.plan;
    // Events that can ever hold a token, and steps that can ever be enabled (a fixpoint).
    let n_events = net.events.len();
    let mut producible = vec![false; n_events];
    for &i in &net.initial {
        producible[i as usize] = true;
    }
    for (i, e) in net.events.iter().enumerate() {
        if plan.events.get(&e.name).and_then(|d| d.kind) == Some(EventKind::Input) {
            producible[i] = true;
        }
    }
    let mut enabled = vec![false; net.steps.len()];
    let mut changed = true;
    while changed {
        changed = false;
        for (sid, s) in net.steps.iter().enumerate() {
            if enabled[sid] || !s.inputs.iter().all(|&e| producible[e as usize]) {
                continue;
            }
            enabled[sid] = true;
            changed = true;
            for em in &s.emits {
                producible[em.event as usize] = true;
            }
            if let FailPolicy::Emit(e) = s.on_fail {
                producible[e as usize] = true;
            }
            for e in [s.failed_event, s.denied_event].into_iter().flatten() {
                producible[e as usize] = true;
            }
        }
    }
    for (sid, s) in net.steps.iter().enumerate() {
        if enabled[sid] {
            continue;
        }
        let missing: Vec<&str> = s
            .inputs
            .iter()
            .filter(|&&e| !producible[e as usize])
            .map(|&e| net.event(e).name.as_str())
            .collect();
        ctx.push(
            Finding::new(
                Code::NeverEnabled,
                Severity::Error,
                step_ptr(&s.name, "on"),
                format!(
                    "step `{}` can never be enabled: no token can ever reach {}",
                    s.name,
                    missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                ),
            )
            .hint("emit the missing event from an earlier step, mark it `kind: input`, or list it in `initial`"),
        );
    }

    let explicit_outputs = plan
        .events
        .values()
        .any(|d| d.kind == Some(EventKind::Output));
    for (eid, e) in net.events.iter().enumerate() {
        let declared = plan.events.get(&e.name).and_then(|d| d.kind);
        let is_initial = net.initial.contains(&(eid as EventId));
        if e.producers.is_empty() && !is_initial && declared != Some(EventKind::Input) {
            ctx.push(
                Finding::new(
                    Code::NeverEmitted,
                    Severity::Warning,
                    event_ptr(&e.name),
                    format!("event `{}` is emitted by no step and is not an input or initial event", e.name),
                )
                .hint("emit it from a step, declare `\"kind\": \"input\"` if it comes from outside, or remove it"),
            );
        }
        if e.consumers.is_empty() && declared != Some(EventKind::Output) {
            let (sev, msg) = if explicit_outputs {
                (
                    Severity::Warning,
                    format!(
                        "event `{}` is consumed by no step and is not declared `output`",
                        e.name
                    ),
                )
            } else {
                (
                    Severity::Info,
                    format!(
                        "event `{}` is consumed by no step, so it is treated as an output",
                        e.name
                    ),
                )
            };
            ctx.push(
                Finding::new(Code::NeverConsumed, sev, event_ptr(&e.name), msg)
                    .hint("declare `\"kind\": \"output\"` if it is a final result, or consume it in a step"),
            );
        }
    }

    if net.graph_type == GraphType::Acyclic {
        for cycle in find_cycles(net) {
            let first = cycle.first().map(|(s, _)| *s).unwrap_or(0);
            let desc: Vec<String> = cycle
                .iter()
                .map(|(s, e)| format!("`{}` → `{}`", net.step(*s).name, net.event(*e).name))
                .collect();
            ctx.push(
                Finding::new(
                    Code::Cycle,
                    Severity::Error,
                    step_ptr(&net.step(first).name, "emits"),
                    format!("acyclic plan has a cycle: {}", desc.join(" → ")),
                )
                .hint("break the cycle, or set `\"graph_type\": \"reactive\"` if the plan is meant to loop"),
            );
        }
    }
}

/// A DFS frame: the step, its successors, and how many of them were visited.
type Frame = (usize, Vec<(u32, EventId)>, usize);

/// Finds cycles in the step graph (step → emitted event → consuming step), one per strongly
/// connected component, each as the list of (step, event it emits on the cycle).
fn find_cycles(net: &Net) -> Vec<Vec<(u32, EventId)>> {
    let n = net.steps.len();
    let succ = |s: usize| -> Vec<(u32, EventId)> {
        let st = &net.steps[s];
        let mut out_events: Vec<EventId> = st.emits.iter().map(|e| e.event).collect();
        if let FailPolicy::Emit(e) = st.on_fail {
            out_events.push(e);
        }
        out_events.extend([st.failed_event, st.denied_event].into_iter().flatten());
        let mut v = Vec::new();
        for e in out_events {
            for &c in &net.event(e).consumers {
                v.push((c, e));
            }
        }
        v
    };
    // Iterative Tarjan SCC.
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0usize;
    let mut sccs: Vec<Vec<usize>> = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut call: Vec<Frame> = vec![(root, succ(root), 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(top) = call.last_mut() {
            let v = top.0;
            if top.2 < top.1.len() {
                let w = top.1[top.2].0 as usize;
                top.2 += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, succ(w), 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(parent) = call.last() {
                    let p = parent.0;
                    low[p] = low[p].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    let self_loop =
                        comp.len() == 1 && succ(v).iter().any(|(c, _)| *c as usize == v);
                    if comp.len() > 1 || self_loop {
                        sccs.push(comp);
                    }
                }
            }
        }
    }
    // For each SCC, walk a concrete cycle inside it starting from its smallest step.
    sccs.into_iter()
        .map(|mut comp| {
            comp.sort_unstable();
            let members: HashSet<usize> = comp.iter().copied().collect();
            let start = comp[0];
            let mut path: Vec<(u32, EventId)> = Vec::new();
            let mut pos: HashMap<usize, usize> = HashMap::new();
            let mut cur = start;
            loop {
                if let Some(&at) = pos.get(&cur) {
                    return path.split_off(at);
                }
                pos.insert(cur, path.len());
                let Some(&(nxt, e)) = succ(cur)
                    .iter()
                    .find(|(c, _)| members.contains(&(*c as usize)))
                else {
                    return path;
                };
                path.push((cur as u32, e));
                cur = nxt as usize;
            }
        })
        .collect()
}
