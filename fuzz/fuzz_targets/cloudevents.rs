//! Fuzzes the CloudEvents reading of `POST /v1/events` (`weft_core::cloudevents`), all
//! three modes. The first byte picks the mode: 0 structured (`application/cloudevents+json`),
//! 1 batch, 2 `application/json` (either), anything else binary, where the input is header
//! lines (`name: value`), an empty line, then the body (the first header named
//! `content-type` gives its type). Every input must give events or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::cloudevents::{is_binary, parse_binary, parse_structured};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        0 => check(parse_structured(rest, Some(false))),
        1 => check(parse_structured(rest, Some(true))),
        2 => check(parse_structured(rest, None)),
        _ => {
            let split = rest
                .windows(2)
                .position(|w| w == b"\n\n")
                .unwrap_or(rest.len());
            let (head, body) = rest.split_at(split);
            let body = body.get(2..).unwrap_or_default();
            let headers: Vec<(&str, &[u8])> = head
                .split(|b| *b == b'\n')
                .filter_map(|line| {
                    let colon = line.iter().position(|b| *b == b':')?;
                    let name = std::str::from_utf8(&line[..colon]).ok()?;
                    Some((name.trim(), line[colon + 1..].trim_ascii()))
                })
                .collect();
            let ct = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                .and_then(|(_, v)| std::str::from_utf8(v).ok());
            let _ = is_binary(headers.iter().copied());
            if let Ok(e) = parse_binary(headers.iter().copied(), ct, body) {
                assert!(!e.id.is_empty() && !e.source.is_empty() && !e.ty.is_empty());
            }
        }
    }
});

fn check(r: Result<Vec<weft_core::cloudevents::Incoming>, weft_core::cloudevents::Invalid>) {
    match r {
        Ok(events) => {
            for e in events {
                assert!(!e.id.is_empty() && !e.source.is_empty() && !e.ty.is_empty());
            }
        }
        Err(e) => assert!(!e.detail.is_empty()),
    }
}
