//! Names that reach storage or URLs (plan names, tenants, instance ids) are checked against
//! one strict charset, so `..`, `/`, `%2e` and control characters never get through.

use axum::http::StatusCode;

use crate::error::ApiError;

pub use weft_node::valid_name;

/// `400 invalid_name` unless `s` is a valid name.
pub fn check_name(what: &str, s: &str) -> Result<(), ApiError> {
    if valid_name(s) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_name",
            format!(
                "{what} `{}` is not a valid name",
                s.chars().take(80).collect::<String>()
            ),
        )
        .hint("names are 1–128 characters of A–Z, a–z, 0–9, `.`, `_`, `-`, start with a letter or digit and contain no `..`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_traversal_and_odd_characters() {
        assert!(valid_name("order-flow_v2.1"));
        for bad in [
            "", "..", "a/../b", "../etc", ".hidden", "a b", "a%2e", "é", "a..b",
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(!valid_name(&"a".repeat(129)));
    }
}
