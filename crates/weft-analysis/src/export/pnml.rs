//! PNML export (ISO/IEC 15909-2, P/T net type) so other Petri-net tools can check weft's work.
//!
//! Ids are sanitised to XML ids with an index prefix (`p3-review.done`), names go in
//! `<name><text>`. What PNML cannot say (output/input flags, originating events and steps,
//! guarded transitions, the net kind and notes) goes in `<toolspecific tool="weft">`, which
//! other tools ignore and `pnml::import` reads back, so export then import is lossless. A
//! final marking is written as the `<finalmarkings>` block pm4py and ProM read.

use crate::net::{NetKind, PtNet, Role};

/// The PNML namespace.
pub(super) const PNML_NS: &str = "http://www.pnml.org/version-2009/grammar/pnml";
/// The P/T net type.
pub(super) const PTNET_TYPE: &str = "http://www.pnml.org/version-2009/grammar/ptnet";
/// Version of weft's toolspecific block.
pub(super) const TOOL_VERSION: &str = "1";

/// An XML id (NCName) for `name`: `prefix`, then ASCII letters, digits, `-`, `_`, `.`.
fn xml_id(prefix: &str, name: &str) -> String {
    let mut id = String::from(prefix);
    let mut last_sep = false;
    for c in name.chars().take(48) {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
            id.push(c);
            last_sep = false;
        } else if !last_sep {
            id.push('_');
            last_sep = true;
        }
    }
    id
}

/// Text content escaped for XML 1.0; characters XML 1.0 cannot carry become U+FFFD.
pub(crate) fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn kind_str(k: NetKind) -> &'static str {
    match k {
        NetKind::Acyclic => "acyclic",
        NetKind::Reactive => "reactive",
        NetKind::Imported => "imported",
    }
}

pub(crate) fn role_str(r: Role) -> &'static str {
    match r {
        Role::Step => "step",
        Role::Failure => "failure",
        Role::Denial => "denial",
        Role::Environment => "environment",
        Role::DeferredEmit => "deferred_emit",
        Role::Plain => "plain",
    }
}

/// The net as a PNML document.
pub fn pnml(net: &PtNet) -> String {
    let tool = format!("<toolspecific tool=\"weft\" version=\"{TOOL_VERSION}\">");
    let mut o = String::new();
    o.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    o.push_str(&format!("<pnml xmlns=\"{PNML_NS}\">\n"));
    o.push_str(&format!(
        "  <net id=\"{}\" type=\"{PTNET_TYPE}\">\n    <name><text>{}</text></name>\n",
        xml_id("net-", &net.name),
        text(&net.name)
    ));
    o.push_str(&format!("    {tool}<net kind=\"{}\">", kind_str(net.kind)));
    for n in &net.notes {
        o.push_str(&format!("<note>{}</note>", text(n)));
    }
    o.push_str("</net></toolspecific>\n    <page id=\"page0\">\n");
    let pid: Vec<String> = net
        .places
        .iter()
        .enumerate()
        .map(|(i, p)| xml_id(&format!("p{i}-"), &p.name))
        .collect();
    let tid: Vec<String> = net
        .transitions
        .iter()
        .enumerate()
        .map(|(i, t)| xml_id(&format!("t{i}-"), &t.name))
        .collect();
    for (i, p) in net.places.iter().enumerate() {
        o.push_str(&format!(
            "      <place id=\"{}\">\n        <name><text>{}</text></name>\n",
            pid[i],
            text(&p.name)
        ));
        let m = net.initial.get(i).copied().unwrap_or(0);
        if m > 0 {
            o.push_str(&format!(
                "        <initialMarking><text>{m}</text></initialMarking>\n"
            ));
        }
        o.push_str(&format!(
            "        {tool}<place output=\"{}\" input=\"{}\" env=\"{}\"",
            p.is_output, p.is_input, p.is_env
        ));
        if let Some(e) = &p.event {
            o.push_str(&format!(" event=\"{}\"", text(e)));
        }
        o.push_str("/></toolspecific>\n      </place>\n");
    }
    for (i, t) in net.transitions.iter().enumerate() {
        o.push_str(&format!(
            "      <transition id=\"{}\">\n        <name><text>{}</text></name>\n",
            tid[i],
            text(&t.name)
        ));
        o.push_str(&format!(
            "        {tool}<transition pointer=\"{}\" guarded=\"{}\" role=\"{}\"",
            text(&t.pointer),
            t.guarded,
            role_str(t.role)
        ));
        if let Some(s) = &t.step {
            o.push_str(&format!(" step=\"{}\"", text(s)));
        }
        o.push_str("/></toolspecific>\n      </transition>\n");
    }
    let mut a = 0usize;
    for (i, t) in net.transitions.iter().enumerate() {
        for (arcs, pre) in [(&t.pre, true), (&t.post, false)] {
            for &(p, w) in arcs {
                let Some(place) = pid.get(p as usize) else {
                    continue;
                };
                let (src, dst) = if pre {
                    (place, &tid[i])
                } else {
                    (&tid[i], place)
                };
                o.push_str(&format!(
                    "      <arc id=\"a{a}\" source=\"{src}\" target=\"{dst}\">\n        <inscription><text>{w}</text></inscription>\n      </arc>\n"
                ));
                a += 1;
            }
        }
    }
    o.push_str("    </page>\n");
    // The final marking as pm4py and ProM write it, so their soundness checks use it.
    if let Some(fm) = &net.final_marking {
        o.push_str("    <finalmarkings>\n      <marking>\n");
        for (p, &k) in fm.iter().enumerate() {
            if k > 0
                && let Some(id) = pid.get(p)
            {
                o.push_str(&format!(
                    "        <place idref=\"{id}\"><text>{k}</text></place>\n"
                ));
            }
        }
        o.push_str("      </marking>\n    </finalmarkings>\n");
    }
    o.push_str("  </net>\n</pnml>\n");
    o
}
