//! Reading CloudEvents off a `POST /v1/events` request, in all three modes of the CloudEvents
//! HTTP binding: structured (one JSON event as the body), batch (a JSON array of them) and
//! binary (attributes in `ce-*` headers, the body is the event's data). Pure functions of
//! the body and headers, in the core because they do no I/O: the server's `events.rs` maps
//! their errors to problems, and the fuzz targets (`fuzz/`) call them without building the
//! server.
//!
//! Every mode gives the same checked [`Incoming`] events under the same rules: `specversion`
//! 1.0; `id`, `source` and `type` present and non-empty; `type` at most 256 bytes without
//! control characters; `weftinstance` a valid name; data JSON (or, in binary mode,
//! `text/plain` as a JSON string).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

/// Most events in one batch.
pub const MAX_BATCH: usize = 10_000;

/// One incoming event, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// `source`.
    pub source: String,
    /// `id`.
    pub id: String,
    /// `type`: the plan event it becomes.
    pub ty: String,
    /// `data` (`{}` when absent).
    pub data: Value,
    /// `weftinstance`: the one instance it is for.
    pub instance: Option<String>,
    /// `weftcorrelation`.
    pub correlation: Option<String>,
}

/// Why a request holds no acceptable event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// `invalid_json` (the body is not JSON), `invalid_cloudevent` (anything else wrong) or
    /// `unsupported_media_type` (binary-mode data of a type weft cannot take).
    pub code: &'static str,
    /// What was wrong.
    pub detail: String,
}

fn invalid(detail: String) -> Invalid {
    Invalid {
        code: "invalid_cloudevent",
        detail,
    }
}

/// A CloudEvent as sent, parsed straight from the body (attributes weft does not use are
/// skipped, string attributes borrowed from the body when they hold no escapes).
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    specversion: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    source: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    ty: Option<Cow<'a, str>>,
    #[serde(default = "no_data")]
    data: Value,
    #[serde(default, deserialize_with = "present")]
    data_base64: bool,
    #[serde(default)]
    weftinstance: Option<String>,
    #[serde(default)]
    weftcorrelation: Option<String>,
}

fn no_data() -> Value {
    Value::Object(serde_json::Map::new())
}

/// `true` whenever the attribute is there (even `null`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

fn json_error(e: &serde_json::Error, what: &str) -> Invalid {
    if e.is_data() {
        invalid(format!("{what}: {e}"))
    } else {
        Invalid {
            code: "invalid_json",
            detail: format!("the request body is not valid JSON: {e}"),
        }
    }
}

/// The events of a structured-mode or batch body, checked. `batch`: `Some(true)` for
/// `application/cloudevents-batch+json`, `Some(false)` for `application/cloudevents+json`,
/// `None` for `application/json` (an array is then a batch). A JSON syntax error is
/// `invalid_json`, anything else wrong `invalid_cloudevent`.
pub fn parse_structured(bytes: &[u8], batch: Option<bool>) -> Result<Vec<Incoming>, Invalid> {
    let raw = parse_events(bytes, batch)?;
    let many = raw.len() > 1;
    raw.into_iter()
        .enumerate()
        .map(|(k, e)| check_event(e, many.then_some(k)))
        .collect()
}

fn parse_events(bytes: &[u8], batch: Option<bool>) -> Result<Vec<RawEvent<'_>>, Invalid> {
    let is_array = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    match (is_array, batch) {
        (true, Some(true) | None) => {
            let events: Vec<RawEvent<'_>> = serde_json::from_slice(bytes)
                .map_err(|e| json_error(&e, "a batch is a JSON array of CloudEvent objects"))?;
            if events.len() > MAX_BATCH {
                return Err(invalid(format!(
                    "a batch holds at most {MAX_BATCH} events, got {}",
                    events.len()
                )));
            }
            Ok(events)
        }
        (true, Some(false)) => Err(invalid(
            "a batch must be sent as application/cloudevents-batch+json".into(),
        )),
        (false, Some(true)) => {
            // Keep JSON syntax errors apart from a well-formed non-array.
            serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
                .map_err(|e| json_error(&e, ""))?;
            Err(invalid(
                "application/cloudevents-batch+json takes a JSON array of events".into(),
            ))
        }
        (false, _) => serde_json::from_slice(bytes)
            .map(|e| vec![e])
            .map_err(|e| json_error(&e, "a CloudEvent is a JSON object")),
    }
}

