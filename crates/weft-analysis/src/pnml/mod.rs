//! PNML import: P/T nets from other Petri-net tools (ISO/IEC 15909-2), so `weft analyze
//! net.pnml` checks standard nets and export → import round-trips weft's own nets.
//!
//! Reads places (`initialMarking/text`), transitions, arcs (`inscription/text` weights),
//! nested `<page>`s, reference nodes and the `<finalmarkings>` block that pm4py and ProM
//! write (net type `ptnet` or `pnmlcoremodel`). Places, transitions and arcs count only as
//! children of `<net>` or `<page>`; any other element (tool-specific extensions) is skipped.
//! weft's `<toolspecific tool="weft">` blocks restore what PNML cannot say; without them,
//! places consumed by no transition are outputs, and the final marking (or the sink of a
//! workflow net, see `analyze.rs`) defines completion. Every problem is a [`PnmlError`] with
//! a stable code and a hint; nothing here panics on input.

use std::collections::HashMap;

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use crate::net::PtNet;

mod build;
use build::build;

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
    /// `<arctype>` (pm4py writes `inhibitor`, `reset`, …); `None` or `normal` for P/T arcs.
    arctype: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Cur {
    Outside,
    Net,
    Place(usize),
    Transition(usize),
    Arc(usize),
    /// A `<place idref>` of final marking `.0`, entry `.1`.
    Final(usize, usize),
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
    /// `<finalmarkings>`: per `<marking>`, `(place idref, token text)`.
    finals: Vec<Vec<(String, Option<String>)>>,
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
    // Depth of the place, transition, arc or final-marking entry being read.
    let mut node_depth = usize::MAX;
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
                let before = cur;
                open(&name, e, &mut raw, &mut cur, &mut nets, &stack, &mut text)?;
                // A node element just opened: it ends at this depth (an element of the same
                // name nested in something unknown inside it does not end it).
                if cur != before && before == Cur::Net {
                    if empty {
                        cur = Cur::Net;
                    } else {
                        node_depth = stack.len();
                    }
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
                        "place" | "transition" | "arc" if stack.len() == node_depth => {
                            cur = Cur::Net;
                            node_depth = usize::MAX;
                        }
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
            let lower = ty.to_ascii_lowercase();
            // `pnmlcoremodel` (what pm4py and ProM write) is the core model: places,
            // transitions and arcs, read here as a P/T net.
            if !lower.contains("ptnet") && !lower.contains("pnmlcoremodel") {
                return Err(err(
                    "P003",
                    format!("net type `{ty}` is not a place/transition net"),
                    "weft imports P/T nets (type http://www.pnml.org/version-2009/grammar/ptnet or …/pnmlcoremodel); unfold coloured or high-level nets first.",
                ));
            }
            raw.id = a.get("id").cloned().unwrap_or_default();
            *cur = Cur::Net;
        }
        "marking" if *cur == Cur::Net && stack.last().is_some_and(|p| p == "finalmarkings") => {
            raw.finals.push(Vec::new());
        }
        "place"
            if *cur == Cur::Net
                && stack.last().is_some_and(|p| p == "marking")
                && stack.iter().any(|p| p == "finalmarkings") =>
        {
            let a = attrs(e)?;
            let idref = required(&a, "idref", "place")?;
            let k = raw.finals.len();
            if let Some(m) = raw.finals.last_mut() {
                m.push((idref, None));
                *cur = Cur::Final(k - 1, m.len() - 1);
            }
        }
        "place" | "transition" if *cur == Cur::Net && in_page(stack) => {
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
        "arc" if *cur == Cur::Net && in_page(stack) => {
            let a = attrs(e)?;
            raw.arcs.push(RawArc {
                id: required(&a, "id", name)?,
                source: required(&a, "source", name)?,
                target: required(&a, "target", name)?,
                inscription: None,
                arctype: None,
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
        "referencePlace" | "referenceTransition" if *cur == Cur::Net && in_page(stack) => {
            let a = attrs(e)?;
            raw.refs
                .insert(required(&a, "id", name)?, required(&a, "ref", name)?);
        }
        "text" => {
            let parent = stack.last().map(String::as_str);
            let final_count = parent == Some("place") && matches!(*cur, Cur::Final(..));
            if (final_count
                || matches!(
                    parent,
                    Some("name" | "initialMarking" | "inscription" | "arctype")
                ))
                && *cur != Cur::Outside
            {
                *text = Some(String::new());
            }
        }
        _ => {}
    }
    Ok(())
}

/// Is the element being opened a child of `<net>` or `<page>` (where nodes are defined)?
fn in_page(stack: &[String]) -> bool {
    stack.last().is_some_and(|p| p == "net" || p == "page")
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
        ("arctype", "arc", Cur::Arc(i)) => raw.arcs[i].arctype = Some(t),
        ("place", "marking", Cur::Final(m, j)) => {
            if let Some(e) = raw.finals.get_mut(m).and_then(|m| m.get_mut(j)) {
                e.1 = Some(t);
            }
        }
        _ => {}
    }
}
