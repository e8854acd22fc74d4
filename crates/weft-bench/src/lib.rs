//! weft-bench: the benchmark workloads behind `weft bench` and the crash-test binary, kept
//! out of the library crates so that the engine and the durable layer carry no benchmark
//! code and `weft-durable` links no storage backend.
//!
//! - [`engine`] — W1–W3 of `BENCHMARKS.md` (in memory) plus `latency` and `idle`, and the
//!   `bench.add` tool and workload plans they run.
//! - [`durable`] — W4 (`durable`, `durable_concurrent`) and the durability measurements
//!   (`durable_recovery`, `durable_compaction`) on the embedded SQLite store, and on
//!   PostgreSQL when `WEFT_BENCH_POSTGRES_URL` is set.
//! - `src/bin/weft-crashtest.rs` — the process `tests/crash.rs` kills with SIGKILL.
//!
//! Figures and how they were measured are in `docs/performance.md`.

pub mod durable;
pub mod engine;
