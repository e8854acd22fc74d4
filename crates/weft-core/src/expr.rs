//! CEL expressions and `${…}` templates: compiled once when a plan is validated, evaluated
//! against a binding when a step fires.
//!
//! Guards, `when` conditions and the templated strings in `args` / `emits[].data` all use CEL
//! (DESIGN.md, "Plan format"). Evaluation never panics: an error is a value the caller turns
//! into "not enabled" (guards) or an error token (args), never a crash.
//!
//! Most expressions a plan holds only read a field of an input (`${order.id}`,
//! `${start.items}`): such a *path* is read straight from the JSON payload, without building
//! a CEL context or converting the payload to CEL values and back (docs/performance.md,
//! tool sources: what the engine adds to a call). Only a path
//! that resolves is read so; anything else (a missing key, a value that is not an object)
//! is evaluated by CEL, so its result and its error are CEL's.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

/// CEL words that cannot name a variable, so an event with such a name is only reachable
/// through the `inputs` map.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
    "inputs",
    "result",
    "instance",
    "plan",
];

/// Type identifiers CEL predefines (`type(x) == int`); never undeclared references.
const CEL_TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// Is `name` usable as a CEL variable for an event's payload?
pub fn is_bindable_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && !RESERVED.contains(&name)
}

fn env() -> &'static Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = cel::Env::stdlib();
        crate::cel_budget::register(&mut env);
        Arc::new(env)
    })
}

/// Deepest expression nesting the parser accepts (protects the stack from `((((…`).
const MAX_DEPTH: u16 = 64;

/// Longest expression source accepted by [`Expr::compile`] whatever the configured limits.
const MAX_SOURCE: usize = 64 * 1024;

/// Depth of an expression tree, computed without recursion (evaluation recurses, so deep
/// trees must be refused before they are ever evaluated).
fn ast_depth(root: &cel::IdedExpr) -> usize {
    use cel::common::ast::{EntryExpr, Expr as E};
    let mut max = 0;
    let mut stack: Vec<(&cel::IdedExpr, usize)> = vec![(root, 1)];
    while let Some((e, d)) = stack.pop() {
        max = max.max(d);
        if d > MAX_DEPTH as usize {
            break;
        }
        match &e.expr {
            E::Call(c) => {
                if let Some(t) = &c.target {
                    stack.push((t, d + 1));
                }
                stack.extend(c.args.iter().map(|a| (a, d + 1)));
            }
            E::Comprehension(c) => {
                for x in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    stack.push((x, d + 1));
                }
            }
            E::List(l) => stack.extend(l.elements.iter().map(|x| (x, d + 1))),
            E::Map(m) => {
                for en in &m.entries {
                    if let EntryExpr::MapEntry(me) = &en.expr {
                        stack.push((&me.key, d + 1));
                        stack.push((&me.value, d + 1));
                    }
                }
            }
            E::Struct(st) => {
                for en in &st.entries {
                    if let EntryExpr::StructField(f) = &en.expr {
                        stack.push((&f.value, d + 1));
                    }
                }
            }
            E::Select(sel) => stack.push((&sel.operand, d + 1)),
            _ => {}
        }
    }
    max
}

/// Drops an expression tree without recursion (a refused tree may be thousands deep).
fn dismantle(root: cel::IdedExpr) {
    use cel::common::ast::{EntryExpr, Expr as E};
    let mut stack = vec![root];
    while let Some(mut e) = stack.pop() {
        match &mut e.expr {
            E::Call(c) => {
                if let Some(t) = c.target.take() {
                    stack.push(*t);
                }
                stack.append(&mut c.args);
            }
            E::Comprehension(c) => {
                for x in [
                    &mut c.iter_range,
                    &mut c.accu_init,
                    &mut c.loop_cond,
                    &mut c.loop_step,
                    &mut c.result,
                ] {
                    stack.push(std::mem::take(x));
                }
            }
            E::List(l) => stack.append(&mut l.elements),
            E::Map(m) => {
                for en in &mut m.entries {
                    if let EntryExpr::MapEntry(me) = &mut en.expr {
                        stack.push(std::mem::take(&mut me.key));
                        stack.push(std::mem::take(&mut me.value));
                    }
                }
            }
            E::Struct(st) => {
                for en in &mut st.entries {
                    if let EntryExpr::StructField(f) = &mut en.expr {
                        stack.push(std::mem::take(&mut f.value));
                    }
                }
            }
            E::Select(sel) => stack.push(std::mem::take(&mut *sel.operand)),
            _ => {}
        }
    }
}