/// Checks one parsed event (`k`: its index in a batch, for the message).
fn check_event(e: RawEvent<'_>, k: Option<usize>) -> Result<Incoming, Invalid> {
    let at = || k.map_or_else(String::new, |k| format!("event {k}: "));
    if e.data_base64 {
        return Err(invalid(format!(
            "{}`data_base64` is not supported; send JSON `data`",
            at()
        )));
    }
    check(
        Attributes {
            specversion: e.specversion.as_deref(),
            id: e.id.as_deref(),
            source: e.source.as_deref(),
            ty: e.ty.as_deref(),
            instance: e.weftinstance.as_deref(),
        },
        &at,
        "`",
    )?;
    Ok(Incoming {
        source: e.source.unwrap_or_default().into_owned(),
        id: e.id.unwrap_or_default().into_owned(),
        ty: e.ty.unwrap_or_default().into_owned(),
        data: e.data,
        instance: e.weftinstance,
        correlation: e.weftcorrelation,
    })
}

/// The attributes every mode checks.
struct Attributes<'a> {
    specversion: Option<&'a str>,
    id: Option<&'a str>,
    source: Option<&'a str>,
    ty: Option<&'a str>,
    instance: Option<&'a str>,
}

/// The checks of every mode. `at`: where (a batch index); `quote`: how an attribute is named
/// in messages (`` ` `` for a JSON attribute, `` `ce- `` for a header).
fn check(a: Attributes<'_>, at: &dyn Fn() -> String, quote: &str) -> Result<(), Invalid> {
    let name = |n: &str| format!("{quote}{n}`");
    match a.specversion {
        Some("1.0") => {}
        Some(other) => {
            return Err(invalid(format!(
                "{}{} is `{}`; only 1.0 is supported",
                at(),
                name("specversion"),
                other.chars().take(40).collect::<String>()
            )));
        }
        None => {
            return Err(invalid(format!(
                "{}{} is missing",
                at(),
                name("specversion")
            )));
        }
    }
    for (n, v) in [("id", a.id), ("source", a.source), ("type", a.ty)] {
        if v.is_none_or(str::is_empty) {
            return Err(invalid(format!("{}{} is missing or empty", at(), name(n))));
        }
    }
    let ty = a.ty.unwrap_or_default();
    if ty.len() > 256 || ty.chars().any(char::is_control) {
        return Err(invalid(format!(
            "{}{} is not a valid event name",
            at(),
            name("type")
        )));
    }
    if let Some(i) = a.instance
        && !crate::valid_name(i)
    {
        return Err(invalid(format!(
            "{}{} is not a valid instance id",
            at(),
            name("weftinstance")
        )));
    }
    Ok(())
}

/// Does the request carry a binary-mode event (any `ce-` header)? `headers`: names
/// (any case) and raw values.
pub fn is_binary<'a>(headers: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> bool {
    headers
        .into_iter()
        .any(|(n, _)| n.len() > 3 && n.as_bytes()[..3].eq_ignore_ascii_case(b"ce-"))
}

/// The binary-mode event of a request: its attributes from the `ce-*` headers
/// (percent-decoded, as the binding asks senders to encode them), its data from the body
/// as `content_type` says: JSON (`application/json`, `text/json`, any `+json`; an empty body
/// is `{}`) or `text/plain` (a JSON string). Other types are `unsupported_media_type`.
pub fn parse_binary<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Incoming, Invalid> {
    let mut attrs: [Option<String>; 6] = Default::default();
    const NAMES: [&str; 6] = [
        "specversion",
        "id",
        "source",
        "type",
        "weftinstance",
        "weftcorrelation",
    ];
    for (n, v) in headers {
        let Some(attr) = n
            .get(..3)
            .filter(|p| p.eq_ignore_ascii_case("ce-"))
            .and_then(|_| n.get(3..))
        else {
            continue;
        };
        let Some(k) = NAMES.iter().position(|a| attr.eq_ignore_ascii_case(a)) else {
            continue;
        };
        if attrs[k].is_some() {
            return Err(invalid(format!(
                "the `ce-{}` header is given twice",
                NAMES[k]
            )));
        }
        let value = percent_decode(v).ok_or_else(|| {
            invalid(format!(
                "the `ce-{}` header is not percent-encoded UTF-8",
                NAMES[k]
            ))
        })?;
        attrs[k] = Some(value);
    }
    check(
        Attributes {
            specversion: attrs[0].as_deref(),
            id: attrs[1].as_deref(),
            source: attrs[2].as_deref(),
            ty: attrs[3].as_deref(),
            instance: attrs[4].as_deref(),
        },
        &String::new,
        "`ce-",
    )
    .map_err(|mut e| {
        e.detail = e.detail.replace("is missing", "header is missing");
        e
    })?;
    let data = binary_data(content_type, body)?;
    let [_, id, source, ty, instance, correlation] = attrs;
    Ok(Incoming {
        source: source.unwrap_or_default(),
        id: id.unwrap_or_default(),
        ty: ty.unwrap_or_default(),
        data,
        instance,
        correlation,
    })
}

