//! Error messages in the words of the JSON a client sent, not of the Rust types it was read
//! into: serde says `expected struct Plan`, `expected u32` or `expected enum OnFail`, axum
//! ``Cannot parse `x` to a `u32` ``. [`message`] rewrites those; the plan loader and the
//! server's request parsing pass every such message through it.

/// Rust types named in serde's and axum's messages, and what a client should read instead.
const RUST_TYPES: [(&str, &str); 12] = [
    ("usize", "a non-negative integer"),
    ("u64", "a non-negative integer"),
    ("u32", "a non-negative integer"),
    ("u16", "a non-negative integer"),
    ("u8", "a non-negative integer"),
    ("isize", "an integer"),
    ("i64", "an integer"),
    ("i32", "an integer"),
    ("i16", "an integer"),
    ("i8", "an integer"),
    ("f64", "a number"),
    ("f32", "a number"),
];

/// `msg` without the Rust types serde and axum name (`expected struct StartRequest`,
/// `expected u32`, ``Cannot parse `x` to a `u32` ``): clients see JSON words instead.
pub fn message(msg: &str) -> String {
    let mut out = msg.to_string();
    for (ty, words) in RUST_TYPES {
        for (from, to) in [
            (format!("expected {ty}"), format!("expected {words}")),
            (format!("to a `{ty}`"), format!("to {words}")),
        ] {
            let mut at = 0;
            while let Some(i) = out[at..].find(&from).map(|i| i + at) {
                let end = i + from.len();
                // Whole words only: `expected u8` is not the start of `expected u8s`.
                if out[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                    at = end;
                    continue;
                }
                out.replace_range(i..end, &to);
                at = i + to.len();
            }
        }
    }
    for (kind, words) in [
        ("struct ", "a JSON object"),
        ("enum ", "one of the allowed values"),
    ] {
        let from = format!("expected {kind}");
        let mut at = 0;
        while let Some(i) = out[at..].find(&from).map(|i| i + at) {
            let name = i + from.len();
            let mut end = name
                + out[name..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(out.len() - name);
            if end == name {
                at = end;
                continue;
            }
            // `struct X with 3 elements`: the arity of the Rust type, too.
            if let Some(rest) = out[end..].strip_prefix(" with ") {
                let digits = rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                let tail = &rest[digits..];
                if digits > 0 {
                    for unit in [" elements", " element"] {
                        if tail.starts_with(unit) {
                            end += " with ".len() + digits + unit.len();
                            break;
                        }
                    }
                }
            }
            let to = format!("expected {words}");
            out.replace_range(i..end, &to);
            at = i + to.len();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::message;

    #[test]
    fn rust_types_become_json_words() {
        assert_eq!(
            message("invalid type: integer `1`, expected struct Plan"),
            "invalid type: integer `1`, expected a JSON object"
        );
        assert_eq!(
            message("invalid length 0, expected struct StartRequest with 3 elements"),
            "invalid length 0, expected a JSON object"
        );
        assert_eq!(
            message("invalid type: string \"x\", expected u32"),
            "invalid type: string \"x\", expected a non-negative integer"
        );
        assert_eq!(
            message("Invalid URL: Cannot parse `abc` to a `u32`"),
            "Invalid URL: Cannot parse `abc` to a non-negative integer"
        );
        assert_eq!(
            message("unknown variant `x`, expected enum OnFail"),
            "unknown variant `x`, expected one of the allowed values"
        );
        // Words that only start like a type, and user text, are left alone.
        assert_eq!(message("expected u8s here"), "expected u8s here");
        assert_eq!(message("unknown field `u32`"), "unknown field `u32`");
    }
}