/// A compiled CEL expression.
#[derive(Clone)]
pub struct Expr {
    source: Arc<str>,
    program: Arc<cel::IdedExpr>,
    /// Variables the expression mentions, so evaluation binds only those.
    uses: Uses,
    /// Has comprehensions, instrumented to charge the evaluation budget (`cel_budget.rs`).
    metered: bool,
    /// The expression is a path `name.field.field…` (no `has()`, no index): the root name,
    /// then the fields, read from the JSON payload directly ([`Expr::read_path`]).
    path: Option<Arc<[String]>>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

#[derive(Debug, Clone, Default)]
struct Uses {
    inputs: bool,
    result: bool,
    instance: bool,
    plan: bool,
    fresh: bool,
    /// Indices into the binding's inputs whose names the expression mentions.
    names: Vec<String>,
}

/// A compile error: the CEL parser's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    /// What is wrong with the expression.
    pub message: String,
}

/// An evaluation error: the expression could not be evaluated against this binding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    /// What went wrong.
    pub message: String,
    /// The evaluation ran out of its budget ([`crate::cel_budget::Budget`]) or was
    /// interrupted: the expression does too much work, whatever its inputs were.
    pub exhausted: bool,
}

impl EvalError {
    fn new(message: impl Into<String>) -> Self {
        EvalError {
            message: message.into(),
            exhausted: false,
        }
    }

    fn exhausted() -> Self {
        let b = crate::cel_budget::effective();
        EvalError {
            message: format!(
                "{} (at most {} operations and {} units of values built in loops); \
                 iterate over less, or nest fewer comprehensions",
                crate::cel_budget::EXHAUSTED,
                b.max_cost,
                b.max_size
            ),
            exhausted: true,
        }
    }
}

/// What an expression can see: the binding's input payloads and the surrounding ids.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// `(event name, token payload)` for each input of the step.
    pub inputs: &'a [(&'a str, &'a Value)],
    /// The action's result (`None` in guards and args).
    pub result: Option<&'a Value>,
    /// The instance id.
    pub instance: &'a str,
    /// The plan name.
    pub plan: &'a str,
    /// The channel id `fresh()` returns in this firing.
    pub fresh: &'a str,
}

