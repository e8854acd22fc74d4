//! `weft bench chain` prints one JSON line in the BENCHMARKS.md shape. Only the shape is
//! checked (this is a debug build): never the speed. These run with the `bench` feature
//! (`cargo test -p weft-cli --features bench --test bench`, in `.ci/run`); without it, `weft
//! bench` must say how to build a `weft` that has the workloads.

mod common;

use common::{code, stderr, stdout, weft};

#[cfg(feature = "bench")]
#[test]
fn chain_prints_one_line_with_the_required_fields() {
    let out = weft(&["bench", "chain"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON line");
    assert_eq!(v["peer"], "weft");
    assert_eq!(v["workload"], "chain");
    assert_eq!(v["metric"], "steps_per_second");
    assert_eq!(v["unit"], "steps/s");
    assert!(v["version"].is_string(), "{v}");
    assert!(v["value"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    for field in [
        "rep_seconds",
        "median_rep_seconds",
        "us_per_step",
        "peak_rss_mib",
    ] {
        assert!(
            v["extra"].get(field).is_some(),
            "extra.{field} missing: {v}"
        );
    }
    assert!(
        stderr(&out).contains("chain"),
        "progress on stderr: {}",
        stderr(&out)
    );
}

#[cfg(feature = "bench")]
#[test]
fn unknown_workload_is_a_usage_error() {
    let out = weft(&["bench", "warp-speed"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("unknown workload"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty());
}

#[cfg(not(feature = "bench"))]
#[test]
fn without_the_feature_bench_is_a_usage_error_that_names_the_build() {
    let out = weft(&["bench", "chain"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("[feature_missing]"), "{err}");
    assert!(
        err.contains("--profile perf -p weft-cli --features bench"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}