/// The data of a binary-mode event.
fn binary_data(content_type: Option<&str>, body: &[u8]) -> Result<Value, Invalid> {
    let ct = content_type.unwrap_or("application/json");
    let json = ct == "application/json" || ct == "text/json" || ct.ends_with("+json");
    if json {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(no_data());
        }
        return serde_json::from_slice(body).map_err(|e| Invalid {
            code: "invalid_json",
            detail: format!("the body (the event's data, {ct}) is not valid JSON: {e}"),
        });
    }
    if ct == "text/plain" {
        return std::str::from_utf8(body)
            .map(|s| Value::String(s.to_string()))
            .map_err(|_| invalid("the body (the event's data, text/plain) is not UTF-8".into()));
    }
    Err(Invalid {
        code: "unsupported_media_type",
        detail: format!(
            "binary-mode event data must be JSON (application/json, text/json, +json) or text/plain, got `{}`",
            ct.chars().take(80).collect::<String>()
        ),
    })
}

/// `%XX`-decodes a header value into UTF-8; `None` when it is not valid.
fn percent_decode(v: &[u8]) -> Option<String> {
    if !v.contains(&b'%') {
        return String::from_utf8(v.to_vec()).ok();
    }
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' {
            let hex = v.get(i + 1..i + 3)?;
            let s = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
            i += 3;
        } else {
            out.push(v[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h<'a>(pairs: &'a [(&'a str, &'a str)]) -> Vec<(&'a str, &'a [u8])> {
        pairs.iter().map(|(n, v)| (*n, v.as_bytes())).collect()
    }

    const REQUIRED: [(&str, &str); 4] = [
        ("ce-specversion", "1.0"),
        ("CE-Id", "e1"),
        ("ce-source", "/src"),
        ("ce-type", "go"),
    ];

    #[test]
    fn a_binary_event_reads_its_headers_and_body() {
        let mut pairs = REQUIRED.to_vec();
        pairs.push(("ce-weftinstance", "i1"));
        pairs.push(("ce-weftcorrelation", "c%20%C3%A9"));
        pairs.push(("content-length", "9"));
        let e = parse_binary(h(&pairs), Some("application/json"), br#"{"n": 1}"#).unwrap();
        assert_eq!(
            (e.id.as_str(), e.source.as_str(), e.ty.as_str()),
            ("e1", "/src", "go")
        );
        assert_eq!(e.data, serde_json::json!({"n": 1}));
        assert_eq!(e.instance.as_deref(), Some("i1"));
        assert_eq!(e.correlation.as_deref(), Some("c é"));
        let text = parse_binary(h(&REQUIRED), Some("text/plain"), b"hello").unwrap();
        assert_eq!(text.data, "hello");
        let empty = parse_binary(h(&REQUIRED), None, b"").unwrap();
        assert_eq!(empty.data, serde_json::json!({}));
    }

    #[test]
    fn a_binary_event_without_a_required_header_is_refused_by_name() {
        for missing in ["ce-specversion", "CE-Id", "ce-source", "ce-type"] {
            let pairs: Vec<_> = REQUIRED
                .iter()
                .copied()
                .filter(|(n, _)| *n != missing)
                .collect();
            let err = parse_binary(h(&pairs), None, b"{}").unwrap_err();
            assert_eq!(err.code, "invalid_cloudevent");
            let want = format!("`ce-{}` header is missing", missing[3..].to_lowercase());
            assert!(err.detail.contains(&want), "{}", err.detail);
        }
        let mut pairs = REQUIRED.to_vec();
        pairs.push(("ce-id", "again"));
        assert!(
            parse_binary(h(&pairs), None, b"{}")
                .unwrap_err()
                .detail
                .contains("twice")
        );
        let err = parse_binary(h(&REQUIRED), Some("image/png"), b"\x89PNG").unwrap_err();
        assert_eq!(err.code, "unsupported_media_type");
        let err = parse_binary(h(&REQUIRED), None, b"{").unwrap_err();
        assert_eq!(err.code, "invalid_json");
        let bad = [("ce-specversion", "1.0"), ("ce-id", "%zz")];
        assert!(parse_binary(h(&bad), None, b"").is_err());
    }

    #[test]
    fn binary_mode_is_any_ce_header() {
        assert!(is_binary(h(&[("Ce-Type", "x")])));
        assert!(!is_binary(h(&[("content-type", "x"), ("ce-", "")])));
        // Found by the fuzzer: a name with a multi-byte character across byte 3 (a slice
        // there panicked); HTTP header names are ASCII, but the function takes any `&str`.
        assert!(!is_binary(h(&[("ceӕoubce", "x")])));
        assert!(parse_binary(h(&[("ceӕoubce", "x")]), None, b"{}").is_err());
    }
}
