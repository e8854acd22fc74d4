//! Property tests of the reachability engine against an independent brute-force token game.

use std::collections::{BTreeSet, HashSet, VecDeque};

use proptest::prelude::*;
use weft_analysis::explore::explore;
use weft_analysis::reduce;
use weft_analysis::{AnalysisOptions, NetKind, Place, PtNet, Role, Transition, analyze_net};

const CAP: usize = 3_000;

type Arcs = Vec<(u32, u32)>;
type Markings = (HashSet<Vec<u32>>, BTreeSet<Vec<u32>>);

fn arcs(places: usize) -> impl Strategy<Value = Vec<(u32, u32)>> {
    weighted_arcs(places, 2)
}

fn weighted_arcs(places: usize, max_w: u32) -> impl Strategy<Value = Vec<(u32, u32)>> {
    prop::collection::vec((0..places as u32, 1u32..=max_w), 0..=3)
}

fn net_strategy() -> impl Strategy<Value = PtNet> {
    sized_nets(2, 2)
}

/// With `max_w == max_init == 1` most nets are safe, which exercises the bitset fast path.
fn sized_nets(max_w: u32, max_init: u32) -> impl Strategy<Value = PtNet> {
    (1usize..=6, 1usize..=6).prop_flat_map(move |(np, nt)| {
        (
            prop::collection::vec(0u32..=max_init, np),
            prop::collection::vec((weighted_arcs(np, max_w), weighted_arcs(np, max_w)), nt),
        )
            .prop_map(move |(initial, ts)| build(np, initial, ts))
    })
}

/// Nets whose every transition takes as many tokens as it gives.
fn conservative_strategy() -> impl Strategy<Value = PtNet> {
    (2usize..=6, 1usize..=6).prop_flat_map(|(np, nt)| {
        (
            prop::collection::vec(0u32..=2, np),
            prop::collection::vec((arcs(np), prop::collection::vec(0..np as u32, 1..=4)), nt),
        )
            .prop_map(move |(initial, ts)| {
                let ts = ts
                    .into_iter()
                    .map(|(pre, targets)| {
                        let total: u32 = pre.iter().map(|a| a.1).sum();
                        // Spread `total` tokens over the targets.
                        let mut post = Vec::new();
                        for k in 0..total {
                            post.push((targets[k as usize % targets.len()], 1));
                        }
                        (pre, post)
                    })
                    .collect();
                build(np, initial, ts)
            })
    })
}

fn build(np: usize, initial: Vec<u32>, ts: Vec<(Arcs, Arcs)>) -> PtNet {
    let mut net = PtNet::new("random", NetKind::Imported);
    for i in 0..np {
        net.add_place(Place {
            name: format!("p{i}"),
            is_output: false,
            is_input: false,
            is_env: false,
            event: None,
        });
    }
    net.initial = initial;
    for (i, (pre, post)) in ts.into_iter().enumerate() {
        net.add_transition(Transition {
            name: format!("t{i}"),
            step: None,
            pointer: format!("t{i}"),
            guarded: false,
            role: Role::Plain,
            pre,
            post,
        });
    }
    net
}

/// The token game, written from scratch: `None` when more than `CAP` markings are reachable.
fn brute_force(net: &PtNet) -> Option<Markings> {
    let mut seen = HashSet::new();
    let mut dead = BTreeSet::new();
    let mut queue = VecDeque::new();
    seen.insert(net.initial.clone());
    queue.push_back(net.initial.clone());
    while let Some(m) = queue.pop_front() {
        let mut any = false;
        for t in &net.transitions {
            if t.pre.iter().all(|&(p, w)| m[p as usize] >= w) {
                any = true;
                let mut n = m.clone();
                for &(p, w) in &t.pre {
                    n[p as usize] -= w;
                }
                for &(p, w) in &t.post {
                    n[p as usize] += w;
                }
                if seen.insert(n.clone()) {
                    if seen.len() > CAP {
                        return None;
                    }
                    queue.push_back(n);
                }
            }
        }
        if !any {
            dead.insert(m);
        }
    }
    Some((seen, dead))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn reachable_and_dead_sets_match_brute_force(net in prop_oneof![net_strategy(), sized_nets(1, 1)]) {
        let g = explore(&net, CAP, false);
        match brute_force(&net) {
            Some((seen, dead)) => {
                prop_assert_eq!(g.stop, weft_analysis::explore::Stop::None);
                let got: HashSet<Vec<u32>> = (0..g.len() as u32).map(|i| g.marking(i)).collect();
                prop_assert_eq!(got.len(), g.len(), "no marking stored twice");
                prop_assert_eq!(got, seen);
                let got_dead: BTreeSet<Vec<u32>> = g.dead.iter().map(|&i| g.marking(i)).collect();
                prop_assert_eq!(got_dead, dead);
            }
            None => prop_assert_ne!(g.stop, weft_analysis::explore::Stop::None),
        }
    }

    #[test]
    fn tokens_are_conserved(net in conservative_strategy()) {
        let total: u32 = net.initial.iter().sum();
        let g = explore(&net, CAP, false);
        for i in 0..g.len() as u32 {
            prop_assert_eq!(g.marking(i).iter().sum::<u32>(), total);
        }
    }

    #[test]
    fn witnesses_replay(net in prop_oneof![net_strategy(), sized_nets(1, 1)]) {
        let g = explore(&net, CAP, false);
        for &s in &g.dead {
            let mut m = net.initial.clone();
            for t in g.path(s) {
                m = net.fire(t as usize, &m).expect("witness step enabled");
            }
            prop_assert_eq!(&m, &g.marking(s));
            prop_assert!((0..net.transitions.len()).all(|t| !net.enabled(t, &m)));
        }
        let report = analyze_net(&net, &AnalysisOptions { max_states: CAP, ..AnalysisOptions::default() });
        for f in report.findings.iter().filter(|f| f.code == "A001") {
            let mut m = net.initial.clone();
            for name in f.witness.as_deref().unwrap_or_default() {
                let t = net.transition_index(name).expect("witness names a transition");
                m = net.fire(t, &m).expect("witness step enabled");
            }
            prop_assert!((0..net.transitions.len()).all(|t| !net.enabled(t, &m)), "{} ends dead", f.message);
        }
    }
}

