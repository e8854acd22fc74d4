//! Tests of the built-in I/O tools against real parts: a local HTTP server on 127.0.0.1, a
//! temporary outbox directory, real child processes, and a fake engine (`FakeServices`) that
//! records timers and holds a fixed clock.

#![allow(clippy::unwrap_used)]

mod common;
mod context_plan;
mod email;
mod http;
mod process;
mod registry;
mod timer;
