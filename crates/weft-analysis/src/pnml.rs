//! PNML import: P/T nets from other Petri-net tools (ISO/IEC 15909-2), so `weft analyze
//! net.pnml` checks standard nets and export → import round-trips weft's own nets.
//!
//! Reads places (`initialMarking/text`), transitions, arcs (`inscription/text` weights),
//! nested `<page>`s and reference nodes. weft's `<toolspecific tool="weft">` blocks restore
//! what PNML cannot say; without them, places consumed by no transition are outputs. Every
//! problem is a [`PnmlError`] with a stable code and a hint; nothing here panics on input.

use std::collections::{HashMap, HashSet};

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use crate::export::role_str;
use crate::net::{NetKind, Place, PtNet, Role, Transition};

/// Largest initial marking or arc weight accepted (markings are explored as 16-bit counts).
pub const MAX_WEIGHT: u64 = 65_535;
/// Most places plus transitions accepted.
pub const MAX_NODES: usize = 200_000;
/// Most arcs accepted.
pub const MAX_ARCS: usize = 1_000_000;

/// Why a PNML document could not be imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct PnmlError {
    /// Stable code: `P001` malformed XML, `P002` no net, `P003` not a P/T net, `P004` unknown
    /// arc endpoint, `P005` bad number or weight too large, `P006` duplicate or missing id,
    /// `P007` arc between two places or two transitions, `P008` too large.
    pub code: &'static str,
    /// What is wrong, naming the element.
    pub message: String,
    /// How to fix it.
    pub hint: &'static str,
}

fn err(code: &'static str, message: String, hint: &'static str) -> PnmlError {
    PnmlError {
        code,
        message,
        hint,
    }
}

#[derive(Default)]
struct RawNode {
    id: String,
    name: Option<String>,
    marking: Option<String>,
    weft: Option<HashMap<String, String>>,
}

struct RawArc {
    id: String,
    source: String,
    target: String,
    inscription: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Cur {
    Outside,
    Net,
    Place(usize),
    Transition(usize),
    Arc(usize),
}

#[derive(Default)]
struct Raw {
    name: Option<String>,
    id: String,
    weft_net: Option<HashMap<String, String>>,
    notes: Vec<String>,
    places: Vec<RawNode>,
    transitions: Vec<RawNode>,
    arcs: Vec<RawArc>,
    refs: HashMap<String, String>,
}

fn attrs(e: &BytesStart<'_>) -> Result<HashMap<String, String>, PnmlError> {
    let mut out = HashMap::new();
    for a in e.attributes() {
        let a = a.map_err(|x| err("P001", format!("malformed attribute: {x}"), XML_HINT))?;
        let key = a.key.local_name().as_ref().to_string();
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|x| {
                err(
                    "P001",
                    format!("malformed attribute `{key}`: {x}"),
                    XML_HINT,
                )
            })?;
        out.insert(key, value.into_owned());
    }
    Ok(out)
}

const XML_HINT: &str = "Check that the file is well-formed XML (an XML linter will show where).";

fn required(a: &HashMap<String, String>, key: &str, elem: &str) -> Result<String, PnmlError> {
    a.get(key).cloned().ok_or_else(|| {
        err(
            "P006",
            format!("a <{elem}> has no `{key}` attribute"),
            "Every place, transition and arc needs an `id`; arcs need `source` and `target`.",
        )
    })
}

fn predefined(name: &str) -> Option<char> {
    Some(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "apos" => '\'',
        "quot" => '"',
        _ => return None,
    })
}

/// Parses a PNML document holding one P/T net.
pub fn import(xml: &str) -> Result<PtNet, PnmlError> {
    let raw = parse(xml)?;
    build(raw)
}