impl Expr {
    /// Compiles `source`. A surrounding `${…}` is accepted and stripped.
    pub fn compile(source: &str) -> Result<Expr, CompileError> {
        let trimmed = source.trim();
        let body = trimmed
            .strip_prefix("${")
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(trimmed);
        if body.len() > MAX_SOURCE {
            return Err(CompileError {
                message: format!(
                    "expression is {} bytes, over the hard limit of {MAX_SOURCE}",
                    body.len()
                ),
            });
        }
        if body.trim().is_empty() {
            return Err(CompileError {
                message: "expression is empty".into(),
            });
        }
        // The `cel` crate's hand-written Pratt parser: the same AST (macros expanded) as its
        // ANTLR parser at a fraction of the cost (validation compiles every expression of a
        // plan). A panic inside it is caught so hostile input can never take the process down.
        let parsed = std::panic::catch_unwind(|| {
            cel::parser::PrattParser::new()
                .max_recursion_depth(MAX_DEPTH)
                .parse(body)
        });
        let program = match parsed {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                let message = e
                    .errors
                    .iter()
                    .map(|e| e.msg.clone())
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(CompileError { message });
            }
            Err(_) => {
                return Err(CompileError {
                    message: "expression could not be parsed".into(),
                });
            }
        };
        if ast_depth(&program) > MAX_DEPTH as usize {
            dismantle(program);
            return Err(CompileError {
                message: format!("expression nests deeper than {MAX_DEPTH} levels"),
            });
        }
        let metered = crate::cel_budget::has_loop(&program);
        let mut program = program;
        if metered {
            crate::cel_budget::instrument(&mut program);
        }
        let refs = program.references();
        let uses = Uses {
            inputs: refs.has_variable("inputs"),
            result: refs.has_variable("result"),
            instance: refs.has_variable("instance"),
            plan: refs.has_variable("plan"),
            fresh: refs.has_function("fresh"),
            names: Vec::new(),
        };
        let path = path_of(&program.expr);
        Ok(Expr {
            source: Arc::from(body),
            program: Arc::new(program),
            uses,
            metered,
            path,
        })
    }

    /// The value a path expression reads, when the path resolves: its root is a bound input
    /// (as [`Expr::eval_cel`] binds them: the first input of that name) and every field is a
    /// key of an object. `None`: not a path, or CEL decides (and reports the error).
    fn read_path<'s>(&self, scope: &Scope<'s>) -> Option<&'s Value> {
        let (root, fields) = self.path.as_deref()?.split_first()?;
        if !self.uses.names.iter().any(|n| n == root) {
            return None;
        }
        let mut v: &'s Value = scope.inputs.iter().find(|(n, _)| n == root)?.1;
        for f in fields {
            v = v.as_object()?.get(f.as_str())?;
        }
        Some(v)
    }

    /// Records which of `names` (the step's input events) the expression mentions, so that
    /// evaluation binds only those.
    pub fn bind_names<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        let refs = self.program.references();
        self.uses.names = names
            .into_iter()
            .filter(|n| is_bindable_name(n) && refs.has_variable(n))
            .map(str::to_string)
            .collect();
    }

    /// Top-level names the expression reads (identifiers not bound by a comprehension such
    /// as `items.all(i, i > 0)`), in first-seen order.
    pub fn free_variables(&self) -> Vec<String> {
        use cel::common::ast::Expr as E;
        let mut seen = Vec::new();
        let mut bound: Vec<&str> = Vec::new();
        let mut stack: Vec<&cel::IdedExpr> = vec![&self.program];
        while let Some(e) = stack.pop() {
            match &e.expr {
                E::Ident(n) if !seen.contains(n) => seen.push(n.clone()),
                E::Comprehension(c) => {
                    bound.push(&c.iter_var);
                    if let Some(v) = &c.iter_var2 {
                        bound.push(v);
                    }
                    bound.push(&c.accu_var);
                }
                _ => {}
            }
            crate::cel_budget::push_children(e, &mut stack);
        }
        seen.retain(|n| {
            !bound.contains(&n.as_str())
                && !n.starts_with('@')
                && !CEL_TYPE_NAMES.contains(&n.as_str())
        });
        seen
    }

    /// Does the expression mention the variable `name`?
    pub fn mentions(&self, name: &str) -> bool {
        self.program.references().has_variable(name)
    }

    /// Does the expression contain a comprehension (so that its evaluation is metered)?
    pub fn is_metered(&self) -> bool {
        self.metered
    }

    /// Does the expression call `fresh()`?
    pub fn uses_fresh(&self) -> bool {
        self.uses.fresh
    }

    /// The expression's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The parsed expression tree (for static analysis such as equality-guard indexing).
    pub fn ast(&self) -> &cel::common::ast::Expr {
        &self.program.expr
    }

    /// Evaluates the expression to JSON.
    pub fn eval(&self, scope: &Scope<'_>) -> Result<Value, EvalError> {
        if let Some(v) = self.read_path(scope) {
            return Ok(v.clone());
        }
        let v = self.eval_cel(scope)?;
        v.json()
            .map_err(|e| EvalError::new(format!("result cannot be turned into JSON: {e:?}")))
    }

    /// Evaluates the expression as a boolean; anything but `true`/`false` is an error.
    pub fn eval_bool(&self, scope: &Scope<'_>) -> Result<bool, EvalError> {
        if let Some(Value::Bool(b)) = self.read_path(scope) {
            return Ok(*b);
        }
        match self.eval_cel(scope)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(EvalError::new(format!(
                "expression must be a boolean, got {:?}",
                other.type_of()
            ))),
        }
    }

    fn eval_cel(&self, scope: &Scope<'_>) -> Result<cel::Value, EvalError> {
        let mut ctx = cel::Context::with_env(Arc::clone(env()));
        for name in &self.uses.names {
            if let Some((_, v)) = scope.inputs.iter().find(|(n, _)| n == name) {
                ctx.add_variable_from_value(name.as_str(), to_cel(v));
            }
        }
        if self.uses.inputs {
            let map: std::collections::HashMap<cel::objects::Key, cel::Value> = scope
                .inputs
                .iter()
                .map(|(n, v)| {
                    (
                        cel::objects::Key::String(Arc::new((*n).to_string())),
                        to_cel(v),
                    )
                })
                .collect();
            ctx.add_variable_from_value(
                "inputs",
                cel::Value::Map(cel::objects::Map { map: Arc::new(map) }),
            );
        }
        if self.uses.result {
            ctx.add_variable_from_value("result", scope.result.map_or(cel::Value::Null, to_cel));
        }
        if self.uses.instance {
            ctx.add_variable_from_value("instance", scope.instance.to_string());
        }
        if self.uses.plan {
            ctx.add_variable_from_value("plan", scope.plan.to_string());
        }
        if self.uses.fresh {
            let id = Arc::new(scope.fresh.to_string());
            ctx.add_function("fresh", move || cel::Value::String(Arc::clone(&id)))
                .map_err(|e| EvalError::new(format!("{e:?}")))?;
        }
        let program = &self.program;
        if self.metered {
            crate::cel_budget::start();
        }
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cel::Value::resolve(program, &ctx)
        }));
        // An exhausted budget wins over whatever the expression made of the failing
        // operation (`exists` may absorb an error), so the outcome is the same on every run.
        if self.metered && crate::cel_budget::exhausted() {
            return Err(EvalError::exhausted());
        }
        match out {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(EvalError::new(e.to_string())),
            Err(_) => Err(EvalError::new("expression evaluation failed unexpectedly")),
        }
    }
}

