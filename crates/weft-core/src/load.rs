//! Turning untrusted bytes into a [`Plan`]: size and shape limits first, then serde, with
//! every failure reported as a [`LoadError`] that carries a line, a column and a JSON pointer.
//!
//! Plans come from LLMs and from the network, so this is the first line of defence: nothing
//! here may panic, allocate without bound, or recurse without bound.

use crate::plan::Plan;

/// Limits applied while loading a plan. All are configurable (`weft --max-plan-bytes` etc.).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted plan document, in bytes (default 8 MiB).
    pub max_bytes: usize,
    /// Most steps a plan may have (default 50,000).
    pub max_steps: usize,
    /// Most events a plan may have (default 50,000).
    pub max_events: usize,
    /// Longest event or step name, in characters (default 256).
    pub max_name_len: usize,
    /// Deepest JSON nesting anywhere in the document (default 64).
    pub max_depth: usize,
    /// Longest CEL expression, in bytes (default 4096).
    pub max_expr_len: usize,
    /// Deepest nesting of child plans (`plan.run` running a plan that runs one, …; default 16).
    pub max_child_depth: usize,
    /// The work one CEL evaluation may do (default 1,000,000 operations in loops and 16 Mi
    /// units of values built in them; `cel_budget.rs`).
    pub cel_budget: crate::cel_budget::Budget,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 8 * 1024 * 1024,
            max_steps: 50_000,
            max_events: 50_000,
            max_name_len: 256,
            max_depth: 64,
            max_expr_len: 4096,
            max_child_depth: 16,
            cel_budget: crate::cel_budget::Budget::default(),
        }
    }
}

/// Why a document could not be loaded as a plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The document is larger than [`Limits::max_bytes`].
    #[error("plan document is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Size of the document.
        size: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The bytes are not UTF-8.
    #[error("plan is not valid UTF-8 at line {line}, column {column} (byte {offset})")]
    InvalidUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// JSON nesting deeper than [`Limits::max_depth`].
    #[error("JSON nesting deeper than {limit} levels at line {line}, column {column}")]
    TooDeep {
        /// The limit in force.
        limit: usize,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// Malformed JSON or a document that does not match the plan model.
    #[error("{message} at line {line}, column {column} (at {pointer})")]
    Syntax {
        /// What serde said.
        message: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// JSON pointer to the value being read.
        pointer: String,
    },
    /// More steps or events than the limits allow.
    #[error("plan has {count} {what}, over the limit of {limit}")]
    TooMany {
        /// `steps` or `events`.
        what: &'static str,
        /// How many the plan has.
        count: usize,
        /// The limit in force.
        limit: usize,
    },
}

