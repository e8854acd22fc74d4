//! A small constant folder for guards and `when` conditions, so that a condition that cannot
//! go both ways (`1 > 2`, `(2 + 3) * 2 == 10 || x.ok`) is not over-approximated as "may hold".
//!
//! It folds only what is cheap and obviously bounded: literals, integer (checked), unsigned
//! and floating-point arithmetic, string concatenation up to [`MAX_STRING`] bytes,
//! comparisons of two values of one type, `!`, `&&`, `||` and `?:`. Anything else (variables,
//! function calls, macros and comprehensions, lists, maps, mixed-type comparisons) is
//! `Unknown`, so hostile expressions cost at most one walk of their (depth-limited) tree and
//! nothing is ever evaluated. It never runs the expression evaluator.

use cel::common::ast::{Expr as E, LiteralValue, operators as op};

/// Longest string a concatenation may fold to; longer ones are `Unknown`.
const MAX_STRING: usize = 4096;

/// What a guard or `when` condition can do at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Truth {
    /// It always evaluates to `true`.
    Always,
    /// It never evaluates to `true` (false, an error such as a division by zero, or not a
    /// boolean: all mean "not enabled" for a guard and "not emitted" for `when`).
    Never,
    /// It depends on the tokens or the result.
    Maybe,
}

/// A folded value: known, an evaluation error, or unknown.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(String),
    Null,
    Error,
    Unknown,
}

/// What the condition `source` can do (a parse error is `Maybe`: validation reports it).
pub(crate) fn truth(source: &str) -> Truth {
    let Ok(expr) = weft_core::expr::Expr::compile(source) else {
        return Truth::Maybe;
    };
    match fold(expr.ast()) {
        V::Bool(true) => Truth::Always,
        V::Unknown => Truth::Maybe,
        _ => Truth::Never,
    }
}

fn fold(e: &E) -> V {
    match e {
        E::Literal(l) => match l {
            LiteralValue::Boolean(b) => V::Bool(**b),
            LiteralValue::Int(i) => V::Int(**i),
            LiteralValue::UInt(u) => V::UInt(**u),
            LiteralValue::Double(d) => V::Double(**d),
            LiteralValue::String(s) if s.len() <= MAX_STRING => V::Str(s.to_string()),
            LiteralValue::Null => V::Null,
            _ => V::Unknown,
        },
        E::Call(c) if c.target.is_none() => {
            let arg = |i: usize| c.args.get(i).map(|a| fold(&a.expr)).unwrap_or(V::Unknown);
            match (c.func_name.as_str(), c.args.len()) {
                (op::LOGICAL_AND, 2) => and(arg(0), arg(1)),
                (op::LOGICAL_OR, 2) => or(arg(0), arg(1)),
                (op::LOGICAL_NOT, 1) => match arg(0) {
                    V::Bool(b) => V::Bool(!b),
                    V::Unknown => V::Unknown,
                    _ => V::Error,
                },
                (op::CONDITIONAL, 3) => match arg(0) {
                    V::Bool(true) => arg(1),
                    V::Bool(false) => arg(2),
                    V::Unknown => V::Unknown,
                    _ => V::Error,
                },
                (op::NEGATE, 1) => match arg(0) {
                    V::Int(i) => i.checked_neg().map_or(V::Error, V::Int),
                    V::Double(d) => V::Double(-d),
                    V::Unknown => V::Unknown,
                    _ => V::Error,
                },
                (f, 2) => binary(f, arg(0), arg(1)),
                _ => V::Unknown,
            }
        }
        _ => V::Unknown,
    }
}

/// `a && b`: false as soon as either side is false (whatever the other does, the condition
/// cannot be true); otherwise known only when both are.
fn and(a: V, b: V) -> V {
    match (a, b) {
        (V::Bool(false), _) | (_, V::Bool(false)) => V::Bool(false),
        (V::Bool(true), V::Bool(true)) => V::Bool(true),
        (V::Unknown, _) | (_, V::Unknown) => V::Unknown,
        _ => V::Error,
    }
}

/// `a || b`: true when the left side is true; a true right side after an unknown left one
/// stays unknown (the left side might fail first).
fn or(a: V, b: V) -> V {
    match (a, b) {
        (V::Bool(true), _) => V::Bool(true),
        (V::Bool(false), V::Bool(x)) => V::Bool(x),
        (V::Unknown, _) | (_, V::Unknown) => V::Unknown,
        (V::Bool(false), _) => V::Error,
        (_, V::Bool(true)) => V::Unknown,
        _ => V::Error,
    }
}

