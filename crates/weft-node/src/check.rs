//! The checks a configuration needs beyond its types: URLs whose scheme no opener knows,
//! addresses that do not parse, limits of zero, a server that would listen beyond loopback
//! without tokens, a tokens file that cannot be read, an LLM client that cannot be set up.
//! `weft config --check` runs them; every command that builds a weft runs them first.

use std::net::SocketAddr;

use crate::load::{Loaded, finding};
use crate::openers::Openers;

/// Adds a finding to `loaded` for every problem of its configuration.
pub fn check(loaded: &mut Loaded, openers: &Openers) {
    let c = loaded.config.clone();
    let mut bad = |key: &str, message: String, hint: Option<String>| {
        let from = loaded
            .source(key)
            .map(|s| format!(" (from {s})"))
            .unwrap_or_default();
        loaded.push(finding(
            "C005",
            "invalid-value",
            key,
            format!("{message}{from}"),
            hint,
        ));
    };
    if let Err(e) = openers.store_opener(&c.store.url) {
        bad(
            "store.url",
            format!("`{}`: {e}", c.store.url),
            Some("use a file path, sqlite:PATH or postgres://USER@HOST/DB".into()),
        );
    }
    if let Err(e) = openers.bus_opener(&c.bus.url) {
        bad(
            "bus.url",
            format!("`{}`: {e}", c.bus.url),
            Some("use inproc:".into()),
        );
    }
    if c.store.lease_renew_ms == 0 || c.store.lease_renew_ms >= c.store.lease_ttl_ms {
        bad(
            "store.lease_renew_ms",
            format!(
                "leases are renewed every {} ms but last {} ms",
                c.store.lease_renew_ms, c.store.lease_ttl_ms
            ),
            Some("renew well within the ttl, e.g. a third of it".into()),
        );
    }
    let positive = [
        ("bus.capacity", c.bus.capacity),
        ("limits.max_plan_bytes", c.limits.max_plan_bytes),
        ("limits.max_steps", c.limits.max_steps),
        ("limits.max_events", c.limits.max_events),
        ("limits.max_depth", c.limits.max_depth),
        ("limits.max_name_len", c.limits.max_name_len),
        ("limits.max_expr_len", c.limits.max_expr_len),
        ("limits.max_states", c.limits.max_states),
        ("server.body_limit", c.server.body_limit),
        ("server.plan_body_limit", c.server.plan_body_limit),
    ];
    for (key, v) in positive {
        if v == 0 {
            bad(key, format!("`{key}` must be at least 1"), None);
        }
    }
    if c.budget.planner.as_ref().and_then(|p| p.calls_per_minute) == Some(0) {
        bad(
            "budget.planner.calls_per_minute",
            "`budget.planner.calls_per_minute` must be at least 1 (to allow no planner call, \
             set `budget.planner.max_llm_calls = 0`)"
                .into(),
            None,
        );
    }
    if c.budget.sync_ms == 0 {
        bad(
            "budget.sync_ms",
            "`budget.sync_ms` must be at least 1".into(),
            None,
        );
    }
    if c.budget.period_secs == 0 {
        bad(
            "budget.period_secs",
            "`budget.period_secs` must be at least 1".into(),
            None,
        );
    }
    for (scope, limits) in [
        ("instance", &c.budget.instance),
        ("plan", &c.budget.plan),
        ("tenant", &c.budget.tenant),
    ] {
        let Some(l) = limits else { continue };
        for (field, v) in [
            ("max_tool_calls", l.max_tool_calls),
            ("max_llm_calls", l.max_llm_calls),
            ("max_llm_tokens", l.max_llm_tokens),
            ("max_wall_ms", l.max_wall_ms),
        ] {
            if v == Some(0) {
                let key = format!("budget.{scope}.{field}");
                bad(&key, format!("`{key}` must be at least 1"), None);
            }
        }
        if l.max_cost.is_some_and(|v| !(v >= 0.0 && v.is_finite())) {
            let key = format!("budget.{scope}.max_cost");
            bad(&key, format!("`{key}` must be a finite number ≥ 0"), None);
        }
    }
    if !(c.server.rate_limit >= 0.0 && c.server.rate_limit.is_finite()) {
        bad(
            "server.rate_limit",
            "`server.rate_limit` must be a number ≥ 0 (0: unlimited)".into(),
            None,
        );
    }
    if !(c.server.rate_burst >= 1.0 && c.server.rate_burst.is_finite()) {
        bad(
            "server.rate_burst",
            "`server.rate_burst` must be a number ≥ 1".into(),
            None,
        );
    }
    let tokens = crate::tokens::tokens(&c.server);
    if let Err(e) = &tokens {
        let key = if c.server.tokens_file.is_some() {
            "server.tokens_file"
        } else {
            "server.tokens"
        };
        bad(key, e.to_string(), None);
    }
    match c.server.listen.parse::<SocketAddr>() {
        Err(_) => bad(
            "server.listen",
            format!("`{}` is not an address and port", c.server.listen),
            Some("e.g. 127.0.0.1:8080, [::1]:8080 or 0.0.0.0:8080 (with tokens)".into()),
        ),
        Ok(addr) if !addr.ip().is_loopback() && tokens.as_ref().is_ok_and(|t| t.is_empty()) => bad(
            "server.listen",
            format!(
                "no API tokens are configured, so the server only listens on a loopback \
                 address (got {addr})"
            ),
            Some("set server.tokens_file (or WEFT_API_TOKENS), or listen on 127.0.0.1".into()),
        ),
        Ok(_) => {}
    }
    if let Some(url) = &c.telemetry.otlp_endpoint
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        bad(
            "telemetry.otlp_endpoint",
            format!("`{url}` is not an http(s) URL"),
            Some("e.g. http://127.0.0.1:4318".into()),
        );
    }
    if let Err(e) = weft_sources::build(&c.tools.declared) {
        bad("tools.declared", e.to_string(), None);
    }
    let mut names: Vec<&str> = c.tools.declared.iter().map(|d| d.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        bad(
            "tools.declared",
            format!("tool `{}` is declared twice", w[0]),
            Some("each tool name is declared once".into()),
        );
    }
    for (key, message) in crate::planner_bus::problems(&c.planner) {
        bad(key, message, None);
    }
    if c.llm.base_url.is_some()
        && let Err(e) = crate::llm::openai_config(&c.llm)
    {
        bad("llm.base_url", e.to_string(), None);
    }
}
