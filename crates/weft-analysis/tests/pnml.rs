//! PNML import and export: hand-written fixtures from the standard's format, error cases that
//! must be clear and never panic, and the export → import round trip.

use weft_analysis::export::pnml;
use weft_analysis::pnml::import;
use weft_analysis::{AnalysisOptions, CompileOptions, NetKind, PtNet, Verdict, analyze_net};
use weft_core::{Limits, parse_plan};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture")
}

#[test]
fn imports_pages_references_weights_and_names() {
    let net = import(&fixture("choice_deadlock.pnml")).expect("imports");
    assert_eq!(net.name, "choice & join");
    assert_eq!(net.kind, NetKind::Imported);
    assert_eq!(net.places.len(), 7);
    assert_eq!(net.transitions.len(), 5);
    let i = net.place_index("in").expect("in");
    assert_eq!(net.initial[i], 1);
    assert_eq!(net.initial.iter().sum::<u32>(), 1);
    let left = &net.transitions[net.transition_index("left").expect("left")];
    assert_eq!(
        left.pre,
        vec![(net.place_index("p1").expect("p1") as u32, 1)]
    );
    assert_eq!(left.pointer, "left");
    // Unnamed nodes are named by id; sinks are outputs.
    assert!(net.transition_index("decide_b").is_some());
    let outputs: Vec<&str> = net
        .places
        .iter()
        .filter(|p| p.is_output)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(outputs, ["lost", "out"]);
}

#[test]
fn analyses_an_imported_net() {
    let net = import(&fixture("choice_deadlock.pnml")).expect("imports");
    let r = analyze_net(&net, &AnalysisOptions::default());
    // Two sinks (`lost`, `out`) and no final marking: not a workflow net, no verdict.
    assert_eq!(r.verdict, Verdict::NotApplicable, "{r:#?}");
    let a008 = r
        .findings
        .iter()
        .find(|f| f.code == "A008")
        .expect("not a workflow net");
    assert!(a008.message.contains("`lost`, `out`"), "{}", a008.message);
    // With the final marking [out], a run ending on `lost` is a deadlock: not sound.
    let xml = fixture("choice_deadlock.pnml").replace(
        "  </net>",
        r#"<finalmarkings><marking><place idref="o"><text>1</text></place></marking></finalmarkings></net>"#,
    );
    let net = import(&xml).expect("imports");
    let r = analyze_net(&net, &AnalysisOptions::default());
    assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
    assert!(r.complete);
    assert!(r.findings.iter().any(|f| f.code == "A001"), "{r:#?}");

    let sound = import(&fixture("sound_weighted.pnml")).expect("imports");
    assert_eq!(sound.transitions[0].pre, vec![(0, 2)]);
    assert_eq!(sound.transitions[0].post, vec![(1, 3)]);
    let r = analyze_net(&sound, &AnalysisOptions::default());
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
}

#[test]
fn imported_deadlock_is_an_error_with_transition_witness() {
    let xml = fixture("choice_deadlock.pnml").replace(r#"<place id="p5"><name><text>lost</text></name></place>"#, r#"<place id="p5"><name><text>lost</text></name></place><transition id="drain"/><arc id="a13" source="p5" target="drain"/>"#);
    let net = import(&xml).expect("imports");
    let r = analyze_net(&net, &AnalysisOptions::default());
    let d = r
        .findings
        .iter()
        .find(|f| f.code == "A001")
        .expect("deadlock");
    assert!(d.is_error());
    let w = d.witness.clone().expect("witness");
    assert_eq!(w.first().map(String::as_str), Some("split"));
    assert!(
        w.contains(&"decide_b".to_string()) && w.contains(&"drain".to_string()),
        "{w:?}"
    );
    assert!(d.message.contains("`join` waits for `p4`"), "{}", d.message);
}

fn code(xml: &str) -> &'static str {
    import(xml).expect_err("must be rejected").code
}

#[test]
fn bad_documents_get_clear_errors() {
    let net = |body: &str| {
        format!(
            r#"<pnml><net id="n" type="http://www.pnml.org/version-2009/grammar/ptnet"><page id="g">{body}</page></net></pnml>"#
        )
    };
    assert_eq!(code("<pnml><net"), "P001");
    assert_eq!(
        code("<pnml><net id='n' type='x/ptnet'></pnet></pnml>"),
        "P001"
    );
    assert_eq!(code("<pnml></pnml>"), "P002");
    assert_eq!(code(""), "P002");
    assert_eq!(
        code(
            r#"<pnml><net id="n" type="http://www.pnml.org/version-2009/grammar/symmetricnet"/></pnml>"#
        ),
        "P003"
    );
    assert_eq!(
        code(&net(
            r#"<place id="p"/><arc id="a" source="p" target="nowhere"/>"#
        )),
        "P004"
    );
    assert_eq!(
        code(&net(
            r#"<place id="p"/><transition id="t"/><arc id="a" source="p" target="t"><inscription><text>99999999999999999999</text></inscription></arc>"#
        )),
        "P005"
    );
    assert_eq!(
        code(&net(
            r#"<place id="p"><initialMarking><text>70000</text></initialMarking></place>"#
        )),
        "P005"
    );
    assert_eq!(
        code(&net(
            r#"<place id="p"><initialMarking><text>-1</text></initialMarking></place>"#
        )),
        "P005"
    );
    assert_eq!(code(&net(r#"<place id="p"/><place id="p"/>"#)), "P006");
    assert_eq!(code(&net(r#"<place/>"#)), "P006");
    assert_eq!(
        code(&net(
            r#"<place id="p"/><place id="q"/><arc id="a" source="p" target="q"/>"#
        )),
        "P007"
    );
    let e = import(&net(
        r#"<place id="p"/><arc id="a" source="p" target="nowhere"/>"#,
    ))
    .expect_err("P004");
    assert!(e.message.contains("`nowhere`") && !e.hint.is_empty(), "{e}");
}

#[test]
fn export_then_import_gives_the_same_net() {
    let plan = parse_plan(
        r#"{"plan_name":"round \"trip\" <&> é.x","graph_type":"acyclic",
        "events":{"start":{},"in.put":{"kind":"input"},"x":{},"done \"q\"":{"kind":"output"},"ünï":{}},
        "steps":{
          "a.b":{"on":["start"],"action":"t","emits":["x",{"event":"ünï","when":"result.ok"}],"on_fail":"continue"},
          "c<d>":{"on":["x","in.put"],"action":"t","guard":"x.v > 1","emits":["done \"q\"","done \"q\""]},
          "e":{"on":["x"],"action":"t"}}}"#
            .as_bytes(),
        &Limits::default(),
    )
    .expect("plan");
    let net = PtNet::from_plan(&plan, &CompileOptions::default());
    let xml = pnml(&net);
    let back = import(&xml).expect("re-imports");
    assert_eq!(back, net);
    assert!(xml.contains("http://www.pnml.org/version-2009/grammar/ptnet"));

    let foreign = import(&fixture("choice_deadlock.pnml")).expect("imports");
    assert_eq!(import(&pnml(&foreign)).expect("re-imports"), foreign);
}
