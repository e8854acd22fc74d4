//! The workflow net of a plan: what `weft graph --format pnml` exports so that a classical
//! soundness checker (pm4py's Woflan, ProM) can check a plan without knowing weft's rules.
//!
//! A plan net is not a workflow net: its initial marking has one token per listening step's
//! copy of `start` plus the environment budgets, and it may have several output events. The
//! transformation adds a source place `source` and a transition `begin` that puts the plan's
//! initial marking, and a sink place `sink` with one transition `end:<place>` per output
//! place moving a token from it into the sink; the final marking is `[sink]`.
//!
//! Classical soundness of that net implies soundness of the plan with respect to its outputs
//! (the notion `analyze.rs` decides for plans); it is stricter where weft's rule is not
//! classical: a plan that completes with several output tokens, emits an output while other
//! steps still run, or leaves an input event's environment budget unused is sound for weft
//! but not classically sound. The differential test lists such plans with their reason.

use crate::checks::classical_final;
use crate::net::{NetKind, Place, PtNet, Role, Transition};

impl PtNet {
    /// The net as a workflow net with its final marking (see the module documentation):
    /// an imported net keeps its final marking (or gets `[sink]` when it is a workflow net);
    /// a plan net gets a source, a sink, `begin` and one `end:<place>` per output place.
    pub fn workflow_net(&self) -> PtNet {
        let mut w = self.clone();
        if self.kind == NetKind::Imported {
            if classical_final(self).is_none()
                && let Ok((_, sink)) = self.workflow_shape()
            {
                let mut fm = vec![0; self.places.len()];
                fm[sink] = 1;
                w.final_marking = Some(fm);
            }
            return w;
        }
        let fresh = |base: &str| {
            let mut name = base.to_string();
            let mut n = 2;
            while self.place_index(&name).is_some() || self.transition_index(&name).is_some() {
                name = format!("{base}#{n}");
                n += 1;
            }
            name
        };
        let outputs: Vec<usize> = (0..w.places.len())
            .filter(|&p| w.places[p].is_output)
            .collect();
        for p in &mut w.places {
            p.is_output = false;
        }
        let plain = |name: String, pre, post| Transition {
            pointer: String::new(),
            step: None,
            guarded: false,
            role: Role::Plain,
            name,
            pre,
            post,
        };
        let source = w.add_place(Place {
            name: fresh("source"),
            is_output: false,
            is_input: false,
            is_env: false,
            event: None,
        });
        let sink = w.add_place(Place {
            name: fresh("sink"),
            is_output: true,
            is_input: false,
            is_env: false,
            event: None,
        });
        let start: Vec<(u32, u32)> = self
            .initial
            .iter()
            .enumerate()
            .filter(|&(_, &k)| k > 0)
            .map(|(p, &k)| (p as u32, k))
            .collect();
        w.add_transition(plain(fresh("begin"), vec![(source, 1)], start));
        for q in outputs {
            let name = fresh(&format!("end:{}", self.places[q].name));
            w.add_transition(plain(name, vec![(q as u32, 1)], vec![(sink, 1)]));
        }
        w.initial = vec![0; w.places.len()];
        w.initial[source as usize] = 1;
        let mut fm = vec![0; w.places.len()];
        fm[sink as usize] = 1;
        w.final_marking = Some(fm);
        w.notes.push(
            "workflow net of the plan: `begin` puts the plan's initial marking, each output place drains into `sink`; final marking [sink]".to_string(),
        );
        w
    }
}
