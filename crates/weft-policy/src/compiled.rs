//! Decisions without the interpreter: a bundle whose rules fall in a subset of Rego is
//! compiled, when it loads, into a small tree evaluated for each call in a few microseconds
//! (regorus's interpreter takes over a hundred for a realistic bundle; docs/performance.md,
//! the policy stage).
//!
//! ## Why the decisions are the interpreter's
//! The tree is made from regorus's own syntax tree (its parser, in the engine's Rego v1
//! mode), holds regorus values and calls regorus's own builtins (strict, as the engine),
//! comparison, arithmetic and set operations, so every operation is the one the interpreter
//! performs. Evaluation is pure, so only failures could tell the two apart, and a failure
//! (a builtin's error, a complete rule with two values, `some` over a string) is never
//! decided here: the call is handed to the interpreter, which fails the same way (and
//! denies). For that to be exact, this tree must fail whenever the interpreter would, so
//! it evaluates what the interpreter evaluates, in the same order:
//! - regorus runs a body's statements in the order its scheduler gives. In the subset, a
//!   variable is bound (`:=`, `some … in`) before any statement uses it and no local sits
//!   in a `[…]` index, and for such bodies regorus's scheduler keeps the written order (its
//!   first pass takes each statement in order once what it uses is bound); statements run
//!   in that order here and stop at the first that fails, as there;
//! - operands are evaluated as the interpreter does (all arguments of a call before its
//!   undefined check; a membership's key only for arrays and objects);
//! - rules are evaluated when first referred to, every definition and every iteration
//!   (at least what the interpreter evaluates), and kept for the rest of the decision.
//!
//! Outside the subset (`with`, `every`, comprehensions, functions, `else`, unification
//! (`=`), `some x` declarations, other packages or `data` beyond `data.weft.<rule>`,
//! builtins whose answer varies by itself) the bundle is evaluated by the interpreter, with
//! the reason kept ([`crate::Policy::evaluator`]). A call that needs more than
//! [`WORK_LIMIT`] steps is handed over too (the interpreter then stops at `EVAL_LIMIT` and
//! denies). Rules that do not read the input are evaluated once, by the interpreter, when
//! the bundle loads. `tests/compiled.rs` compares both evaluators on generated calls.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use regorus::Value;
use regorus::unstable::{
    ArithOp, AssignOp, BinOp, BoolOp, BuiltinFcn, Expr, Literal, Module, Parser, Query, Ref, Rule,
    RuleHead, Span,
};

/// Steps (statements and iterations) one decision may take before the interpreter decides.
pub const WORK_LIMIT: u32 = 100_000;

/// Most statements in a compiled body, and deepest expression: evaluation recurses on both,
/// so a bundle past them is left to the interpreter rather than risk the stack.
const MAX_STATEMENTS: usize = 256;
const MAX_DEPTH: usize = 64;

/// Why a rule is evaluated by the interpreter instead.
#[derive(Debug)]
pub(crate) enum Fallback {
    /// The rule is not one the compiled bundle evaluates.
    NotCompiled,
    /// This call: past the work limit, or a shape left to the interpreter.
    HandedOver,
}

type Eval<T> = Result<T, Fallback>;

/// A bundle's rules of `package weft`, compiled.
pub(crate) struct Compiled {
    rules: Vec<CRule>,
    /// `data.weft.<name>` → what evaluates it.
    entries: HashMap<String, Entry>,
    /// Evaluations handed to the interpreter ([`crate::Policy::handed_over`]).
    pub(crate) handed_over: std::sync::atomic::AtomicU64,
}

enum Entry {
    Const(Value),
    Rule(usize),
}

struct CRule {
    set: bool,
    defs: Vec<Def>,
    /// A complete rule's `default` value.
    default: Option<Value>,
}

struct Def {
    lits: Vec<Lit>,
    /// The rule's value (complete rule) or the element it adds (set rule).
    head: Node,
    slots: usize,
}

enum Lit {
    Expr(Node),
    Not(Node),
    Assign(usize, Node),
    SomeIn {
        key: Option<usize>,
        value: usize,
        coll: Node,
    },
}

#[derive(Clone, Copy)]
enum Root {
    Input,
    Local(usize),
}

/// The AST spans and operands a regorus operation takes for its error messages.
struct Ast {
    span: Span,
    lhs: Ref<Expr>,
    rhs: Ref<Expr>,
}

