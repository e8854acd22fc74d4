//! Classical workflow-net soundness (van der Aalst) on imported nets, and the plan-level
//! rules that issue #26 fixed: improper completion with extra tokens on the sink, cyclic nets,
//! the final marking or unique sink as the only completion, nets pm4py and ProM write,
//! constant conditions and declared outputs.

use weft_analysis::pnml::import;
use weft_analysis::{AnalysisOptions, AnalysisReport, Verdict, analyze_net, analyze_plan};
use weft_core::{Limits, parse_plan};

/// A PNML document with `body` as the page content, in pm4py's dialect.
fn net(body: &str, finals: &str) -> String {
    let fm = if finals.is_empty() {
        String::new()
    } else {
        let places: String = finals
            .split(',')
            .map(|p| format!(r#"<place idref="{p}"><text>1</text></place>"#))
            .collect();
        format!("<finalmarkings><marking>{places}</marking></finalmarkings>")
    };
    format!(
        r#"<?xml version='1.0' encoding='UTF-8'?><pnml><net id="n" type="http://www.pnml.org/version-2009/grammar/pnmlcoremodel"><name><text>n</text></name><page id="g">{body}</page>{fm}</net></pnml>"#
    )
}

/// Places, transitions and arcs from a compact description: `"i>t1>p1 p2; p1>t2>o"` means
/// transition `t1` consumes `i` and produces `p1` and `p2`. `i` holds the initial token.
fn wf(spec: &str, finals: &str) -> String {
    let mut places: Vec<String> = Vec::new();
    let mut body = String::new();
    let mut arcs = String::new();
    let place = |p: &str, places: &mut Vec<String>| {
        if !places.iter().any(|q| q == p) {
            places.push(p.to_string());
        }
    };
    for (k, part) in spec.split(';').enumerate() {
        let f: Vec<&str> = part.trim().split('>').collect();
        let (ins, t, outs) = (f[0], f[1].trim(), f[2]);
        body.push_str(&format!(
            r#"<transition id="{t}"><name><text>{t}</text></name></transition>"#
        ));
        for (j, p) in ins.split_whitespace().enumerate() {
            place(p, &mut places);
            arcs.push_str(&format!(
                r#"<arc id="a{k}i{j}" source="{p}" target="{t}"/>"#
            ));
        }
        for (j, p) in outs.split_whitespace().enumerate() {
            place(p, &mut places);
            arcs.push_str(&format!(
                r#"<arc id="a{k}o{j}" source="{t}" target="{p}"/>"#
            ));
        }
    }
    let mut ps = String::new();
    for p in &places {
        let m = if p == "i" {
            "<initialMarking><text>1</text></initialMarking>"
        } else {
            ""
        };
        ps.push_str(&format!(
            r#"<place id="{p}"><name><text>{p}</text></name>{m}</place>"#
        ));
    }
    net(&format!("{ps}{body}{arcs}"), finals)
}

fn analyze_pnml(xml: &str) -> AnalysisReport {
    let n = import(xml).expect("imports");
    analyze_net(&n, &AnalysisOptions::default())
}

fn codes(r: &AnalysisReport) -> Vec<&str> {
    r.findings.iter().map(|f| f.code.as_str()).collect()
}

// Defect 1: both branches of a split end in the sink: two tokens on `o`.
#[test]
fn two_tokens_on_the_sink_are_improper_completion() {
    for finals in ["", "o"] {
        let r = analyze_pnml(&wf("i>t1>p1 p2; p1>t2>o; p2>t3>o", finals));
        assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
        let f = r
            .findings
            .iter()
            .find(|f| f.code == "A005")
            .expect("improper completion");
        assert!(f.message.contains("`o`"), "{}", f.message);
        assert!(!r.findings.iter().any(|f| f.code == "A007"), "{r:#?}");
    }
}

// Defect 1: the sink is marked while another place still holds a token (the token is then
// stuck: a deadlock too, and never a clean completion).
#[test]
fn sink_marked_with_other_tokens_is_improper_completion() {
    let r = analyze_pnml(&wf("i>t1>p1 p2; p1>t2>o; p2 q>t3>o; i2>t0>q", "o"));
    assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
    assert!(codes(&r).contains(&"A005"), "{r:#?}");
}

// Defect 2: classical soundness is decided on cyclic workflow nets.
#[test]
fn cyclic_workflow_net_is_sound() {
    let r = analyze_pnml(&wf("i>a>p; p>b>q; q>c>p; p>e>o", ""));
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
    assert!(r.complete);
}

#[test]
fn cyclic_workflow_net_without_option_to_complete_is_not_sound() {
    // Once in the loop q ↔ r, the net can never reach `o` (not a workflow net either, since
    // q and r lead nowhere: the final marking says what completion is).
    let r = analyze_pnml(&wf("i>a>p; p>e>o; p>b>q; q>c>r; r>d>q", "o"));
    assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
    assert!(codes(&r).contains(&"A004"), "{r:#?}");
}

#[test]
fn unbounded_cyclic_net_is_not_sound_with_a_witness() {
    let r = analyze_pnml(&wf("i>a>p; p>b>p r; p>e>o; r>f>o", ""));
    assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "A003")
        .expect("unbounded");
    assert!(f.witness.as_ref().is_some_and(|w| !w.is_empty()), "{f:#?}");
    assert!(f.message.contains("not sound"), "{}", f.message);
}

// Defect 3: with a final marking, ending in another sink is a deadlock, not a completion.
#[test]
fn the_final_marking_alone_defines_completion() {
    let r = analyze_pnml(&wf("i>a>p; p>b>o; p>c>wrong", "o"));
    assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
    let d = r
        .findings
        .iter()
        .find(|f| f.code == "A001")
        .expect("deadlock");
    assert_eq!(
        d.witness.as_deref(),
        Some(&["a".to_string(), "c".to_string()][..])
    );
}

// Defect 3: without a final marking, a net with two sinks is not a workflow net, and the
// finding names them.
#[test]
fn two_sinks_without_a_final_marking_is_not_a_workflow_net() {
    let r = analyze_pnml(&wf("i>a>p; p>b>o; p>c>wrong", ""));
    assert_ne!(r.verdict, Verdict::Sound, "{r:#?}");
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "A008")
        .expect("not a workflow net");
    assert!(
        f.message.contains("`o`") && f.message.contains("`wrong`"),
        "{}",
        f.message
    );
}