/// `name.field.field…` as names, root first, if `e` is only that: an identifier under
/// plain field selections (not `has()`, which tests rather than reads).
fn path_of(e: &cel::common::ast::Expr) -> Option<Arc<[String]>> {
    use cel::common::ast::Expr as E;
    let mut fields = Vec::new();
    let mut e = e;
    loop {
        match e {
            E::Select(s) if !s.test => {
                fields.push(s.field.clone());
                e = &s.operand.expr;
            }
            E::Ident(root) => {
                fields.push(root.clone());
                fields.reverse();
                return Some(fields.into());
            }
            _ => return None,
        }
    }
}

/// Converts JSON to a CEL value. Integers become CEL `int` whenever they fit (serde would
/// make non-negative ones `uint`, and then `x.n + 1` fails with a type error).
pub fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: std::collections::HashMap<cel::objects::Key, cel::Value> = m
                .iter()
                .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
    }
}

/// A JSON value whose strings may contain `${…}` CEL templates.
#[derive(Debug, Clone)]
pub enum Template {
    /// No templates inside: the value is used as is.
    Literal(Value),
    /// A string that is exactly `"${expr}"`: replaced by the expression's value (any type).
    Whole(Expr),
    /// A string with `${…}` inside: each part is interpolated as text.
    Interp(Vec<Part>),
    /// An array containing templates.
    Array(Vec<Template>),
    /// An object containing templates.
    Object(Vec<(String, Template)>),
}

/// A piece of an interpolated string.
#[derive(Debug, Clone)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// An expression whose value is rendered as text.
    Expr(Expr),
}

/// A template compile error, located by a JSON pointer relative to the template's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Pointer relative to the template root (`""` for the root itself).
    pub pointer: String,
    /// The offending expression text.
    pub source: String,
    /// What is wrong.
    pub error: CompileError,
}

impl Template {
    /// Compiles every `${…}` inside `value`.
    pub fn compile(value: &Value) -> Result<Template, Vec<TemplateError>> {
        let mut errors = Vec::new();
        let t = compile_value(value, "", &mut errors, &mut |src| Expr::compile(src));
        if errors.is_empty() {
            Ok(t)
        } else {
            Err(errors)
        }
    }