enum Node {
    Const(Value),
    Input,
    Local(usize),
    /// `input.a.b[…]` or `local.a[…]` with constant keys, walked without cloning each step.
    Path(Root, Vec<Value>),
    /// `regex.match` with a constant pattern, compiled once (regorus clones its cached
    /// regex, and with it a fresh matching cache, on every call).
    RegexMatch(regex::Regex, Box<Node>),
    Rule(usize),
    Index(Box<Node>, Box<Node>),
    Call {
        f: BuiltinFcn,
        span: Span,
        params: Vec<Ref<Expr>>,
        args: Vec<Node>,
    },
    Compare(BoolOp, Box<Node>, Box<Node>),
    Arith(ArithOp, Box<Ast>, Box<Node>, Box<Node>),
    Sets(BinOp, Box<Ast>, Box<Node>, Box<Node>),
    Member {
        key: Option<Box<Node>>,
        value: Box<Node>,
        coll: Box<Node>,
    },
    Array(Vec<Node>),
    Set(Vec<Node>),
    Object(Vec<(Node, Node)>),
}

/// Whether a builtin may be called here: every builtin of weft's regorus build except
/// those whose answer varies by itself (regorus caches them per evaluation) and `trace`.
fn pure_builtin(name: &str) -> bool {
    regorus::unstable::must_cache(name).is_none() && name != "trace" && name != "print"
}

/// Whether a compiled bundle may be made: either the tree or why not.
pub(crate) fn compile(
    sources: &[(String, String)],
    constant: &mut dyn FnMut(&str) -> Result<Value, String>,
) -> Result<Compiled, String> {
    let mut modules = Vec::new();
    for (name, text) in sources {
        let source = regorus::Source::from_contents(name.clone(), text.clone())
            .map_err(|e| e.to_string())?;
        let mut parser = Parser::new(&source).map_err(|e| e.to_string())?;
        parser.enable_rego_v1().map_err(|e| e.to_string())?;
        let module = parser.parse().map_err(|e| e.to_string())?;
        let package = path_of(&module.package.refr).unwrap_or_default();
        if package == "weft" {
            modules.push(module);
        } else if package.starts_with("weft.") {
            return Err(format!(
                "{name}: package {package} nests inside package weft"
            ));
        }
    }
    let mut c = Compiler::default();
    for m in &modules {
        check_imports(m)?;
        for rule in &m.policy {
            let name = rule_name(rule).ok_or_else(|| at(rule.span(), "a rule with a path head"))?;
            c.sources.entry(name).or_default().push(rule.clone());
        }
    }
    c.reads_input = reads_input(&c.sources);
    let mut entries = HashMap::new();
    for name in ["deny", "require_approval", "approval_timeout_ms"] {
        if c.sources.contains_key(name) {
            let entry = c.rule(name, constant)?;
            entries.insert(format!("data.weft.{name}"), entry);
        }
    }
    let rules = c.rules.into_iter().collect::<Option<Vec<_>>>();
    Ok(Compiled {
        rules: rules.ok_or("a rule left half compiled")?,
        entries,
        handed_over: Default::default(),
    })
}

fn at(span: &Span, what: &str) -> String {
    format!(
        "{}:{}:{}: {what} (`{}`)",
        span.source.get_path(),
        span.line,
        span.col,
        span.text().lines().next().unwrap_or("")
    )
}

fn check_imports(m: &Module) -> Result<(), String> {
    for import in &m.imports {
        let path = path_of(&import.refr).unwrap_or_default();
        if path != "rego.v1" && !path.starts_with("future.keywords") {
            return Err(at(&import.span, "an import"));
        }
    }
    Ok(())
}

/// `a.b.c` for a chain of names.
fn path_of(e: &Ref<Expr>) -> Option<String> {
    match e.as_ref() {
        Expr::Var { span, .. } => Some(span.text().to_string()),
        Expr::RefDot { refr, field, .. } => Some(format!("{}.{}", path_of(refr)?, field.0.text())),
        _ => None,
    }
}

fn rule_name(rule: &Ref<Rule>) -> Option<String> {
    let refr = match rule.as_ref() {
        Rule::Spec { head, .. } => match head {
            RuleHead::Compr { refr, .. }
            | RuleHead::Set { refr, .. }
            | RuleHead::Func { refr, .. } => refr,
        },
        Rule::Default { refr, .. } => refr,
    };
    match refr.as_ref() {
        Expr::Var { span, .. } => Some(span.text().to_string()),
        _ => None,
    }
}