// Defect 4: pm4py's own export (core model type, `<finalmarkings>`, ProM toolspecifics).
#[test]
fn imports_what_pm4py_writes() {
    let xml = std::fs::read_to_string(format!(
        "{}/tests/fixtures/pm4py_tree.pnml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture");
    let n = import(&xml).expect("pm4py's PNML imports");
    assert_eq!(n.places.len(), 7);
    assert_eq!(n.transitions.len(), 5);
    let r = analyze_net(&n, &AnalysisOptions::default());
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
}

// Defect 5: a constant condition decides the branch.
#[test]
fn constant_false_when_makes_the_branch_dead() {
    let plan = parse_plan(
        br#"{"plan_name":"c","graph_type":"acyclic",
        "events":{"start":{},"a":{},"b":{},"done":{}},
        "steps":{
          "split":{"on":["start"],"action":"t","emits":["a",{"event":"b","when":"1 > 2"}]},
          "left":{"on":["a"],"action":"t","emits":["done"]},
          "right":{"on":["b"],"action":"t","emits":["done"]}}}"#,
        &Limits::default(),
    )
    .expect("parses");
    let r = analyze_plan(&plan, &AnalysisOptions::default());
    assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "A002")
        .expect("dead step");
    assert_eq!(f.pointer, "/steps/right");
}

