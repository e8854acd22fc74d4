//! The one charset for names that reach storage or URLs (tenants, plan names, instance
//! ids), in the core so that every reader of input (the node's token files, the CloudEvents
//! reader) checks names alike.

/// `[A-Za-z0-9][A-Za-z0-9._-]{0,127}` and not containing `..`.
pub fn valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        && !s.contains("..")
}

#[cfg(test)]
mod tests {
    use super::valid_name;

    #[test]
    fn names() {
        for ok in ["a", "tenant-a", "i1.x_y", &"a".repeat(128)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "a..b", "a/b", "a b", "é", &"a".repeat(129)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