/// The rules that read the input, directly or through another rule (a name that is also a
/// local somewhere counts: an over-approximation that only makes a rule evaluated per call).
fn reads_input(sources: &BTreeMap<String, Vec<Ref<Rule>>>) -> BTreeSet<String> {
    let mut names: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (name, rules) in sources {
        let used = names.entry(name.as_str()).or_default();
        for rule in rules {
            used.extend(crate::words(rule.span().text()));
        }
    }
    let mut reading: BTreeSet<String> = names
        .iter()
        .filter(|(_, used)| used.contains("input"))
        .map(|(n, _)| n.to_string())
        .collect();
    loop {
        let more: Vec<String> = names
            .iter()
            .filter(|(n, used)| !reading.contains(**n) && used.iter().any(|u| reading.contains(*u)))
            .map(|(n, _)| n.to_string())
            .collect();
        if more.is_empty() {
            return reading;
        }
        reading.extend(more);
    }
}

#[derive(Default)]
struct Compiler {
    sources: BTreeMap<String, Vec<Ref<Rule>>>,
    reads_input: BTreeSet<String>,
    index: HashMap<String, usize>,
    rules: Vec<Option<CRule>>,
    constants: HashMap<String, Value>,
    /// How deep the expression being compiled is nested.
    depth: usize,
}

/// The locals of one rule body while it compiles, in the order they are bound.
#[derive(Default)]
struct Scope {
    names: Vec<String>,
}

impl Scope {
    fn get(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    fn bind(&mut self, span: &Span) -> Result<usize, String> {
        let name = span.text();
        if name == "_" || self.get(name).is_some() {
            return Err(at(span, "a repeated or anonymous variable"));
        }
        self.names.push(name.to_string());
        Ok(self.names.len() - 1)
    }
}

type Consts<'a> = &'a mut dyn FnMut(&str) -> Result<Value, String>;

impl Compiler {
    /// A rule by name: its constant value when it does not read the input, else compiled.
    fn rule(&mut self, name: &str, constant: Consts) -> Result<Entry, String> {
        if !self.reads_input.contains(name) {
            if let Some(v) = self.constants.get(name) {
                return Ok(Entry::Const(v.clone()));
            }
            let v = constant(&format!("data.weft.{name}"))
                .map_err(|e| format!("rule {name} (constant) fails: {e}"))?;
            self.constants.insert(name.to_string(), v.clone());
            return Ok(Entry::Const(v));
        }
        if let Some(&i) = self.index.get(name) {
            if self.rules[i].is_none() {
                return Err(format!("rule {name} refers to itself"));
            }
            return Ok(Entry::Rule(i));
        }
        let i = self.rules.len();
        self.index.insert(name.to_string(), i);
        self.rules.push(None);
        let rules = self.sources.get(name).cloned().unwrap_or_default();
        let mut compiled = CRule {
            set: false,
            defs: Vec::new(),
            default: None,
        };
        let (mut sets, mut completes) = (0, 0);
        for rule in &rules {
            match rule.as_ref() {
                Rule::Default { args, value, .. } => {
                    if !args.is_empty() {
                        return Err(at(rule.span(), "a default function"));
                    }
                    let node = self.expr(value, &mut Scope::default(), constant)?;
                    let Node::Const(v) = fold(node) else {
                        return Err(at(rule.span(), "a default value that is not a constant"));
                    };
                    compiled.default = Some(v);
                }
                Rule::Spec { head, bodies, span } => {
                    if bodies.len() > 1 || bodies.iter().any(|b| b.assign.is_some()) {
                        return Err(at(span, "`else` or several bodies"));
                    }
                    let mut scope = Scope::default();
                    let lits = match bodies.first() {
                        Some(body) => self.query(&body.query, &mut scope, constant)?,
                        None => Vec::new(),
                    };
                    let head = match head {
                        RuleHead::Set { key: Some(key), .. } => {
                            sets += 1;
                            self.expr(key, &mut scope, constant)?
                        }
                        RuleHead::Compr { assign, .. } => {
                            completes += 1;
                            match assign {
                                Some(a) => self.expr(&a.value, &mut scope, constant)?,
                                None => Node::Const(Value::Bool(true)),
                            }
                        }
                        _ => return Err(at(span, "a function or a partial object rule")),
                    };
                    compiled.defs.push(Def {
                        lits,
                        head: fold(head),
                        slots: scope.names.len(),
                    });
                }
            }
        }
        if sets > 0 && (completes > 0 || compiled.default.is_some()) {
            return Err(format!("rule {name} is both a set and a complete rule"));
        }
        compiled.set = sets > 0;
        self.rules[i] = Some(compiled);
        Ok(Entry::Rule(i))
    }

