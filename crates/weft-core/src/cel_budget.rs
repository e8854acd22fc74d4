//! The evaluation budget of CEL: a cap on the work and the memory one evaluation may use,
//! enforced inside the evaluator, so a hostile expression ends with an error instead of
//! holding a core or exhausting memory.
//!
//! CEL has no loops but its comprehension macros (`map`, `filter`, `all`, `exists`,
//! `exists_one`), and nested ones multiply: three `map`s over a 100-element list literal are a
//! million iterations in a few dozen bytes. Outside a comprehension an expression does work
//! proportional to its (length-limited) source and its inputs, so only code inside a loop is
//! metered: `instrument` wraps every call, list and map built in a comprehension's loop (and
//! the loop condition) in the internal function `@weft_tick`, which charges one unit of cost
//! and the size of the value (characters, bytes, elements or entries) to the evaluation's
//! [`Budget`], and fails once either is spent. An exhausted budget is deterministic (the same
//! expression and inputs always stop at the same point), so replay agrees with the live run.
//!
//! A caller that needs wall-clock bounds as well (the server validating an uploaded plan)
//! installs an interrupt with [`with_interrupt`]: a check it supplies, consulted every
//! [`INTERRUPT_EVERY`] charges. weft-core itself never reads a clock.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cel::common::ast::{CallExpr, EntryExpr, Expr as E, operators};
use cel::common::value::CowVal;
use cel::{ExecutionError, IdedExpr};

/// The internal function charging the budget. `@` cannot start a name in CEL source, so a plan
/// can neither call it nor shadow it.
pub(crate) const TICK: &str = "@weft_tick";

/// The message of an exhausted budget (also how [`crate::expr::EvalError`] recognises it).
pub(crate) const EXHAUSTED: &str = "expression exceeded its evaluation budget";

/// Default [`Budget::max_cost`].
pub const DEFAULT_MAX_COST: u64 = 1_000_000;
/// Default [`Budget::max_size`].
pub const DEFAULT_MAX_SIZE: u64 = 16 * 1024 * 1024;
/// How many charges pass between two consultations of an installed interrupt.
pub const INTERRUPT_EVERY: u32 = 1024;

/// The most work one CEL evaluation may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Cost units: one per call, list or map evaluated inside a comprehension's loop and one
    /// per loop condition (default 1,000,000).
    pub max_cost: u64,
    /// Size units of the values built inside loops: characters of strings, bytes, elements of
    /// lists and entries of maps (default 16 Mi).
    pub max_size: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_cost: DEFAULT_MAX_COST,
            max_size: DEFAULT_MAX_SIZE,
        }
    }
}

static MAX_COST: AtomicU64 = AtomicU64::new(DEFAULT_MAX_COST);
static MAX_SIZE: AtomicU64 = AtomicU64::new(DEFAULT_MAX_SIZE);

/// Sets the budget of every CEL evaluation in this process (the node does, from
/// `limits.cel_max_cost` and `limits.cel_max_size`). A zero is taken as one.
pub fn set_budget(budget: Budget) {
    MAX_COST.store(budget.max_cost.max(1), Ordering::Relaxed);
    MAX_SIZE.store(budget.max_size.max(1), Ordering::Relaxed);
}

/// The budget in force on this thread: [`with_budget`]'s, else the process's.
pub fn effective() -> Budget {
    OVERRIDE.with(Cell::get).unwrap_or_else(budget)
}

/// The budget of every CEL evaluation in this process.
pub fn budget() -> Budget {
    Budget {
        max_cost: MAX_COST.load(Ordering::Relaxed),
        max_size: MAX_SIZE.load(Ordering::Relaxed),
    }
}

/// A check that says "stop now" (e.g. a deadline has passed).
pub type Interrupt = Arc<dyn Fn() -> bool + Send + Sync>;

thread_local! {
    static COST_LEFT: Cell<u64> = const { Cell::new(0) };
    static SIZE_LEFT: Cell<u64> = const { Cell::new(0) };
    static EXHAUSTED_FLAG: Cell<bool> = const { Cell::new(false) };
    static SINCE_CHECK: Cell<u32> = const { Cell::new(0) };
    static INTERRUPT: RefCell<Option<Interrupt>> = const { RefCell::new(None) };
    static OVERRIDE: Cell<Option<Budget>> = const { Cell::new(None) };
}

/// Runs `body` with `budget` instead of the process's for the evaluations on this thread
/// (validation uses the limits it was given).
pub fn with_budget<R>(budget: Budget, body: impl FnOnce() -> R) -> R {
    struct Restore(Option<Budget>);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(OVERRIDE.with(|o| o.replace(Some(budget))));
    body()
}

