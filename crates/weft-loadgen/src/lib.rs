//! weft-loadgen: the load benchmark of `weft serve` (the server's event load). It is a
//! separate binary so it can drive a release build of the server over loopback like any
//! client would: it creates a reactive plan and N waiting instances, then C closed-loop
//! keep-alive connections send CloudEvents addressed by `weftinstance` (`POST /v1/events`,
//! one event or a batch per request) or read instance state (`GET /v1/instances/{id}`) for
//! D seconds after a warm-up. It reports requests/s, accepted events/s, exact latency
//! percentiles and errors, and afterwards checks through the journal endpoint that every
//! accepted event was journaled exactly once ([`run`] says how, given that reactive
//! journals are compacted).
//!
//! Speed is measured here, never asserted in a test.

pub mod http;
pub mod run;
pub mod stats;

pub use run::{Config, DEFAULT_PLAN, Mode, Report, Verify};