    /// A body's statements, in the written order (which regorus's scheduler keeps for the
    /// bodies of the subset: every variable is bound before a statement uses it).
    fn query(&mut self, q: &Ref<Query>, scope: &mut Scope, k: Consts) -> Result<Vec<Lit>, String> {
        if q.stmts.len() > MAX_STATEMENTS {
            return Err(at(
                &q.span,
                "a body of more statements than the compiled rules take",
            ));
        }
        let mut lits = Vec::with_capacity(q.stmts.len());
        for stmt in &q.stmts {
            if !stmt.with_mods.is_empty() {
                return Err(at(&stmt.span, "`with`"));
            }
            lits.push(match &stmt.literal {
                Literal::Expr { expr, span } => match expr.as_ref() {
                    Expr::AssignExpr { op, lhs, rhs, .. } => {
                        if *op != AssignOp::ColEq {
                            return Err(at(span, "unification (`=`)"));
                        }
                        let Expr::Var { span: var, .. } = lhs.as_ref() else {
                            return Err(at(span, "an assignment to a pattern"));
                        };
                        let node = fold(self.expr(rhs, scope, k)?);
                        Lit::Assign(scope.bind(var)?, node)
                    }
                    _ => Lit::Expr(fold(self.expr(expr, scope, k)?)),
                },
                Literal::NotExpr { expr, .. } => Lit::Not(fold(self.expr(expr, scope, k)?)),
                Literal::SomeIn {
                    span,
                    key,
                    value,
                    collection,
                } => {
                    let coll = fold(self.expr(collection, scope, k)?);
                    let var = |e: &Ref<Expr>| match e.as_ref() {
                        Expr::Var { span, .. } => Ok(span.clone()),
                        _ => Err(at(span, "`some` with a pattern")),
                    };
                    let key = match key {
                        Some(key) => Some(scope.bind(&var(key)?)?),
                        None => None,
                    };
                    let value = scope.bind(&var(value)?)?;
                    Lit::SomeIn { key, value, coll }
                }
                Literal::SomeVars { span, .. } => return Err(at(span, "`some x` declarations")),
                Literal::Every { span, .. } => return Err(at(span, "`every`")),
            });
        }
        Ok(lits)
    }

    fn expr(&mut self, e: &Ref<Expr>, scope: &mut Scope, k: Consts) -> Result<Node, String> {
        if self.depth >= MAX_DEPTH {
            return Err(at(
                e.span(),
                "an expression nested deeper than the compiled rules take",
            ));
        }
        self.depth += 1;
        let node = self.expr_at(e, scope, k);
        self.depth -= 1;
        node
    }