    /// Like [`Template::compile`], compiling each expression with `compile` (e.g. a cache).
    pub fn compile_with(
        value: &Value,
        compile: &mut dyn FnMut(&str) -> Result<Expr, CompileError>,
    ) -> Result<Template, Vec<TemplateError>> {
        let mut errors = Vec::new();
        let t = compile_value(value, "", &mut errors, compile);
        if errors.is_empty() {
            Ok(t)
        } else {
            Err(errors)
        }
    }

    /// Is the template free of expressions?
    pub fn is_literal(&self) -> bool {
        matches!(self, Template::Literal(_))
    }

    /// Calls `f` on every expression inside.
    pub fn for_each_expr_mut(&mut self, f: &mut impl FnMut(&mut Expr)) {
        match self {
            Template::Literal(_) => {}
            Template::Whole(e) => f(e),
            Template::Interp(parts) => {
                for p in parts {
                    if let Part::Expr(e) = p {
                        f(e);
                    }
                }
            }
            Template::Array(items) => items.iter_mut().for_each(|t| t.for_each_expr_mut(f)),
            Template::Object(fields) => fields.iter_mut().for_each(|(_, t)| t.for_each_expr_mut(f)),
        }
    }

    /// Calls `f` on every expression inside.
    pub fn for_each_expr(&self, f: &mut impl FnMut(&Expr)) {
        match self {
            Template::Literal(_) => {}
            Template::Whole(e) => f(e),
            Template::Interp(parts) => {
                for p in parts {
                    if let Part::Expr(e) = p {
                        f(e);
                    }
                }
            }
            Template::Array(items) => items.iter().for_each(|t| t.for_each_expr(f)),
            Template::Object(fields) => fields.iter().for_each(|(_, t)| t.for_each_expr(f)),
        }
    }

    /// Renders the template against a scope.
    pub fn render(&self, scope: &Scope<'_>) -> Result<Value, EvalError> {
        match self {
            Template::Literal(v) => Ok(v.clone()),
            Template::Whole(e) => e.eval(scope),
            Template::Interp(parts) => {
                let mut s = String::new();
                for p in parts {
                    match p {
                        Part::Text(t) => s.push_str(t),
                        Part::Expr(e) => match e.eval(scope)? {
                            Value::String(v) => s.push_str(&v),
                            other => s.push_str(&other.to_string()),
                        },
                    }
                }
                Ok(Value::String(s))
            }
            Template::Array(items) => items
                .iter()
                .map(|t| t.render(scope))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Template::Object(fields) => {
                let mut m = serde_json::Map::with_capacity(fields.len());
                for (k, t) in fields {
                    m.insert(k.clone(), t.render(scope)?);
                }
                Ok(Value::Object(m))
            }
        }
    }
}

/// Compiles one expression; lets callers cache compilations by source.
type Compiler<'c> = dyn FnMut(&str) -> Result<Expr, CompileError> + 'c;

fn compile_value(
    value: &Value,
    pointer: &str,
    errors: &mut Vec<TemplateError>,
    compile: &mut Compiler<'_>,
) -> Template {
    match value {
        Value::String(s) if s.contains("${") => compile_string(s, pointer, errors, compile),
        Value::Array(items) => {
            let ts: Vec<Template> = items
                .iter()
                .enumerate()
                .map(|(i, v)| compile_value(v, &format!("{pointer}/{i}"), errors, compile))
                .collect();
            if ts.iter().all(Template::is_literal) {
                Template::Literal(value.clone())
            } else {
                Template::Array(ts)
            }
        }
        Value::Object(map) => {
            let ts: Vec<(String, Template)> = map
                .iter()
                .map(|(k, v)| {
                    let p = format!("{pointer}/{}", crate::load::escape_pointer(k));
                    (k.clone(), compile_value(v, &p, errors, compile))
                })
                .collect();
            if ts.iter().all(|(_, t)| t.is_literal()) {
                Template::Literal(value.clone())
            } else {
                Template::Object(ts)
            }
        }
        other => Template::Literal(other.clone()),
    }
}

