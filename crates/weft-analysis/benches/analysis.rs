//! Throughput of reachability exploration, in markings per second (goal: ≥ 2 million on one
//! core on a net with about a million reachable markings).
//!
//! Run: `cargo bench -p weft-analysis --bench analysis`.

use divan::counter::ItemsCount;
use weft_analysis::{AnalysisOptions, NetKind, Place, PtNet, Role, Transition, analyze_net};

fn main() {
    divan::main();
}

/// `n` independent two-state components: place `p_i` ⇄ place `q_i`, token on every `p_i`.
/// With `cyclic` false the transitions only go `p_i → q_i` and the final marking is every
/// `q_i` (so classical soundness runs as well); the cyclic net has none and is no workflow
/// net (exploration only) unless `sound_cyclic_components` gives it one. Either way the net
/// has 2^n reachable markings.
fn components(n: usize, cyclic: bool) -> PtNet {
    let mut net = PtNet::new(format!("components-{n}"), NetKind::Imported);
    let place = |name: String| Place {
        name,
        is_output: false,
        is_input: false,
        is_env: false,
        event: None,
    };
    let trans = |name: String, pre: u32, post: u32| Transition {
        pointer: name.clone(),
        name,
        step: None,
        guarded: false,
        role: Role::Plain,
        pre: vec![(pre, 1)],
        post: vec![(post, 1)],
    };
    for i in 0..n {
        let p = net.add_place(place(format!("p{i}")));
        let q = net.add_place(place(format!("q{i}")));
        net.initial[p as usize] = 1;
        net.add_transition(trans(format!("go{i}"), p, q));
        if cyclic {
            net.add_transition(trans(format!("back{i}"), q, p));
        }
    }
    if !cyclic {
        net.final_marking = Some((0..2 * n).map(|k| (k % 2) as u32).collect());
    }
    net
}

#[divan::bench(args = [16, 20])]
fn explore_cyclic_components(bencher: divan::Bencher, n: usize) {
    let net = components(n, true);
    bencher.counter(ItemsCount::new(1usize << n)).bench(|| {
        let report = analyze_net(divan::black_box(&net), &opts());
        assert_eq!(report.states, 1 << n);
        report
    });
}

/// Classical soundness on a cyclic net (final marking = the initial one): the full graph with
/// its edges, then the backward search.
#[divan::bench(args = [16, 20])]
fn sound_cyclic_components(bencher: divan::Bencher, n: usize) {
    let mut net = components(n, true);
    net.final_marking = Some(net.initial.clone());
    bencher.counter(ItemsCount::new(1usize << n)).bench(|| {
        let report = analyze_net(divan::black_box(&net), &opts());
        assert_eq!(report.states, 1 << n);
        assert_eq!(report.verdict, weft_analysis::Verdict::Sound);
        report
    });
}

/// Only below the 100,000-marking probe: above it an acyclic net is explored partial-order
/// reduced (2^20 markings become 21).
#[divan::bench(args = [16])]
fn analyze_acyclic_components(bencher: divan::Bencher, n: usize) {
    let net = components(n, false);
    bencher.counter(ItemsCount::new(1usize << n)).bench(|| {
        let report = analyze_net(divan::black_box(&net), &opts());
        assert_eq!(report.states, 1 << n);
        assert_eq!(report.verdict, weft_analysis::Verdict::Sound);
        report
    });
}

/// Room for the 2^20 markings (the default limit is one million).
fn opts() -> AnalysisOptions {
    AnalysisOptions {
        max_states: 4_000_000,
        ..AnalysisOptions::default()
    }
}