    fn expr_at(&mut self, e: &Ref<Expr>, scope: &mut Scope, k: Consts) -> Result<Node, String> {
        Ok(match e.as_ref() {
            Expr::String { value, .. }
            | Expr::RawString { value, .. }
            | Expr::Number { value, .. }
            | Expr::Bool { value, .. }
            | Expr::Null { value, .. } => Node::Const(value.clone()),
            Expr::Var { span, .. } => self.var(span, scope, k)?,
            Expr::RefDot { refr, field, .. } => {
                if let Some(rule) = data_rule(refr, field.0.text()) {
                    return self.named_rule(rule, e.span(), k);
                }
                let base = self.expr(refr, scope, k)?;
                indexed(base, Node::Const(field.1.clone()))
            }
            Expr::RefBrack {
                refr, index, span, ..
            } => {
                if path_of(refr).is_some_and(|p| p == "data" || p.starts_with("data.")) {
                    return Err(at(span, "an index into data"));
                }
                let base = self.expr(refr, scope, k)?;
                let key = self.expr(index, scope, k)?;
                // regorus's scheduler counts a local in an index as bound there.
                if uses_local(&key) {
                    return Err(at(span, "a local variable in an index"));
                }
                indexed(base, key)
            }
            Expr::Call {
                span, fcn, params, ..
            } => {
                let name = path_of(fcn).ok_or_else(|| at(span, "a call of an expression"))?;
                let root = name.split('.').next().unwrap_or_default();
                if self.sources.contains_key(root) || scope.get(root).is_some() {
                    return Err(at(span, "a call of a rule or a local"));
                }
                let f = builtin(&name)
                    .filter(|_| pure_builtin(&name))
                    .ok_or_else(|| at(span, &format!("the builtin {name}")))?;
                if params.len() != usize::from(f.1) {
                    return Err(at(span, "a call with an output argument"));
                }
                let mut args = self.exprs(params, scope, k)?;
                let pattern = match &args[..] {
                    [Node::Const(Value::String(p)), _] if name == "regex.match" => same_regex(p),
                    _ => None,
                };
                if let Some(re) = pattern {
                    let value = args.pop().unwrap_or(Node::Const(Value::Undefined));
                    return Ok(Node::RegexMatch(re, Box::new(value)));
                }
                Node::Call {
                    f,
                    span: span.clone(),
                    params: params.clone(),
                    args,
                }
            }
            Expr::BoolExpr { op, lhs, rhs, .. } => Node::Compare(
                op.clone(),
                Box::new(self.expr(lhs, scope, k)?),
                Box::new(self.expr(rhs, scope, k)?),
            ),
            Expr::ArithExpr {
                span, op, lhs, rhs, ..
            } => {
                let (ast, l, r) = self.operands(span, lhs, rhs, scope, k)?;
                Node::Arith(op.clone(), ast, l, r)
            }
            Expr::BinExpr {
                span, op, lhs, rhs, ..
            } => {
                let (ast, l, r) = self.operands(span, lhs, rhs, scope, k)?;
                Node::Sets(op.clone(), ast, l, r)
            }
            Expr::Membership {
                key,
                value,
                collection,
                ..
            } => Node::Member {
                key: match key {
                    Some(key) => Some(Box::new(self.expr(key, scope, k)?)),
                    None => None,
                },
                value: Box::new(self.expr(value, scope, k)?),
                coll: Box::new(self.expr(collection, scope, k)?),
            },
            Expr::Array { items, .. } => Node::Array(self.exprs(items, scope, k)?),
            Expr::Set { items, .. } => Node::Set(self.exprs(items, scope, k)?),
            Expr::Object { fields, .. } => {
                let mut out = Vec::with_capacity(fields.len());
                for (_, key, value) in fields {
                    out.push((self.expr(key, scope, k)?, self.expr(value, scope, k)?));
                }
                Node::Object(out)
            }
            Expr::UnaryExpr { span, .. } => return Err(at(span, "a unary minus")),
            other => return Err(at(other.span(), "this expression")),
        })
    }

    /// An operator's two operands, with the AST regorus's operation takes for its errors.
    #[allow(clippy::type_complexity)]
    fn operands(
        &mut self,
        span: &Span,
        lhs: &Ref<Expr>,
        rhs: &Ref<Expr>,
        scope: &mut Scope,
        k: Consts,
    ) -> Result<(Box<Ast>, Box<Node>, Box<Node>), String> {
        let (l, r) = (self.expr(lhs, scope, k)?, self.expr(rhs, scope, k)?);
        let ast = Ast {
            span: span.clone(),
            lhs: lhs.clone(),
            rhs: rhs.clone(),
        };
        Ok((Box::new(ast), Box::new(l), Box::new(r)))
    }

    fn exprs(
        &mut self,
        items: &[Ref<Expr>],
        scope: &mut Scope,
        k: Consts,
    ) -> Result<Vec<Node>, String> {
        items.iter().map(|i| self.expr(i, scope, k)).collect()
    }

    fn var(&mut self, span: &Span, scope: &Scope, k: Consts) -> Result<Node, String> {
        let name = span.text();
        if let Some(slot) = scope.get(name) {
            return Ok(Node::Local(slot));
        }
        match name {
            "input" => Ok(Node::Input),
            "data" | "_" => Err(at(span, "this variable")),
            _ if self.sources.contains_key(name) => self.named_rule(name, span, k),
            _ => Err(at(span, "an unknown variable")),
        }
    }

