//! Fuzzes what `weft validate` and `POST /v1/plans` do with a document: load it under the
//! default limits, validate it (constant CEL evaluated under its budget) and, when it has no
//! errors, analyse it within small bounds. Nothing may panic, hang or exhaust memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_analysis::AnalysisOptions;
use weft_core::{Limits, parse_plan, validate};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let Ok(plan) = parse_plan(data, &limits) else {
        return;
    };
    let v = validate(&plan, None, &limits);
    if v.findings.iter().any(weft_core::Finding::is_error) {
        return;
    }
    let opts = AnalysisOptions {
        max_states: 2_000,
        max_coverability_nodes: 2_000,
        max_bytes: 8 << 20,
        ..AnalysisOptions::default()
    };
    let _ = weft_analysis::analyze_plan(&plan, &opts);
});
