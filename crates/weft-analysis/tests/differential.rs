//! The differential test of issue #26: weft's analysis against an independent classical
//! soundness check, on nets written by pm4py.
//!
//! `tests/fixtures/differential/corpus.jsonl` was made by `python/analysis-check/generate.py`
//! (pinned pm4py in the venv of `scripts/analysis-check-env.sh`; see its README): random
//! workflow nets from pm4py's process-tree generator, about half of them mutated, exported by
//! pm4py, each with the verdict, reachable-state count, deadlock count and boundedness that a
//! reference implementation over pm4py's net objects computed (cross-checked against pm4py's
//! own reachability graph). weft must agree on every net. The few acyclic nets with more than
//! 20,000 markings are analysed with `max_states` 20,000, so weft takes its partial-order
//! reduced exploration there and must still reach the same verdict; a large cyclic one (where
//! the reduction would not be exact) is explored in full under the default limit. A large net
//! whose reduced graph also passes 20,000 markings (a mutation that adds conflicts can do that;
//! weft then says unknown) is analysed again under the reference's limit, 150,000, and must
//! agree exactly; at least one large net must be decided by the reduction.
//! `WEFT_ANALYSIS_CORPUS=<file>` checks another corpus instead: `.ci/run` generates a fresh
//! one with pm4py on every run.
//!
//! `examples.json` holds the same reference's verdicts on the workflow nets that `weft graph
//! --format pnml` exports for the example plans (`WEFT_ANALYSIS_EXPORT_DIR=dir cargo test -p
//! weft-analysis --test differential` writes them for the script): weft's export must still be
//! byte for byte what was checked, weft's classical verdict on it must equal the reference's,
//! and where that differs from the plan's own verdict the difference is listed below with its
//! reason.

use serde_json::Value;
use weft_analysis::export::pnml;
use weft_analysis::pnml::import;
use weft_analysis::{
    AnalysisOptions, AnalysisReport, CompileOptions, NetKind, PtNet, Verdict, analyze_net,
    analyze_plan,
};
use weft_core::{Limits, parse_plan, validate};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/differential/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture")
}

fn has(r: &AnalysisReport, code: &str) -> bool {
    r.findings.iter().any(|f| f.code == code)
}

