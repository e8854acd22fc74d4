//! Fuzzes PNML import (`weft analyze net.pnml`): parse any bytes as a P/T net and analyse what
//! parses within small bounds. Nothing may panic, hang or exhaust memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_analysis::AnalysisOptions;

fuzz_target!(|data: &[u8]| {
    let Ok(xml) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(net) = weft_analysis::pnml::import(xml) else {
        return;
    };
    let opts = AnalysisOptions {
        max_states: 2_000,
        max_coverability_nodes: 2_000,
        max_bytes: 8 << 20,
        ..AnalysisOptions::default()
    };
    let _ = weft_analysis::analyze_net(&net, &opts);
});
