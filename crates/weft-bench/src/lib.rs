//! weft-bench: the benchmark workloads behind `weft bench` and the crash-test binary, kept
//! out of the library crates so that the engine and the durable layer carry no benchmark
//! code and `weft-durable` links no storage backend.
//!
//! - [`engine`] — W1–W3 of `BENCHMARKS.md` (in memory) plus `latency` and `idle`, and the
//!   `bench.add` tool and workload plans they run.
//! - [`durable`] — W4 (`durable`, `durable_concurrent`) and the durability measurements
//!   (`durable_recovery`, `durable_compaction`) on the embedded SQLite store, and on
//!   PostgreSQL when `WEFT_BENCH_POSTGRES_URL` is set.
//! - [`tools`] — `tools`: the round trip weft adds to each kind of declared tool (`http`,
//!   `command`, `worker`) against calling the same endpoint directly, and worker throughput
//!   over NATS.
//! - `src/bin/weft-crashtest.rs` — the process `tests/crash.rs` kills with SIGKILL;
//!   `src/bin/weft-crashtest-tools.rs` — the one `tests/crash_tools.rs` kills while `http`
//!   and `worker` calls are in flight; [`crash`] — what both do after a restart.
//!
//! Figures and how they were measured are in `docs/performance.md`.

pub mod crash;
pub mod durable;
pub mod engine;
pub mod tools;