/// Runs `body` with `interrupt` consulted during every metered CEL evaluation on this thread;
/// when it returns true the evaluation fails as if its budget were spent.
pub fn with_interrupt<R>(interrupt: Interrupt, body: impl FnOnce() -> R) -> R {
    struct Restore(Option<Interrupt>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            INTERRUPT.with(|i| *i.borrow_mut() = previous);
        }
    }
    let previous = INTERRUPT.with(|i| i.borrow_mut().replace(interrupt));
    let _restore = Restore(previous);
    body()
}

/// Starts metering one evaluation with the process's budget.
pub(crate) fn start() {
    let b = OVERRIDE.with(Cell::get).unwrap_or_else(budget);
    COST_LEFT.with(|c| c.set(b.max_cost));
    SIZE_LEFT.with(|c| c.set(b.max_size));
    EXHAUSTED_FLAG.with(|c| c.set(false));
    SINCE_CHECK.with(|c| c.set(0));
}

/// Did the evaluation metered since [`start`] run out of budget?
pub(crate) fn exhausted() -> bool {
    EXHAUSTED_FLAG.with(Cell::get)
}

fn charge(size: u64) -> bool {
    if EXHAUSTED_FLAG.with(Cell::get) {
        return false;
    }
    let cost_ok = COST_LEFT.with(|c| match c.get().checked_sub(1) {
        Some(left) => {
            c.set(left);
            true
        }
        None => false,
    });
    let size_ok = cost_ok
        && SIZE_LEFT.with(|c| match c.get().checked_sub(size) {
            Some(left) => {
                c.set(left);
                true
            }
            None => false,
        });
    let interrupted = size_ok
        && SINCE_CHECK.with(|c| {
            let n = c.get() + 1;
            if n < INTERRUPT_EVERY {
                c.set(n);
                return false;
            }
            c.set(0);
            INTERRUPT.with(|i| i.borrow().as_ref().is_some_and(|f| f()))
        });
    let ok = size_ok && !interrupted;
    if !ok {
        EXHAUSTED_FLAG.with(|c| c.set(true));
    }
    ok
}

/// `@weft_tick(x)`: charges the budget for `x` and returns it unchanged.
fn tick<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let size = args
        .first()
        .and_then(|a| a.as_ref().as_sizer())
        .map_or(0, |s| u64::try_from(*s.size().inner()).unwrap_or(0));
    if !charge(size) {
        return Err(ExecutionError::function_error(TICK, EXHAUSTED));
    }
    args.pop()
        .ok_or_else(|| ExecutionError::function_error(TICK, "expects one argument"))
}

/// Declares `@weft_tick` in `env`.
pub(crate) fn register(env: &mut cel::Env) {
    // Declaring a fresh name cannot conflict; were it to, evaluation of an instrumented
    // expression fails with "no such overload" (an error, never a hang).
    let _ = env.add_overload(
        TICK,
        "weft_tick_dyn",
        vec![cel::common::types::DYN_TYPE],
        tick,
    );
}

/// Does the tree contain a comprehension (and so need metering)?
pub(crate) fn has_loop(root: &IdedExpr) -> bool {
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        if matches!(e.expr, E::Comprehension(_)) {
            return true;
        }
        push_children(e, &mut stack);
    }
    false
}

/// Pushes the direct subexpressions of `e` (every part of a comprehension included).
pub(crate) fn push_children<'a>(e: &'a IdedExpr, stack: &mut Vec<&'a IdedExpr>) {
    match &e.expr {
        E::Call(c) => {
            stack.extend(c.target.as_deref());
            stack.extend(c.args.iter());
        }
        E::Comprehension(c) => stack.extend([
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]),
        E::List(l) => stack.extend(l.elements.iter()),
        E::Map(m) => {
            for en in &m.entries {
                if let EntryExpr::MapEntry(me) = &en.expr {
                    stack.push(&me.key);
                    stack.push(&me.value);
                }
            }
        }
        E::Struct(st) => {
            for en in &st.entries {
                if let EntryExpr::StructField(f) = &en.expr {
                    stack.push(&f.value);
                }
            }
        }
        E::Select(sel) => stack.push(&sel.operand),
        _ => {}
    }
}