fn parse(xml: &str) -> Result<Raw, PnmlError> {
    let mut reader = Reader::from_str(xml);
    let mut raw = Raw::default();
    let mut stack: Vec<String> = Vec::new();
    let mut cur = Cur::Outside;
    let mut nets = 0usize;
    let mut tool_depth: Option<(usize, bool)> = None; // (stack depth, is weft's)
    let mut text: Option<String> = None;
    loop {
        let ev = reader.read_event().map_err(|e| {
            err(
                "P001",
                format!("malformed XML at byte {}: {e}", reader.error_position()),
                XML_HINT,
            )
        })?;
        let (start, empty) = match &ev {
            Event::Start(e) => (Some(e), false),
            Event::Empty(e) => (Some(e), true),
            _ => (None, false),
        };
        if let Some(e) = start {
            let name = e.local_name().as_ref().to_string();
            if let Some((_, weft)) = tool_depth {
                if weft {
                    let a = attrs(e)?;
                    match (name.as_str(), cur) {
                        ("net", Cur::Net) => raw.weft_net = Some(a),
                        ("place", Cur::Place(i)) => raw.places[i].weft = Some(a),
                        ("transition", Cur::Transition(i)) => raw.transitions[i].weft = Some(a),
                        ("note", Cur::Net) if !empty => text = Some(String::new()),
                        _ => {}
                    }
                }
            } else {
                open(&name, e, &mut raw, &mut cur, &mut nets, &stack, &mut text)?;
                if empty && matches!(name.as_str(), "place" | "transition" | "arc") {
                    cur = Cur::Net;
                }
                if name == "toolspecific" && !empty {
                    let a = attrs(e)?;
                    tool_depth = Some((stack.len(), a.get("tool").is_some_and(|t| t == "weft")));
                }
            }
            if !empty {
                stack.push(name);
            }
            continue;
        }
        match ev {
            Event::End(_) => {
                let Some(name) = stack.pop() else { continue };
                if let Some(t) = text.take_if(|_| name == "text" || name == "note") {
                    close_text(&mut raw, cur, &stack, &name, t);
                }
                if tool_depth.is_some_and(|(d, _)| d == stack.len()) {
                    tool_depth = None;
                } else if tool_depth.is_none() {
                    match name.as_str() {
                        "place" | "transition" | "arc" => cur = Cur::Net,
                        "net" if cur == Cur::Net => cur = Cur::Outside,
                        _ => {}
                    }
                }
            }
            Event::Text(t) => {
                if let Some(buf) = text.as_mut() {
                    buf.push_str(&t.xml10_content());
                }
            }
            Event::CData(t) => {
                if let Some(buf) = text.as_mut() {
                    buf.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) => {
                if let Some(buf) = text.as_mut() {
                    let c = match r.resolve_char_ref() {
                        Ok(Some(c)) => Some(c),
                        Ok(None) => predefined(&r.xml10_content()),
                        Err(e) => {
                            return Err(err(
                                "P001",
                                format!("bad character reference: {e}"),
                                XML_HINT,
                            ));
                        }
                    };
                    match c {
                        Some(c) => buf.push(c),
                        None => {
                            return Err(err(
                                "P001",
                                format!("unknown entity `&{};`", r.xml10_content()),
                                "Only the five predefined XML entities and character references are supported.",
                            ));
                        }
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if nets == 0 {
        return Err(err(
            "P002",
            "the document contains no <net>".into(),
            "A PNML file is <pnml><net type=\"…/ptnet\">…</net></pnml>.",
        ));
    }
    Ok(raw)
}

/// Handles a start tag outside toolspecific blocks.
fn open(
    name: &str,
    e: &BytesStart<'_>,
    raw: &mut Raw,
    cur: &mut Cur,
    nets: &mut usize,
    stack: &[String],
    text: &mut Option<String>,
) -> Result<(), PnmlError> {
    match name {
        "net" => {
            *nets += 1;
            if *nets > 1 {
                return Err(err(
                    "P002",
                    "the document contains more than one <net>".into(),
                    "Put each net in its own file; weft analyses one net at a time.",
                ));
            }
            let a = attrs(e)?;
            let ty = a.get("type").map(String::as_str).unwrap_or("");
            if !ty.to_ascii_lowercase().contains("ptnet") {
                return Err(err(
                    "P003",
                    format!("net type `{ty}` is not a place/transition net"),
                    "weft imports P/T nets (type http://www.pnml.org/version-2009/grammar/ptnet); unfold coloured or high-level nets first.",
                ));
            }
            raw.id = a.get("id").cloned().unwrap_or_default();
            *cur = Cur::Net;
        }
        "place" | "transition" if *cur == Cur::Net => {
            let id = required(&attrs(e)?, "id", name)?;
            let node = RawNode {
                id,
                ..RawNode::default()
            };
            if name == "place" {
                raw.places.push(node);
                *cur = Cur::Place(raw.places.len() - 1);
            } else {
                raw.transitions.push(node);
                *cur = Cur::Transition(raw.transitions.len() - 1);
            }
            if raw.places.len() + raw.transitions.len() > MAX_NODES {
                return Err(err(
                    "P008",
                    format!("more than {MAX_NODES} places and transitions"),
                    "Split the net.",
                ));
            }
        }
        "arc" if *cur == Cur::Net => {
            let a = attrs(e)?;
            raw.arcs.push(RawArc {
                id: required(&a, "id", name)?,
                source: required(&a, "source", name)?,
                target: required(&a, "target", name)?,
                inscription: None,
            });
            *cur = Cur::Arc(raw.arcs.len() - 1);
            if raw.arcs.len() > MAX_ARCS {
                return Err(err(
                    "P008",
                    format!("more than {MAX_ARCS} arcs"),
                    "Split the net.",
                ));
            }
        }
        "referencePlace" | "referenceTransition" if *cur == Cur::Net => {
            let a = attrs(e)?;
            raw.refs
                .insert(required(&a, "id", name)?, required(&a, "ref", name)?);
        }
        "text" => {
            let parent = stack.last().map(String::as_str);
            if matches!(parent, Some("name" | "initialMarking" | "inscription"))
                && *cur != Cur::Outside
            {
                *text = Some(String::new());
            }
        }
        _ => {}
    }
    Ok(())
}

/// Stores a finished `<text>` (or weft `<note>`) where it belongs.
fn close_text(raw: &mut Raw, cur: Cur, stack: &[String], elem: &str, t: String) {
    if elem == "note" {
        raw.notes.push(t);
        return;
    }
    let (Some(label), Some(owner)) = (
        stack.last(),
        stack.len().checked_sub(2).and_then(|i| stack.get(i)),
    ) else {
        return;
    };
    match (label.as_str(), owner.as_str(), cur) {
        ("name", "net", Cur::Net) => raw.name = Some(t),
        ("name", "place", Cur::Place(i)) => raw.places[i].name = Some(t),
        ("name", "transition", Cur::Transition(i)) => raw.transitions[i].name = Some(t),
        ("initialMarking", "place", Cur::Place(i)) => raw.places[i].marking = Some(t),
        ("inscription", "arc", Cur::Arc(i)) => raw.arcs[i].inscription = Some(t),
        _ => {}
    }
}

fn number(text: Option<&str>, default: u64, what: &str, max: u64) -> Result<u32, PnmlError> {
    let v = match text.map(str::trim) {
        None | Some("") => default,
        Some(s) => s.parse::<u64>().map_err(|_| {
            err(
                "P005",
                format!("{what}: `{s}` is not a non-negative integer"),
                "P/T nets take plain integers in initialMarking and inscription texts.",
            )
        })?,
    };
    if v > max {
        return Err(err(
            "P005",
            format!("{what}: {v} is larger than {max}"),
            "weft explores markings with at most 65535 tokens per place; scale the net down.",
        ));
    }
    Ok(v as u32)
}

fn flag(a: &HashMap<String, String>, key: &str) -> bool {
    a.get(key).is_some_and(|v| v == "true")
}

fn build(raw: Raw) -> Result<PtNet, PnmlError> {
    let kind = match raw
        .weft_net
        .as_ref()
        .and_then(|a| a.get("kind"))
        .map(String::as_str)
    {
        Some("acyclic") => NetKind::Acyclic,
        Some("reactive") => NetKind::Reactive,
        _ => NetKind::Imported,
    };
    let mut net = PtNet::new(raw.name.clone().unwrap_or_else(|| raw.id.clone()), kind);
    net.notes = raw.notes;
    let mut ids: HashSet<&str> = HashSet::new();
    for id in raw
        .places
        .iter()
        .map(|p| &p.id)
        .chain(raw.transitions.iter().map(|t| &t.id))
        .chain(raw.arcs.iter().map(|a| &a.id))
    {
        if !ids.insert(id) {
            return Err(err(
                "P006",
                format!("id `{id}` is used twice"),
                "Ids must be unique in the whole document.",
            ));
        }
    }
    // Names must be unique in a PtNet: a repeated name gets its id appended.
    // Places and transitions are separate name spaces.
    let count = |nodes: &[RawNode]| {
        let mut names: HashMap<String, usize> = HashMap::new();
        for n in nodes {
            *names
                .entry(n.name.clone().unwrap_or_else(|| n.id.clone()))
                .or_default() += 1;
        }
        names
    };
    let (place_names, trans_names) = (count(&raw.places), count(&raw.transitions));
    let label = |n: &RawNode, names: &HashMap<String, usize>| {
        let name = n.name.clone().unwrap_or_else(|| n.id.clone());
        if names.get(&name).copied().unwrap_or(0) > 1 {
            format!("{name} ({})", n.id)
        } else {
            name
        }
    };
    let mut place_ix: HashMap<&str, u32> = HashMap::new();
    for p in &raw.places {
        let w = p.weft.clone().unwrap_or_default();
        let idx = net.add_place(Place {
            name: label(p, &place_names),
            is_output: flag(&w, "output"),
            is_input: flag(&w, "input"),
            is_env: flag(&w, "env"),
            event: w.get("event").cloned(),
        });
        net.initial[idx as usize] = number(
            p.marking.as_deref(),
            0,
            &format!("initial marking of place `{}`", p.id),
            MAX_WEIGHT,
        )?;
        place_ix.insert(&p.id, idx);
    }
    let trans_ix: HashMap<&str, usize> = raw
        .transitions
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let resolve = |id: &str| -> String {
        let mut id = id.to_string();
        for _ in 0..64 {
            match raw.refs.get(&id) {
                Some(r) => id = r.clone(),
                None => break,
            }
        }
        id
    };
    let mut pre: Vec<Vec<(u32, u32)>> = vec![Vec::new(); raw.transitions.len()];
    let mut post: Vec<Vec<(u32, u32)>> = vec![Vec::new(); raw.transitions.len()];
    for a in &raw.arcs {
        let (s, t) = (resolve(&a.source), resolve(&a.target));
        let w = number(
            a.inscription.as_deref(),
            1,
            &format!("weight of arc `{}`", a.id),
            MAX_WEIGHT,
        )?;
        if w == 0 {
            return Err(err(
                "P005",
                format!("arc `{}` has weight 0", a.id),
                "Arc weights are positive integers; remove the arc instead.",
            ));
        }
        let endpoint = |x: &str| (place_ix.get(x).copied(), trans_ix.get(x).copied());
        match (endpoint(&s), endpoint(&t)) {
            ((Some(p), _), (_, Some(tr))) => pre[tr].push((p, w)),
            ((_, Some(tr)), (Some(p), _)) => post[tr].push((p, w)),
            ((None, None), _) | (_, (None, None)) => {
                let missing = if endpoint(&s) == (None, None) {
                    &a.source
                } else {
                    &a.target
                };
                return Err(err(
                    "P004",
                    format!("arc `{}` refers to unknown node `{missing}`", a.id),
                    "Arc sources and targets must be ids of places or transitions in the same net.",
                ));
            }
            _ => {
                return Err(err(
                    "P007",
                    format!(
                        "arc `{}` connects `{s}` and `{t}`, two nodes of the same kind",
                        a.id
                    ),
                    "An arc goes from a place to a transition or from a transition to a place.",
                ));
            }
        }
    }
    for (i, t) in raw.transitions.iter().enumerate() {
        let w = t.weft.clone().unwrap_or_default();
        let role = match w.get("role").map(String::as_str) {
            Some(r) => [
                Role::Step,
                Role::Failure,
                Role::Environment,
                Role::DeferredEmit,
                Role::Plain,
            ]
            .into_iter()
            .find(|x| role_str(*x) == r)
            .unwrap_or(Role::Plain),
            None => Role::Plain,
        };
        net.add_transition(Transition {
            name: label(t, &trans_names),
            step: w.get("step").cloned(),
            pointer: w.get("pointer").cloned().unwrap_or_else(|| t.id.clone()),
            guarded: flag(&w, "guarded"),
            role,
            pre: std::mem::take(&mut pre[i]),
            post: std::mem::take(&mut post[i]),
        });
    }
    if raw.weft_net.is_none() {
        // A foreign net: places no transition consumes are its final places.
        let mut consumed = vec![false; net.places.len()];
        for t in &net.transitions {
            for &(p, _) in &t.pre {
                consumed[p as usize] = true;
            }
        }
        for (p, c) in net.places.iter_mut().zip(consumed) {
            p.is_output = !c;
        }
    }
    Ok(net)
}