fn binary(f: &str, a: V, b: V) -> V {
    use std::cmp::Ordering;
    let known = |v: &V| !matches!(v, V::Unknown | V::Error);
    if matches!(a, V::Unknown) || matches!(b, V::Unknown) {
        return V::Unknown;
    }
    if !known(&a) || !known(&b) {
        return V::Error;
    }
    let cmp: Option<Ordering> = match (&a, &b) {
        (V::Int(x), V::Int(y)) => Some(x.cmp(y)),
        (V::UInt(x), V::UInt(y)) => Some(x.cmp(y)),
        (V::Double(x), V::Double(y)) => x.partial_cmp(y),
        (V::Str(x), V::Str(y)) => Some(x.cmp(y)),
        (V::Bool(x), V::Bool(y)) => Some(x.cmp(y)),
        (V::Null, V::Null) => Some(Ordering::Equal),
        _ => None,
    };
    let same_type = std::mem::discriminant(&a) == std::mem::discriminant(&b);
    match f {
        op::EQUALS | op::NOT_EQUALS => {
            if !same_type {
                // Mixed numeric equality differs between CEL versions: leave it open.
                return V::Unknown;
            }
            let eq = match (&a, &b) {
                (V::Double(x), V::Double(y)) => x == y,
                _ => cmp == Some(Ordering::Equal),
            };
            V::Bool(if f == op::EQUALS { eq } else { !eq })
        }
        op::LESS | op::LESS_EQUALS | op::GREATER | op::GREATER_EQUALS => {
            if !same_type || matches!(a, V::Null) {
                return V::Unknown;
            }
            let Some(o) = cmp else {
                return V::Bool(false); // NaN compares false
            };
            V::Bool(match f {
                op::LESS => o == Ordering::Less,
                op::LESS_EQUALS => o != Ordering::Greater,
                op::GREATER => o == Ordering::Greater,
                _ => o != Ordering::Less,
            })
        }
        op::ADD | op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO => arith(f, a, b),
        _ => V::Unknown,
    }
}

fn arith(f: &str, a: V, b: V) -> V {
    match (a, b) {
        (V::Int(x), V::Int(y)) => match f {
            op::ADD => x.checked_add(y),
            op::SUBSTRACT => x.checked_sub(y),
            op::MULTIPLY => x.checked_mul(y),
            op::DIVIDE => x.checked_div(y),
            _ => x.checked_rem(y),
        }
        .map_or(V::Error, V::Int),
        (V::UInt(x), V::UInt(y)) => match f {
            op::ADD => x.checked_add(y),
            op::SUBSTRACT => x.checked_sub(y),
            op::MULTIPLY => x.checked_mul(y),
            op::DIVIDE => x.checked_div(y),
            _ => x.checked_rem(y),
        }
        .map_or(V::Error, V::UInt),
        (V::Double(x), V::Double(y)) => match f {
            op::ADD => V::Double(x + y),
            op::SUBSTRACT => V::Double(x - y),
            op::MULTIPLY => V::Double(x * y),
            op::DIVIDE => V::Double(x / y),
            _ => V::Unknown,
        },
        (V::Str(x), V::Str(y)) if f == op::ADD => {
            if x.len() + y.len() > MAX_STRING {
                V::Unknown
            } else {
                V::Str(x + &y)
            }
        }
        _ => V::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::{Truth, truth};

    #[test]
    fn folds_what_is_constant_and_nothing_else() {
        for (src, want) in [
            ("1 > 2", Truth::Never),
            ("2 > 1", Truth::Always),
            ("(2 + 3) * 2 == 10", Truth::Always),
            ("'a' + 'b' == 'ab'", Truth::Always),
            ("1 / 0 > 1", Truth::Never),
            ("9223372036854775807 + 1 > 0", Truth::Never),
            ("3u - 4u > 0u", Truth::Never),
            ("false && x.ok", Truth::Never),
            ("x.ok && false", Truth::Never),
            ("true || x.ok", Truth::Always),
            ("x.ok || true", Truth::Maybe),
            ("x.ok", Truth::Maybe),
            ("size(start) / 0 > 1", Truth::Maybe),
            ("1 == 1.0", Truth::Maybe),
            ("true ? 1 < 2 : x", Truth::Always),
            ("'abc'", Truth::Never),
            ("[1, 2].all(i, i > 0)", Truth::Maybe),
            ("'x' * 1000000000 == ''", Truth::Maybe),
            ("!(1 < 2)", Truth::Never),
            ("-(-9223372036854775807 - 1) > 0", Truth::Never),
        ] {
            assert_eq!(truth(src), want, "{src}");
        }
    }
}