fn max_id(root: &IdedExpr) -> u64 {
    let mut max = root.id;
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        max = max.max(e.id);
        match &e.expr {
            E::Call(c) => {
                stack.extend(c.target.as_deref());
                stack.extend(c.args.iter());
            }
            E::Comprehension(c) => {
                stack.extend([
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ]);
            }
            E::List(l) => stack.extend(l.elements.iter()),
            E::Map(m) => {
                for en in &m.entries {
                    max = max.max(en.id);
                    if let EntryExpr::MapEntry(me) = &en.expr {
                        stack.push(&me.key);
                        stack.push(&me.value);
                    }
                }
            }
            E::Struct(st) => {
                for en in &st.entries {
                    max = max.max(en.id);
                    if let EntryExpr::StructField(f) = &en.expr {
                        stack.push(&f.value);
                    }
                }
            }
            E::Select(sel) => stack.push(&sel.operand),
            _ => {}
        }
    }
    max
}

/// Wraps the work inside every comprehension's loop in `@weft_tick`. The shapes the evaluator
/// optimises (`@result + [e]` of `map`/`filter`, `@result && p` of `all`/`exists`) are kept,
/// their parts wrapped. The tree's depth was checked by the caller (at most 64), so recursion
/// here is bounded.
pub(crate) fn instrument(root: &mut IdedExpr) {
    let mut next = max_id(root) + 1;
    walk(root, false, &mut next);
}

fn wrap(e: &mut IdedExpr, next: &mut u64) {
    let inner = std::mem::take(e);
    *e = IdedExpr {
        id: *next,
        expr: E::Call(CallExpr {
            func_name: TICK.to_string(),
            target: None,
            args: vec![inner],
        }),
    };
    *next += 1;
}

fn walk(e: &mut IdedExpr, in_loop: bool, next: &mut u64) {
    let wrap_here = in_loop && matches!(e.expr, E::Call(_) | E::List(_) | E::Map(_));
    match &mut e.expr {
        E::Call(c) => {
            if let Some(t) = c.target.as_deref_mut() {
                walk(t, in_loop, next);
            }
            for a in &mut c.args {
                walk(a, in_loop, next);
            }
        }
        E::Comprehension(c) => {
            walk(&mut c.iter_range, in_loop, next);
            walk(&mut c.accu_init, in_loop, next);
            if !matches!(c.loop_cond.expr, E::Literal(_)) {
                meter(&mut c.loop_cond, next);
            }
            step(&mut c.loop_step, &c.accu_var, next);
            walk(&mut c.result, in_loop, next);
        }
        E::List(l) => {
            for x in &mut l.elements {
                walk(x, in_loop, next);
            }
        }
        E::Map(m) => {
            for en in &mut m.entries {
                if let EntryExpr::MapEntry(me) = &mut en.expr {
                    walk(&mut me.key, in_loop, next);
                    walk(&mut me.value, in_loop, next);
                }
            }
        }
        E::Struct(st) => {
            for en in &mut st.entries {
                if let EntryExpr::StructField(f) = &mut en.expr {
                    walk(&mut f.value, in_loop, next);
                }
            }
        }
        E::Select(sel) => walk(&mut sel.operand, in_loop, next),
        _ => {}
    }
    if wrap_here {
        wrap(e, next);
    }
}

fn is_ident(e: &IdedExpr, name: &str) -> bool {
    matches!(&e.expr, E::Ident(n) if n == name)
}

/// Is `e` `accu + [..]`?
fn is_append(e: &IdedExpr, accu: &str) -> bool {
    matches!(&e.expr, E::Call(c) if c.func_name == operators::ADD
        && c.target.is_none()
        && c.args.len() == 2
        && is_ident(&c.args[0], accu)
        && matches!(c.args[1].expr, E::List(_)))
}

/// Meters `accu + [e…]` by wrapping each element.
fn append_elements(e: &mut IdedExpr, next: &mut u64) {
    if let E::Call(c) = &mut e.expr
        && let Some(E::List(l)) = c.args.get_mut(1).map(|a| &mut a.expr)
    {
        for x in &mut l.elements {
            meter(x, next);
        }
    }
}

fn step(e: &mut IdedExpr, accu: &str, next: &mut u64) {
    if is_append(e, accu) {
        append_elements(e, next);
        return;
    }
    if let E::Call(c) = &mut e.expr
        && c.target.is_none()
    {
        let name = c.func_name.as_str();
        if name == operators::CONDITIONAL
            && c.args.len() == 3
            && is_append(&c.args[1], accu)
            && is_ident(&c.args[2], accu)
        {
            meter(&mut c.args[0], next);
            append_elements(&mut c.args[1], next);
            return;
        }
        if (name == operators::LOGICAL_AND || name == operators::LOGICAL_OR)
            && c.args.len() == 2
            && is_ident(&c.args[0], accu)
        {
            meter(&mut c.args[1], next);
            return;
        }
    }
    meter(e, next);
}