#[test]
fn weft_agrees_with_the_reference_on_every_pm4py_net() {
    // Benchmark mode: a bigger corpus made by generate.py, e.g. with `--count 5000`.
    let corpus = match std::env::var("WEFT_ANALYSIS_CORPUS") {
        Ok(path) => std::fs::read_to_string(path).expect("WEFT_ANALYSIS_CORPUS"),
        Err(_) => fixture("corpus.jsonl"),
    };
    let mut checked = 0usize;
    let mut large = 0usize;
    let mut reduced_large = 0usize;
    let mut disagreements = Vec::new();
    for line in corpus.lines().filter(|l| !l.trim().is_empty()) {
        let row: Value = serde_json::from_str(line).expect("corpus row");
        let name = row["name"].as_str().unwrap_or("?");
        let net = match import(row["pnml"].as_str().unwrap_or("")) {
            Ok(n) => n,
            Err(e) => {
                disagreements.push(format!("{name}: import failed: {e}"));
                continue;
            }
        };
        let is_large = row["large"].as_bool() == Some(true);
        let opts = if is_large && net.has_cycle() {
            // Partial-order reduction is exact only without cycles: a large cyclic net gets
            // the default limit and is explored in full, as `weft analyze` would.
            AnalysisOptions::default()
        } else {
            AnalysisOptions {
                // The reference explored at most 20,000 markings of the others; a lower limit
                // than the default keeps the unbounded nets (Karp–Miller decides those) quick,
                // and makes weft reduce the large acyclic ones.
                max_states: 20_000,
                ..AnalysisOptions::default()
            }
        };
        let mut r = analyze_net(&net, &opts);
        let mut widened = false;
        if is_large && !net.has_cycle() && r.verdict == Verdict::Unknown && !r.reduced {
            // A large net whose reduction also passes 20,000 markings (mutations that add
            // conflicts defeat stubborn sets): weft rightly says unknown at that limit, so it
            // gets the reference's own limit (150,000 markings) and must then agree exactly.
            r = analyze_net(
                &net,
                &AnalysisOptions {
                    max_states: 150_000,
                    ..AnalysisOptions::default()
                },
            );
            widened = true;
        }
        let sound = row["sound"].as_bool() == Some(true);
        let bounded = row["bounded"].as_bool() == Some(true);
        let mut why = Vec::new();
        if (r.verdict == Verdict::Sound) != sound || r.verdict == Verdict::Unknown {
            why.push(format!("verdict {:?}, reference sound={sound}", r.verdict));
        }
        if !bounded && r.bounded != Some(false) {
            why.push(format!("bounded {:?}, reference unbounded", r.bounded));
        }
        if bounded {
            if r.bounded != Some(true) {
                why.push(format!("bounded {:?}, reference bounded", r.bounded));
            }
            let deadlocks = row["deadlocks"].as_u64().unwrap_or(0) > 0;
            if is_large {
                large += 1;
                reduced_large += usize::from(r.reduced);
                if !r.reduced && !net.has_cycle() && !widened {
                    why.push("expected the partial-order reduced exploration".into());
                }
            } else {
                let states = row["states"].as_u64().unwrap_or(0) as usize;
                if r.states != states || !r.complete {
                    why.push(format!(
                        "{} states (complete: {}), reference {states}",
                        r.states, r.complete
                    ));
                }
            }
            // Reduced graphs keep every dead marking, so deadlocks compare there too.
            if has(&r, "A001") != deadlocks {
                why.push(format!(
                    "deadlock found: {}, reference: {deadlocks}",
                    has(&r, "A001")
                ));
            }
        }
        if !why.is_empty() {
            disagreements.push(format!("{name}: {}", why.join("; ")));
        }
        checked += 1;
    }
    assert!(checked >= 500, "only {checked} nets in the corpus");
    assert!(large >= 1, "no net above 20,000 markings");
    assert!(
        reduced_large >= 1,
        "no large net was decided by the partial-order reduction"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}

/// Plans whose workflow net is not classically sound although the plan is sound for weft
/// (a definitional difference, see `workflow.rs`), with the reason.
const PLAN_NOTION_DIFFERS: &[(&str, &str)] = &[
    (
        "failure-handling",
        "`start` feeds two independent branches that each end on an output event, so a run \
         ends with two output tokens: complete for weft, two tokens on the sink classically",
    ),
    (
        "guard-branching",
        "`classify` may emit the output `audit.requested` besides `classified`, whose branch \
         ends on the output `approved`: two output tokens, and the sink is marked while \
         `classified` is still being handled",
    ),
];

#[test]
fn example_plans_export_workflow_nets_the_reference_agrees_with() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let export_dir = std::env::var_os("WEFT_ANALYSIS_EXPORT_DIR");
    let expected: Value = if export_dir.is_some() {
        Value::Null
    } else {
        serde_json::from_str(&fixture("examples.json")).expect("examples.json")
    };
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    let mut seen = 0;
    for path in names {
        let Ok(plan) = parse_plan(&std::fs::read(&path).expect("read"), &Limits::default()) else {
            continue;
        };
        if validate(&plan, None, &Limits::default()).net.is_none() {
            continue;
        }
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("?")
            .to_string();
        let w = PtNet::from_plan(&plan, &CompileOptions::default()).workflow_net();
        let xml = pnml(&w);
        if let Some(d) = &export_dir {
            std::fs::write(std::path::Path::new(d).join(format!("{stem}.pnml")), &xml)
                .expect("write export");
            continue;
        }
        let Some(row) = expected.get(&stem) else {
            panic!("{stem}: not in examples.json; regenerate it (see python/analysis-check)");
        };
        assert_eq!(
            row["pnml"].as_str(),
            Some(xml.as_str()),
            "{stem}: the export changed"
        );
        // weft's classical check of its own export, read back as a foreign net.
        let mut back = import(&xml).expect("weft reads its export");
        back.kind = NetKind::Imported;
        let classical = analyze_net(&back, &AnalysisOptions::default());
        let reference = row["sound"].as_bool() == Some(true);
        assert_eq!(
            classical.verdict == Verdict::Sound,
            reference,
            "{stem}: weft's classical verdict {:?} on its export, reference sound={reference}",
            classical.verdict
        );
        let plan_sound = analyze_plan(&plan, &AnalysisOptions::default()).verdict == Verdict::Sound;
        let listed = PLAN_NOTION_DIFFERS.iter().any(|(n, _)| *n == stem);
        assert_eq!(
            plan_sound != reference,
            listed,
            "{stem}: plan sound={plan_sound}, workflow net classically sound={reference}"
        );
        seen += 1;
    }
    if export_dir.is_none() {
        assert!(seen >= 5, "only {seen} example plans");
    }
}
