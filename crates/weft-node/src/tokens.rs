//! API tokens → tenants, from `server.tokens_file` (a JSON object) or `server.tokens`
//! (`tokA=tenant-a,tokB=tenant-b`, also `WEFT_API_TOKENS`).

use std::collections::HashMap;
use std::path::Path;

use crate::Error;

/// Largest tokens file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

pub use weft_core::valid_name;

/// Parses `tokA=tenant-a,tokB=tenant-b`.
pub fn parse_tokens(s: &str) -> Result<HashMap<String, String>, Error> {
    let mut out = HashMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (tok, tenant) = part
            .split_once('=')
            .ok_or_else(|| Error::Tokens(format!("`{part}` is not TOKEN=TENANT")))?;
        insert(&mut out, tok.trim(), tenant.trim())?;
    }
    Ok(out)
}

/// Reads a tokens file: a JSON object `{"token": "tenant"}`.
pub fn read_tokens_file(path: &Path) -> Result<HashMap<String, String>, Error> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES).read_to_string(&mut text))
        .map_err(|e| Error::Tokens(format!("cannot read `{}`: {e}", path.display())))?;
    let map: HashMap<String, String> = serde_json::from_str(&text).map_err(|e| {
        Error::Tokens(format!(
            "`{}` is not a JSON object of token → tenant strings: {e}",
            path.display()
        ))
    })?;
    let mut out = HashMap::new();
    for (t, ten) in map {
        insert(&mut out, &t, &ten)?;
    }
    Ok(out)
}

fn insert(out: &mut HashMap<String, String>, tok: &str, tenant: &str) -> Result<(), Error> {
    if tok.is_empty() || !valid_name(tenant) {
        return Err(Error::Tokens(format!(
            "token → tenant `{tenant}`: tokens must be non-empty and tenants match \
             [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}"
        )));
    }
    out.insert(tok.to_string(), tenant.to_string());
    Ok(())
}

/// The tokens the configuration gives: the file if set, else the inline list; empty when
/// neither is set (one local tenant, loopback only).
pub fn tokens(server: &crate::config::ServerSection) -> Result<HashMap<String, String>, Error> {
    match (&server.tokens_file, &server.tokens) {
        (Some(f), _) => read_tokens_file(f),
        (None, Some(s)) => parse_tokens(s),
        (None, None) => Ok(HashMap::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tokens() {
        assert!(valid_name("tenant-a.b_c"));
        assert!(!valid_name("../x"));
        assert!(!valid_name(""));
        assert!(!valid_name("a..b"));
        let t = parse_tokens("a=t1, b=t2").expect("tokens");
        assert_eq!(t.get("b").map(String::as_str), Some("t2"));
        assert_eq!(
            parse_tokens("a").err().map(|e| e.code()),
            Some("invalid_tokens")
        );
        assert!(parse_tokens("a=../x").is_err());
    }
}