/// Acyclic nets: every arc leads from a lower place to a higher one through its transition.
fn acyclic_nets() -> impl Strategy<Value = PtNet> {
    (2usize..=7, 1usize..=7).prop_flat_map(|np| {
        let (np, nt) = np;
        (
            prop::collection::vec(0u32..=2, np),
            prop::collection::vec(
                (
                    1..np as u32,
                    prop::collection::vec((0u32..100, 1u32..=2), 1..=3),
                    prop::collection::vec((0u32..100, 1u32..=2), 0..=3),
                ),
                nt,
            ),
        )
            .prop_map(move |(initial, ts)| {
                let ts = ts
                    .into_iter()
                    .map(|(pivot, pre, post)| {
                        let pre = pre.into_iter().map(|(p, w)| (p % pivot, w)).collect();
                        let hi = np as u32 - pivot;
                        let post = post.into_iter().map(|(p, w)| (pivot + p % hi, w)).collect();
                        (pre, post)
                    })
                    .collect();
                build(np, initial, ts)
            })
    })
}

/// Dead markings reachable from `m` in the full token game.
fn dead_from(net: &PtNet, m: &[u32]) -> BTreeSet<Vec<u32>> {
    let mut seen = HashSet::new();
    let mut dead = BTreeSet::new();
    let mut stack = vec![m.to_vec()];
    seen.insert(m.to_vec());
    while let Some(m) = stack.pop() {
        let next: Vec<Vec<u32>> = (0..net.transitions.len())
            .filter_map(|t| net.fire(t, &m))
            .collect();
        if next.is_empty() {
            dead.insert(m);
        }
        for n in next {
            if seen.insert(n.clone()) {
                stack.push(n);
            }
        }
    }
    dead
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn reduction_keeps_every_dead_marking_from_every_state(net in acyclic_nets()) {
        prop_assume!(!net.has_cycle());
        let r = reduce::explore_reduced(&net, CAP);
        prop_assert_eq!(r.stop, weft_analysis::explore::Stop::None);
        let (seen, _) = brute_force(&net).expect("small acyclic nets are small");
        prop_assert!(r.len() <= seen.len());
        // Dead markings reachable from each reduced state, following reduced edges only.
        for s in 0..r.len() as u32 {
            let mut reach = BTreeSet::new();
            let mut stack = vec![s];
            let mut visited = HashSet::from([s]);
            while let Some(x) = stack.pop() {
                let out = &r.succ[r.succ_off[x as usize] as usize..r.succ_off[x as usize + 1] as usize];
                if out.is_empty() {
                    reach.insert(r.marking(x));
                }
                for &y in out {
                    if visited.insert(y) {
                        stack.push(y);
                    }
                }
            }
            let m = r.marking(s);
            prop_assert!(seen.contains(&m), "reduced states are reachable");
            prop_assert_eq!(reach, dead_from(&net, &m), "from {:?}", m);
        }
    }

    #[test]
    fn can_enable_matches_the_full_token_game(net in acyclic_nets()) {
        prop_assume!(!net.has_cycle());
        let (seen, _) = brute_force(&net).expect("small acyclic nets are small");
        for t in 0..net.transitions.len() {
            let expected = seen.iter().any(|m| net.enabled(t, m));
            prop_assert_eq!(reduce::can_enable(&net, t as u32, CAP), Some(expected), "t{}", t);
        }
    }
}