    fn named_rule(&mut self, name: &str, span: &Span, k: Consts) -> Result<Node, String> {
        if !self.sources.contains_key(name) {
            return Err(at(span, "a rule no file defines"));
        }
        Ok(match self.rule(name, k)? {
            Entry::Const(v) => Node::Const(v),
            Entry::Rule(i) => Node::Rule(i),
        })
    }
}

/// `base[key]`, a path when the key is a constant and the base the input or a local.
fn indexed(base: Node, key: Node) -> Node {
    match (base, key) {
        (Node::Input, Node::Const(k)) => Node::Path(Root::Input, vec![k]),
        (Node::Local(slot), Node::Const(k)) => Node::Path(Root::Local(slot), vec![k]),
        (Node::Path(root, mut keys), Node::Const(k)) => {
            keys.push(k);
            Node::Path(root, keys)
        }
        (base, key) => Node::Index(Box::new(base), Box::new(key)),
    }
}

/// The regex regorus's `regex.match` compiles for `pattern` (the same crate, size limit and
/// options), or none when regorus would fail on it (then the call fails as there).
fn same_regex(pattern: &str) -> Option<regex::Regex> {
    regex::RegexBuilder::new(pattern)
        .size_limit(100 * 1024)
        .build()
        .ok()
}

fn uses_local(n: &Node) -> bool {
    match n {
        Node::Local(_) | Node::Path(Root::Local(_), _) => true,
        Node::Const(_) | Node::Input | Node::Rule(_) | Node::Path(Root::Input, _) => false,
        Node::RegexMatch(_, v) => uses_local(v),
        Node::Index(a, b)
        | Node::Compare(_, a, b)
        | Node::Arith(_, _, a, b)
        | Node::Sets(_, _, a, b) => uses_local(a) || uses_local(b),
        Node::Call { args, .. } | Node::Array(args) | Node::Set(args) => {
            args.iter().any(uses_local)
        }
        Node::Member { key, value, coll } => {
            key.as_deref().is_some_and(uses_local) || uses_local(value) || uses_local(coll)
        }
        Node::Object(fields) => fields.iter().any(|(a, b)| uses_local(a) || uses_local(b)),
    }
}

/// `data.weft.<rule>` as the rule's name.
fn data_rule<'a>(refr: &Ref<Expr>, field: &'a str) -> Option<&'a str> {
    (path_of(refr).as_deref() == Some("data.weft")).then_some(field)
}

fn builtin(name: &str) -> Option<BuiltinFcn> {
    regorus::unstable::BUILTINS.get(name).copied()
}

fn is_defined_const(n: &Node) -> bool {
    matches!(n, Node::Const(v) if *v != Value::Undefined)
}

/// A composite literal of defined constants, as one constant.
fn fold(n: Node) -> Node {
    match n {
        Node::Array(items) if items.iter().all(is_defined_const) => Node::Const(Value::from(
            items.into_iter().map(const_of).collect::<Vec<_>>(),
        )),
        Node::Set(items) if items.iter().all(is_defined_const) => Node::Const(Value::from(
            items.into_iter().map(const_of).collect::<BTreeSet<_>>(),
        )),
        Node::Object(fields)
            if fields
                .iter()
                .all(|(k, v)| is_defined_const(k) && is_defined_const(v)) =>
        {
            Node::Const(Value::from(
                fields
                    .into_iter()
                    .map(|(k, v)| (const_of(k), const_of(v)))
                    .collect::<BTreeMap<_, _>>(),
            ))
        }
        other => other,
    }
}

fn const_of(n: Node) -> Value {
    match n {
        Node::Const(v) => v,
        _ => Value::Undefined,
    }
}

/// One decision's state: the input, the rules evaluated so far, the steps taken.
struct Cx<'a> {
    input: &'a Value,
    memo: Vec<Option<Value>>,
    work: u32,
}

/// The compiled rules evaluating one decision's rules for one input.
pub(crate) struct Session<'a> {
    compiled: &'a Compiled,
    cx: Cx<'a>,
}