#[test]
fn constant_guard_after_folding_decides_the_step() {
    let plan = parse_plan(
        br#"{"plan_name":"c","graph_type":"acyclic",
        "events":{"start":{},"done":{}},
        "steps":{
          "never":{"on":["start"],"action":"t","guard":"(2 + 3) * 2 == 11 || false","emits":["done"]},
          "always":{"on":["start"],"action":"t","guard":"'a' + 'b' == 'ab'","emits":["done"]}}}"#,
        &Limits::default(),
    )
    .expect("parses");
    let r = analyze_plan(&plan, &AnalysisOptions::default());
    let dead: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.code == "A002")
        .map(|f| f.pointer.as_str())
        .collect();
    assert_eq!(dead, ["/steps/never"], "{r:#?}");
    // The remaining guard is constant true: nothing was over-approximated.
    assert!(r.findings.iter().all(|f| !f.depends_on_guards), "{r:#?}");
}

// Defect 8: with a declared output, ending on an undeclared unconsumed event is no completion.
#[test]
fn declared_outputs_are_the_only_outputs() {
    let plan = parse_plan(
        br#"{"plan_name":"o","graph_type":"acyclic",
        "events":{"start":{},"done":{"kind":"output"},"log":{}},
        "steps":{
          "work":{"on":["start"],"action":"t","emits":["log",{"event":"done","when":"result.ok"}]}}}"#,
        &Limits::default(),
    )
    .expect("parses");
    let r = analyze_plan(&plan, &AnalysisOptions::default());
    assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
    assert!(codes(&r).contains(&"A001"), "{r:#?}");
}

// Defect 4: weft writes the final marking as pm4py reads it, and reads it back; a plan's
// export is its workflow net with final marking [sink].
#[test]
fn exports_the_final_marking() {
    let xml = std::fs::read_to_string(format!(
        "{}/tests/fixtures/pm4py_tree.pnml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture");
    let n = import(&xml).expect("imports");
    let out = weft_analysis::export::pnml(&n);
    assert!(out.contains("<finalmarkings>"), "{out}");
    assert_eq!(
        import(&out).expect("re-imports").final_marking,
        n.final_marking
    );

    let plan = parse_plan(
        br#"{"plan_name":"s","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"first":{"on":["start"],"action":"t","emits":["done"]}}}"#,
        &Limits::default(),
    )
    .expect("parses");
    let w = weft_analysis::PtNet::from_plan(&plan, &Default::default()).workflow_net();
    let sink = w.place_index("sink").expect("sink");
    let fm = w.final_marking.clone().expect("final marking");
    assert_eq!(fm.iter().sum::<u32>(), 1);
    assert_eq!(fm[sink], 1);
    let mut back = import(&weft_analysis::export::pnml(&w)).expect("imports");
    back.kind = weft_analysis::NetKind::Imported;
    let r = analyze_net(&back, &AnalysisOptions::default());
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
}

// Defect 4: elements of other tools are skipped, not taken for nodes; arcs that are not P/T
// arcs are refused with a clear error.
#[test]
fn unknown_elements_are_skipped_and_special_arcs_refused() {
    let body = r#"<place id="i"><initialMarking><text>1</text></initialMarking><extra><place idref="x"/><transition/></extra></place><transition id="t"><name><text>go</text></name><foo><arc/></foo></transition><place id="o"/><arc id="a1" source="i" target="t"/><arc id="a2" source="t" target="o"/>"#;
    let n = import(&net(body, "o")).expect("imports");
    assert_eq!((n.places.len(), n.transitions.len()), (2, 1));
    assert_eq!(n.transitions[0].name, "go");
    let inhibitor = body.replace(
        r#"<arc id="a1" source="i" target="t"/>"#,
        r#"<arc id="a1" source="i" target="t"><arctype><text>inhibitor</text></arctype></arc>"#,
    );
    let e = import(&net(&inhibitor, "o")).expect_err("inhibitor arcs are refused");
    assert_eq!(e.code, "P003");
    assert!(
        e.message.contains("`a1`") && e.message.contains("inhibitor"),
        "{e}"
    );
}