impl LoadError {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            LoadError::TooLarge { .. } => "L001",
            LoadError::InvalidUtf8 { .. } => "L002",
            LoadError::TooDeep { .. } => "L003",
            LoadError::Syntax { .. } => "L004",
            LoadError::TooMany { .. } => "L005",
        }
    }

    /// A suggestion for fixing the problem.
    pub fn hint(&self) -> &'static str {
        match self {
            LoadError::TooLarge { .. } => {
                "split the plan into subplans (`plan.run`) or raise --max-plan-bytes"
            }
            LoadError::InvalidUtf8 { .. } => "save the plan as UTF-8 JSON",
            LoadError::TooDeep { .. } => "flatten the nested arguments or raise the depth limit",
            LoadError::Syntax { .. } => {
                "check the plan against `weft schema`; unknown fields are rejected"
            }
            LoadError::TooMany { .. } => "split the plan into subplans or raise the limit",
        }
    }

    /// JSON pointer of the problem, when there is one.
    pub fn pointer(&self) -> &str {
        match self {
            LoadError::Syntax { pointer, .. } => pointer,
            LoadError::TooMany { what, .. } => {
                if *what == "steps" {
                    "/steps"
                } else {
                    "/events"
                }
            }
            _ => "",
        }
    }
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &[u8], offset: usize) -> (usize, usize) {
    let end = offset.min(text.len());
    let before = &text[..end];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// Finds the first place where JSON nesting exceeds `limit`, skipping strings.
fn check_depth(text: &[u8], limit: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in text.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return Some(i);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Parses a plan from bytes, enforcing `limits`.
pub fn parse_plan(bytes: &[u8], limits: &Limits) -> Result<Plan, LoadError> {
    if bytes.len() > limits.max_bytes {
        return Err(LoadError::TooLarge {
            size: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let offset = e.valid_up_to();
            let (line, column) = line_col(bytes, offset);
            return Err(LoadError::InvalidUtf8 {
                offset,
                line,
                column,
            });
        }
    };
    if let Some(at) = check_depth(bytes, limits.max_depth) {
        let (line, column) = line_col(bytes, at);
        return Err(LoadError::TooDeep {
            limit: limits.max_depth,
            line,
            column,
        });
    }
    // Fast path: plain serde. Only when it fails is the document read again with path
    // tracking, to locate the error as a JSON pointer.
    let plan: Plan = match serde_json::from_str(text) {
        Ok(p) => p,
        Err(_) => return Err(locate_error(text)),
    };
    if plan.steps.len() > limits.max_steps {
        return Err(LoadError::TooMany {
            what: "steps",
            count: plan.steps.len(),
            limit: limits.max_steps,
        });
    }
    if plan.events.len() > limits.max_events {
        return Err(LoadError::TooMany {
            what: "events",
            count: plan.events.len(),
            limit: limits.max_events,
        });
    }
    Ok(plan)
}

/// Reads a document that failed to parse again, this time tracking the path, and turns the
/// error into a [`LoadError::Syntax`] with line, column and JSON pointer.
fn locate_error(text: &str) -> LoadError {
    let mut de = serde_json::Deserializer::from_str(text);
    let inner = match serde_path_to_error::deserialize::<_, Plan>(&mut de) {
        Err(e) => {
            let pointer = path_to_pointer(e.path());
            let inner = e.into_inner();
            return LoadError::Syntax {
                message: strip_position(&inner.to_string()),
                line: inner.line(),
                column: inner.column(),
                pointer,
            };
        }
        Ok(_) => match de.end() {
            Err(inner) => inner,
            // Unreachable in practice (the fast path failed); report the fast path's error.
            Ok(()) => match serde_json::from_str::<Plan>(text) {
                Err(e) => e,
                Ok(_) => {
                    return LoadError::Syntax {
                        message: "unreadable plan".into(),
                        line: 1,
                        column: 1,
                        pointer: String::new(),
                    };
                }
            },
        },
    };
    LoadError::Syntax {
        message: strip_position(&inner.to_string()),
        line: inner.line(),
        column: inner.column(),
        pointer: String::new(),
    }
}

/// Parses a plan from an already-decoded JSON value (e.g. an LLM tool call's arguments).
pub fn plan_from_value(value: serde_json::Value, limits: &Limits) -> Result<Plan, LoadError> {
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    parse_plan(&bytes, limits)
}

/// serde_json appends " at line L column C" to its messages; we report those separately.
/// The Rust types serde names are said in JSON words ([`crate::plain::message`]).
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => crate::plain::message(&msg[..i]),
        None => crate::plain::message(msg),
    }
}

/// Renders a serde path as an RFC 6901 JSON pointer.
fn path_to_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => {
                out.push('/');
                out.push_str(&index.to_string());
            }
            Segment::Map { key } | Segment::Enum { variant: key } => {
                out.push('/');
                out.push_str(&escape_pointer(key));
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// Escapes a key for use in a JSON pointer.
pub fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_plan_loads_unchanged() {
        let text =
            br#"{"plan_name":"sample","graph_type":"acyclic","events":{"start":{},"done":{}},
 "steps":{"first":{"on":["start"],"action":"send_email",
   "args":{"to":"a@example.com","subject":"Hi","body":"Test"},"emits":["done"]}}}"#;
        let plan = parse_plan(text, &Limits::default()).expect("sample loads");
        assert_eq!(plan.plan_name, "sample");
        assert_eq!(plan.steps["first"].emits.len(), 1);
    }

    #[test]
    fn unknown_field_has_pointer_and_position() {
        let text = b"{\"plan_name\":\"x\",\"graph_type\":\"acyclic\",\"events\":{},\n\"steps\":{\"a\":{\"on\":[],\"action\":\"noop\",\"bogus\":1}}}";
        let err = parse_plan(text, &Limits::default()).unwrap_err();
        match err {
            LoadError::Syntax {
                pointer,
                line,
                message,
                ..
            } => {
                assert_eq!(pointer, "/steps/a/bogus");
                assert_eq!(line, 2);
                assert!(message.contains("unknown field `bogus`"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn invalid_utf8_is_located() {
        let mut text = b"{\"plan_name\":\n\"".to_vec();
        text.push(0xff);
        let err = parse_plan(&text, &Limits::default()).unwrap_err();
        assert_eq!(
            err,
            LoadError::InvalidUtf8 {
                offset: 15,
                line: 2,
                column: 2
            }
        );
    }

    #[test]
    fn deep_nesting_is_refused_before_serde() {
        let text = format!("{{\"a\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        let err = parse_plan(text.as_bytes(), &Limits::default()).unwrap_err();
        assert_eq!(err.code(), "L003");
    }

    #[test]
    fn too_large_is_refused() {
        let limits = Limits {
            max_bytes: 10,
            ..Limits::default()
        };
        assert_eq!(parse_plan(&[b' '; 11], &limits).unwrap_err().code(), "L001");
    }

    #[test]
    fn on_fail_forms() {
        let text = br#"{"plan_name":"x","graph_type":"acyclic","events":{},"steps":{"a":{"on":[],"action":"n","on_fail":"emit:oops"}}}"#;
        let plan = parse_plan(text, &Limits::default()).expect("loads");
        assert_eq!(
            plan.steps["a"].on_fail,
            Some(crate::plan::OnFail::Emit("oops".into()))
        );
        let bad = br#"{"plan_name":"x","graph_type":"acyclic","events":{},"steps":{"a":{"on":[],"action":"n","on_fail":"explode"}}}"#;
        let err = parse_plan(bad, &Limits::default()).unwrap_err();
        assert_eq!(err.pointer(), "/steps/a/on_fail");
    }
}