impl Session<'_> {
    /// `rule` (`data.weft.<name>`): its value, or why the interpreter must evaluate it.
    pub(crate) fn eval(&mut self, rule: &str) -> Eval<Value> {
        match self.compiled.entries.get(rule) {
            None => Err(Fallback::NotCompiled),
            Some(Entry::Const(v)) => Ok(v.clone()),
            Some(Entry::Rule(i)) => self.compiled.rule(&mut self.cx, *i),
        }
    }

    /// Counts a rule handed to the interpreter ([`crate::Policy::handed_over`]).
    pub(crate) fn count_handed_over(&self) {
        self.compiled
            .handed_over
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Compiled {
    /// A decision's session: rules it evaluates are kept for the next it is asked.
    pub(crate) fn session<'a>(&'a self, input: &'a Value) -> Session<'a> {
        Session {
            compiled: self,
            cx: Cx {
                input,
                memo: vec![None; self.rules.len()],
                work: 0,
            },
        }
    }

    fn rule(&self, cx: &mut Cx, i: usize) -> Eval<Value> {
        if let Some(v) = &cx.memo[i] {
            return Ok(v.clone());
        }
        let rule = &self.rules[i];
        let mut frame = Vec::new();
        let value = if rule.set {
            let mut set = BTreeSet::new();
            for def in &rule.defs {
                frame.clear();
                frame.resize(def.slots, Value::Undefined);
                self.body(cx, def, &mut frame, 0, &mut |this, cx, frame| match this
                    .node(cx, &def.head, frame)?
                {
                    Value::Undefined => Ok(()),
                    v => {
                        set.insert(v);
                        Ok(())
                    }
                })?;
            }
            Value::from(set)
        } else {
            let mut value = Value::Undefined;
            for def in &rule.defs {
                frame.clear();
                frame.resize(def.slots, Value::Undefined);
                self.body(cx, def, &mut frame, 0, &mut |this, cx, frame| {
                    match this.node(cx, &def.head, frame)? {
                        // A definition whose value is undefined adds nothing (regorus too).
                        Value::Undefined => Ok(()),
                        v if value == Value::Undefined => {
                            value = v;
                            Ok(())
                        }
                        v if v == value => Ok(()),
                        // Two values: regorus fails.
                        _ => Err(Fallback::HandedOver),
                    }
                })?;
            }
            match (&value, &rule.default) {
                (Value::Undefined, Some(d)) => d.clone(),
                _ => value,
            }
        };
        cx.memo[i] = Some(value.clone());
        Ok(value)
    }

    #[allow(clippy::type_complexity)]
    fn body(
        &self,
        cx: &mut Cx,
        def: &Def,
        frame: &mut Vec<Value>,
        at: usize,
        emit: &mut dyn FnMut(&Self, &mut Cx, &[Value]) -> Eval<()>,
    ) -> Eval<()> {
        cx.work += 1;
        if cx.work > WORK_LIMIT {
            return Err(Fallback::HandedOver);
        }
        let Some(lit) = def.lits.get(at) else {
            return emit(self, cx, frame);
        };
        match lit {
            Lit::Expr(n) => match self.node(cx, n, frame)? {
                Value::Bool(false) | Value::Undefined => Ok(()),
                _ => self.body(cx, def, frame, at + 1, emit),
            },
            Lit::Not(n) => match self.node(cx, n, frame)? {
                Value::Bool(false) | Value::Undefined => self.body(cx, def, frame, at + 1, emit),
                _ => Ok(()),
            },
            Lit::Assign(slot, n) => match self.node(cx, n, frame)? {
                Value::Undefined => Ok(()),
                v => {
                    frame[*slot] = v;
                    self.body(cx, def, frame, at + 1, emit)
                }
            },
            Lit::SomeIn { key, value, coll } => {
                let coll = self.node(cx, coll, frame)?;
                let mut each =
                    |this: &Self, cx: &mut Cx, frame: &mut Vec<Value>, k: Value, v: &Value| {
                        cx.work += 1;
                        if let Some(slot) = key {
                            frame[*slot] = k;
                        }
                        frame[*value] = v.clone();
                        this.body(cx, def, frame, at + 1, emit)
                    };
                match &coll {
                    Value::Array(a) => {
                        for (i, v) in a.iter().enumerate() {
                            each(self, cx, frame, Value::from(i), v)?;
                        }
                    }
                    Value::Set(s) => {
                        for v in s.iter() {
                            each(self, cx, frame, v.clone(), v)?;
                        }
                    }
                    Value::Object(o) => {
                        for (k, v) in o.iter() {
                            each(self, cx, frame, k.clone(), v)?;
                        }
                    }
                    Value::Undefined => {}
                    // Excluded when the bundle compiled; the interpreter fails here.
                    _ => return Err(Fallback::HandedOver),
                }
                Ok(())
            }
        }
    }

    fn node(&self, cx: &mut Cx, n: &Node, frame: &[Value]) -> Eval<Value> {
        Ok(match n {
            Node::Const(v) => v.clone(),
            Node::Input => cx.input.clone(),
            Node::Local(slot) => frame[*slot].clone(),
            Node::Path(root, keys) => {
                let mut v = match root {
                    Root::Input => cx.input,
                    Root::Local(slot) => &frame[*slot],
                };
                for k in keys {
                    v = &v[k];
                }
                v.clone()
            }
            Node::RegexMatch(re, value) => match self.node(cx, value, frame)? {
                Value::Undefined => Value::Undefined,
                Value::String(s) => Value::Bool(re.is_match(&s)),
                // regorus fails on a value that is not a string.
                _ => return Err(Fallback::HandedOver),
            },
            Node::Rule(i) => self.rule(cx, *i)?,
            Node::Index(base, key) => {
                let base = self.node(cx, base, frame)?;
                let key = self.node(cx, key, frame)?;
                base[&key].clone()
            }
            Node::Call {
                f,
                span,
                params,
                args,
                ..
            } => {
                // Every argument first, then the undefined check, as the interpreter.
                let mut values = Vec::with_capacity(args.len());
                for a in args {
                    values.push(self.node(cx, a, frame)?);
                }
                if values.contains(&Value::Undefined) {
                    return Ok(Value::Undefined);
                }
                // Strict, as the engine: a builtin's error fails the evaluation.
                (f.0)(span, params, &values, true).map_err(|_| Fallback::HandedOver)?
            }
            Node::Compare(op, l, r) => {
                let (l, r) = (self.node(cx, l, frame)?, self.node(cx, r, frame)?);
                if l == Value::Undefined || r == Value::Undefined {
                    return Ok(Value::Undefined);
                }
                regorus::unstable::comparison::compare(op, &l, &r)
                    .map_err(|_| Fallback::HandedOver)?
            }
            Node::Arith(op, ast, l, r) => {
                let (l, r) = (self.node(cx, l, frame)?, self.node(cx, r, frame)?);
                if l == Value::Undefined || r == Value::Undefined {
                    return Ok(Value::Undefined);
                }
                let result = match (op, &l, &r) {
                    (ArithOp::Sub, Value::Set(_), _) | (ArithOp::Sub, _, Value::Set(_)) => {
                        regorus::unstable::sets::difference(&ast.lhs, &ast.rhs, l, r)
                    }
                    _ => regorus::unstable::numbers::arithmetic_operation(
                        &ast.span, op, &ast.lhs, &ast.rhs, l, r, true,
                    ),
                };
                result.map_err(|_| Fallback::HandedOver)?
            }
            Node::Sets(op, ast, l, r) => {
                let (l, r) = (self.node(cx, l, frame)?, self.node(cx, r, frame)?);
                if l == Value::Undefined || r == Value::Undefined {
                    return Ok(Value::Undefined);
                }
                let result = match op {
                    BinOp::Union => regorus::unstable::sets::union(&ast.lhs, &ast.rhs, l, r),
                    BinOp::Intersection => {
                        regorus::unstable::sets::intersection(&ast.lhs, &ast.rhs, l, r)
                    }
                };
                result.map_err(|_| Fallback::HandedOver)?
            }
            Node::Member { key, value, coll } => {
                let value = self.node(cx, value, frame)?;
                let coll = self.node(cx, coll, frame)?;
                // The key is evaluated for arrays and objects only, as the interpreter.
                let key = match (key, &coll) {
                    (Some(k), Value::Array(_) | Value::Object(_)) => Some(self.node(cx, k, frame)?),
                    (Some(_), _) => Some(Value::Undefined),
                    (None, _) => None,
                };
                Value::Bool(match (&coll, key) {
                    (Value::Array(_) | Value::Object(_), Some(k)) => coll[&k] == value,
                    (Value::Array(a), None) => a.contains(&value),
                    (Value::Object(o), None) => o.values().any(|v| *v == value),
                    (Value::Set(s), None) => s.contains(&value),
                    _ => false,
                })
            }
            Node::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for i in items {
                    match self.node(cx, i, frame)? {
                        Value::Undefined => return Ok(Value::Undefined),
                        v => out.push(v),
                    }
                }
                Value::from(out)
            }
            Node::Set(items) => {
                let mut out = BTreeSet::new();
                for i in items {
                    match self.node(cx, i, frame)? {
                        Value::Undefined => return Ok(Value::Undefined),
                        v => {
                            out.insert(v);
                        }
                    }
                }
                Value::from(out)
            }
            Node::Object(fields) => {
                let mut out = BTreeMap::new();
                for (k, v) in fields {
                    let k = self.node(cx, k, frame)?;
                    if k == Value::Undefined {
                        return Ok(Value::Undefined);
                    }
                    let v = self.node(cx, v, frame)?;
                    if v == Value::Undefined {
                        return Ok(Value::Undefined);
                    }
                    out.insert(k, v);
                }
                Value::from(out)
            }
        })
    }
}
