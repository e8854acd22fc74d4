//! Turns the parsed PNML elements into a [`PtNet`]: resolves reference nodes, checks ids,
//! endpoints and weights, and restores weft's toolspecific flags.

use std::collections::{HashMap, HashSet};

use super::{MAX_WEIGHT, PnmlError, Raw, RawNode, err};
use crate::export::role_str;
use crate::net::{NetKind, Place, PtNet, Role, Transition};

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

pub(super) fn build(raw: Raw) -> Result<PtNet, PnmlError> {
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
        if let Some(kind) = a.arctype.as_deref().map(str::trim)
            && kind != "normal"
        {
            return Err(err(
                "P003",
                format!("arc `{}` is a `{kind}` arc, not a P/T arc", a.id),
                "weft analyses place/transition nets; inhibitor, reset and read arcs change what can fire. Remove them or replace them with ordinary arcs.",
            ));
        }
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
                Role::Denial,
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
    if let Some(first) = raw.finals.first() {
        let mut fm = vec![0u32; net.places.len()];
        for (idref, count) in first {
            let id = resolve(idref);
            let Some(&p) = place_ix.get(id.as_str()) else {
                return Err(err(
                    "P004",
                    format!("the final marking refers to unknown place `{idref}`"),
                    "A <finalmarkings> <place idref=…> must name a place of the net.",
                ));
            };
            let n = number(
                count.as_deref(),
                1,
                &format!("final marking of place `{idref}`"),
                MAX_WEIGHT,
            )?;
            fm[p as usize] = fm[p as usize].saturating_add(n);
        }
        if raw.finals.len() > 1 {
            net.notes.push(format!(
                "the file lists {} final markings; only the first is used",
                raw.finals.len()
            ));
        }
        net.final_marking = Some(fm);
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