/// Meters `e` as loop work: everything inside is wrapped, and `e` itself once.
fn meter(e: &mut IdedExpr, next: &mut u64) {
    let wrapped_by_walk = matches!(e.expr, E::Call(_) | E::List(_) | E::Map(_));
    walk(e, true, next);
    if !wrapped_by_walk {
        wrap(e, next);
    }
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Scope};
    use serde_json::{Value, json};

    fn eval(src: &str, inputs: &[(&str, &Value)]) -> Result<Value, crate::expr::EvalError> {
        let mut e = Expr::compile(src).expect("compiles");
        e.bind_names(inputs.iter().map(|(n, _)| *n));
        e.eval(&Scope {
            inputs,
            result: None,
            instance: "i",
            plan: "p",
            fresh: "f",
        })
    }

    fn hundred() -> String {
        let items: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        format!("[{}]", items.join(","))
    }

    #[test]
    fn nested_comprehensions_exhaust_the_budget_instead_of_running_for_ever() {
        let l = hundred();
        // 100^5 iterations unmetered: far beyond any budget.
        let src = format!(
            "{l}.all(a, {l}.all(b, {l}.all(c, {l}.all(d, {l}.all(e, a + b + c + d + e >= 0)))))"
        );
        assert!(src.len() < 4096);
        let err = eval(&src, &[]).expect_err("budget");
        assert!(err.exhausted, "{err}");
        assert!(err.message.contains("evaluation budget"), "{err}");
        // `exists` may absorb errors: the exhausted budget still wins.
        let src = format!("{l}.exists(a, {l}.exists(b, {l}.exists(c, {l}.exists(d, false))))");
        assert!(eval(&src, &[]).expect_err("budget").exhausted);
    }

    #[test]
    fn building_huge_values_in_loops_exhausts_the_budget() {
        let l = hundred();
        let s = "x".repeat(3000);
        let src = format!("{l}.map(a, {l}.map(b, '{s}'))");
        assert!(eval(&src, &[]).expect_err("budget").exhausted);
        let src = format!("size({l}.map(a, {l}.map(b, {l}.map(c, string(a) + string(b)))))");
        assert!(eval(&src, &[]).expect_err("budget").exhausted);
        // Over an input as well as over literals.
        let big = json!((0..2000).collect::<Vec<_>>());
        let err = eval("x.map(a, x.map(b, a * b)).size()", &[("x", &big)]).expect_err("budget");
        assert!(err.exhausted);
    }

    #[test]
    fn ordinary_comprehensions_are_unaffected() {
        let x = json!({"items": [1, 2, 3, 4]});
        let ok = |src: &str| eval(src, &[("x", &x)]).expect("evaluates");
        assert_eq!(ok("x.items.map(i, i * 2)"), json!([2, 4, 6, 8]));
        assert_eq!(ok("x.items.filter(i, i % 2 == 0)"), json!([2, 4]));
        assert_eq!(ok("x.items.map(i, i > 1, i)"), json!([2, 3, 4]));
        assert_eq!(ok("x.items.all(i, i > 0)"), json!(true));
        assert_eq!(ok("x.items.exists(i, i > 3)"), json!(true));
        assert_eq!(ok("x.items.exists_one(i, i > 3)"), json!(true));
        assert_eq!(
            ok("x.items.map(i, x.items.filter(j, j < i).size())"),
            json!([0, 1, 2, 3])
        );
        assert_eq!(
            ok("[[1], [2, 3]].map(l, l.map(i, [i]))"),
            json!([[[1]], [[2], [3]]])
        );
        assert_eq!(ok("{'a': 1, 'b': 2}.all(k, k.size() == 1)"), json!(true));
        // Errors inside loops stay the same errors.
        assert!(
            !eval("x.items.map(i, i / 0)", &[("x", &x)])
                .expect_err("div")
                .exhausted
        );
    }

    #[test]
    fn an_interrupt_stops_evaluation() {
        let l = hundred();
        let src = format!("{l}.all(a, {l}.all(b, a + b >= 0))");
        assert!(eval(&src, &[]).is_ok());
        let err = super::with_interrupt(std::sync::Arc::new(|| true), || eval(&src, &[]))
            .expect_err("interrupted");
        assert!(err.exhausted);
        // The interrupt is gone afterwards.
        assert!(eval(&src, &[]).is_ok());
    }

    #[test]
    fn the_tick_cannot_be_called_from_source() {
        assert!(Expr::compile("@weft_tick(1)").is_err());
    }
}
