//! W4 (BENCHMARKS.md): `durable` (W4-strict) and `durable_concurrent` (W4-concurrent).