/// Splits a string into text and `${…}` parts. Braces inside an expression are balanced, and
/// quoted strings inside it are skipped, so `${ {"a": 1}.a }` works. `$${` is a literal `${`.
fn compile_string(
    s: &str,
    pointer: &str,
    errors: &mut Vec<TemplateError>,
    compile: &mut Compiler<'_>,
) -> Template {
    let mut parts = Vec::new();
    let mut text = String::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && bytes.get(i + 1) == Some(&b'$') && bytes.get(i + 2) == Some(&b'{') {
            text.push_str("${");
            i += 3;
            continue;
        }
        if bytes[i] == b'$' && bytes.get(i + 1) == Some(&b'{') {
            match find_close(bytes, i + 2) {
                Some(end) => {
                    let src = &s[i + 2..end];
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    match compile(src) {
                        Ok(e) => parts.push(Part::Expr(e)),
                        Err(error) => errors.push(TemplateError {
                            pointer: pointer.to_string(),
                            source: src.to_string(),
                            error,
                        }),
                    }
                    i = end + 1;
                    continue;
                }
                None => {
                    errors.push(TemplateError {
                        pointer: pointer.to_string(),
                        source: s[i..].to_string(),
                        error: CompileError {
                            message: "`${` is never closed by `}`".into(),
                        },
                    });
                    return Template::Literal(Value::String(s.to_string()));
                }
            }
        }
        // Push the whole UTF-8 character starting at i.
        let ch_len = utf8_len(bytes[i]);
        text.push_str(&s[i..(i + ch_len).min(s.len())]);
        i += ch_len;
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    match parts.len() {
        1 if matches!(parts[0], Part::Expr(_)) => match parts.pop() {
            Some(Part::Expr(e)) => Template::Whole(e),
            _ => Template::Literal(Value::String(s.to_string())),
        },
        _ if parts.iter().all(|p| matches!(p, Part::Text(_))) => {
            let joined: String = parts
                .into_iter()
                .map(|p| match p {
                    Part::Text(t) => t,
                    Part::Expr(_) => String::new(),
                })
                .collect();
            Template::Literal(Value::String(joined))
        }
        _ => Template::Interp(parts),
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// Index of the `}` closing an expression that starts at `start`.
fn find_close(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        if let Some(q) = quote {
            if b == b'\\' {
                i += 2;
                continue;
            }
            if b == q {
                quote = None;
            }
        } else {
            match b {
                b'"' | b'\'' => quote = Some(b),
                b'{' => depth += 1,
                b'}' if depth == 0 => return Some(i),
                b'}' => depth -= 1,
                _ => {}
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope<'a>(inputs: &'a [(&'a str, &'a Value)]) -> Scope<'a> {
        Scope {
            inputs,
            result: None,
            instance: "i1",
            plan: "p",
            fresh: "ch-1",
        }
    }

    /// A path read from the payload gives what CEL gives, and anything it cannot read is
    /// left to CEL (same value or same error).
    #[test]
    fn paths_read_as_cel_evaluates_them() {
        let start = json!({"n": 7, "neg": -3, "big": u64::MAX, "x": 1.5, "s": "é", "z": null,
            "ok": true, "no": false, "list": [1, {"a": 2}], "o": {"p": {"q": "deep"}, "r": 1}});
        let other = json!({"n": 1});
        let sources = [
            "start",
            "start.n",
            "start.neg",
            "start.big",
            "start.x",
            "start.s",
            "start.z",
            "start.ok",
            "start.list",
            "start.o",
            "start.o.p",
            "start.o.p.q",
            "other.n",
            // Not read as a path, or a path that does not resolve: CEL decides.
            "start.missing",
            "start.n.deeper",
            "start.z.a",
            "start.list.a",
            "has(start.n)",
            "start.n + 1",
            "start.list[1].a",
            "inputs.start.n",
            "unbound.n",
            "result.n",
            "instance",
            "start.o.p.missing",
        ];
        for src in sources {
            let mut e = Expr::compile(src).expect("compiles");
            e.bind_names(["start", "other"]);
            let inputs = [("start", &start), ("other", &other)];
            let sc = scope(&inputs);
            let cel = e
                .eval_cel(&sc)
                .map(|v| v.json().expect("json"))
                .map_err(|e| e.message);
            let fast = e.eval(&sc).map_err(|e| e.message);
            assert_eq!(fast, cel, "`{src}`");
            let cel_bool = match e.eval_cel(&sc) {
                Ok(cel::Value::Bool(b)) => Ok(b),
                Ok(_) => Err(()),
                Err(_) => Err(()),
            };
            assert_eq!(
                e.eval_bool(&sc).map_err(|_| ()),
                cel_bool,
                "`{src}` as a guard"
            );
        }
        // Which of them are read without CEL.
        let read = |src: &str| {
            let mut e = Expr::compile(src).expect("compiles");
            e.bind_names(["start"]);
            e.read_path(&scope(&[("start", &start)])).is_some()
        };
        assert!(read("start.o.p.q") && read("${ start.n }") && read("start"));
        assert!(!read("start.missing") && !read("has(start.n)") && !read("start.list[0]"));
        // A name the expression was not bound to is CEL's to refuse, even if an input has it.
        let e = Expr::compile("start.n").expect("compiles");
        assert!(e.read_path(&scope(&[("start", &start)])).is_none());
        assert!(e.eval(&scope(&[("start", &start)])).is_err());
        // `eval` reads a path itself: an object read whole keeps its key order (CEL's round
        // trip goes through a `HashMap`, which shuffles 24 keys all but surely).
        let wide: serde_json::Map<String, Value> =
            (0..24).map(|k| (format!("k{k}"), json!(k))).collect();
        let wide = json!({ "o": wide });
        let mut e = Expr::compile("start.o").expect("compiles");
        e.bind_names(["start"]);
        let got = e.eval(&scope(&[("start", &wide)])).expect("evals");
        assert_eq!(got.to_string(), wide["o"].to_string());
        // The first input of a name is the one read, as CEL binds it.
        let mut e = Expr::compile("start.n").expect("compiles");
        e.bind_names(["start"]);
        let twice = [("start", &other), ("start", &start)];
        assert_eq!(e.eval(&scope(&twice)).expect("evals"), json!(1));
    }

    #[test]
    fn guard_over_named_input() {
        let mut e = Expr::compile("reply.task_id == spawn.task_id").expect("compiles");
        e.bind_names(["reply", "spawn"]);
        let a = json!({"task_id": "x"});
        let b = json!({"task_id": "x"});
        let c = json!({"task_id": "y"});
        assert!(
            e.eval_bool(&scope(&[("reply", &a), ("spawn", &b)]))
                .expect("evals")
        );
        assert!(
            !e.eval_bool(&scope(&[("reply", &a), ("spawn", &c)]))
                .expect("evals")
        );
    }

    #[test]
    fn inputs_map_for_dotted_names() {
        let mut e = Expr::compile(r#"inputs["email.received"].n > 2"#).expect("compiles");
        e.bind_names(["email.received"]);
        let a = json!({"n": 3});
        assert!(
            e.eval_bool(&scope(&[("email.received", &a)]))
                .expect("evals")
        );
    }

    #[test]
    fn non_boolean_guard_is_an_error_not_a_panic() {
        let e = Expr::compile("1 + 1").expect("compiles");
        assert!(e.eval_bool(&scope(&[])).is_err());
        let e = Expr::compile("nope.field").expect("compiles");
        assert!(e.eval_bool(&scope(&[])).is_err());
    }

    #[test]
    fn compile_errors_are_reported() {
        assert!(Expr::compile("a ==").is_err());
        assert!(Expr::compile("").is_err());
        assert!(Expr::compile("${}").is_err());
    }

    #[test]
    fn templates_whole_and_interpolated() {
        let t = Template::compile(&json!({
            "to": "${user.email}",
            "subject": "Hello ${user.name}, you have ${user.n} items",
            "plain": "no templates",
            "chan": "${fresh()}",
            "esc": "$${literal}"
        }))
        .expect("compiles");
        let mut t = t;
        t.for_each_expr_mut(&mut |e| e.bind_names(["user"]));
        let user = json!({"email": "a@b.c", "name": "Ann", "n": 3});
        let out = t.render(&scope(&[("user", &user)])).expect("renders");
        assert_eq!(
            out,
            json!({"to": "a@b.c", "subject": "Hello Ann, you have 3 items", "plain": "no templates",
                   "chan": "ch-1", "esc": "${literal}"})
        );
    }

    #[test]
    fn unclosed_template_is_an_error() {
        let errs = Template::compile(&json!({"a": {"b": "x ${oops"}})).unwrap_err();
        assert_eq!(errs[0].pointer, "/a/b");
    }

    #[test]
    fn bindable_names() {
        assert!(is_bindable_name("reply"));
        assert!(is_bindable_name("_x1"));
        assert!(!is_bindable_name("email.received"));
        assert!(!is_bindable_name("in"));
        assert!(!is_bindable_name(""));
        assert!(!is_bindable_name("1a"));
    }
}

#[cfg(test)]
mod parser_equivalence {
    //! The Pratt parser must give the same results as the reference (ANTLR) parser.
    use super::*;
    use serde_json::json;

    #[test]
    fn pratt_and_reference_parsers_agree() {
        let corpus = [
            "a.x + 1 == 3",
            "a.x * 2 > 3 && !(b.y == 'q') || a.x in [1, 2, 3]",
            "size(a.items) >= 2 ? a.items[1] : 'none'",
            "inputs['a'].x - -4 % 3",
            "has(a.x) && a.items.exists(i, i > 1)",
            "a.items.map(i, i * 10)",
            "a.items.filter(i, i % 2 == 0).size()",
            "{'k': a.x, 'n': [1u, 2.5, null, true]}",
            "string(a.x) + \"-\" + 'str\\'s'",
            "a.s.startsWith('he') && a.s.contains('ll')",
            "int(a.f) / 2",
            "a.items.all(i, i > 0) == true",
        ];
        let a = json!({"x": 2, "items": [1, 2, 3, 4], "s": "hello", "f": 7.9});
        let b = json!({"y": "p"});
        let inputs = [("a", &a), ("b", &b)];
        for src in corpus {
            let mut e = Expr::compile(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            e.bind_names(["a", "b"]);
            let scope = Scope {
                inputs: &inputs,
                result: None,
                instance: "i",
                plan: "p",
                fresh: "f",
            };
            let ours = e.eval(&scope);
            let reference = env().compile(src).expect("reference parses");
            let mut ctx = cel::Context::with_env(Arc::clone(env()));
            ctx.add_variable_from_value("a", to_cel(&a));
            ctx.add_variable_from_value("b", to_cel(&b));
            let map: std::collections::HashMap<cel::objects::Key, cel::Value> = inputs
                .iter()
                .map(|(n, v)| {
                    (
                        cel::objects::Key::String(Arc::new((*n).to_string())),
                        to_cel(v),
                    )
                })
                .collect();
            ctx.add_variable_from_value(
                "inputs",
                cel::Value::Map(cel::objects::Map { map: Arc::new(map) }),
            );
            let theirs = reference.execute(&ctx).map(|v| v.json().expect("json"));
            assert_eq!(ours.ok(), theirs.ok(), "{src}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        // Parentheses alone make no tree nodes.
        let src = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(Expr::compile(&src).is_ok());
        for src in [
            format!("{}1{}", "[".repeat(5_000), "]".repeat(5_000)),
            format!("a{}", ".b".repeat(20_000)),
            format!("{}1{}", "f(".repeat(3_000), ")".repeat(3_000)),
        ] {
            assert!(Expr::compile(&src).is_err(), "{}", &src[..20]);
        }
        assert!(Expr::compile(&format!("a{}", ".b".repeat(40))).is_ok());
        // Repeated unary operators fold (`--x` is `x`): accepted or refused, never a crash.
        let _ = Expr::compile(&format!("{}1", "-".repeat(20_000)));
        let _ = Expr::compile(&("!".repeat(60_000) + "true"));
    }
}
