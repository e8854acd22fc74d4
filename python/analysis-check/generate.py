"""Generates the differential corpus of crates/weft-analysis/tests/differential.rs.

Random workflow nets come from pm4py's process-tree generator (seeded; sequences, choices,
parallel blocks, loops and silent steps), about half of them mutated (an arc added, removed,
duplicated or redirected, a transition added) so that many are unsound, some unbounded. Each
net is written with pm4py's own PNML exporter (as other tools write it), read back with
pm4py's importer, and checked by the small classical-soundness reference below, which works
on pm4py's net objects: breadth-first reachability with pm4py's firing rule (duplicate arcs
add up), unboundedness by the Karp–Miller covering criterion on each path, option to
complete, proper completion and dead transitions. pm4py's own reachability graph is built
too and its state count must equal the reference's on every bounded net (its time limit
silently truncates unbounded ones, which is why the reference decides those).

pm4py's reachability graph tests each arc on its own, so on nets with duplicate arcs its
state count differs (recorded as `pm4py_states`); on every other bounded net it must match.

Usage: python generate.py OUT.jsonl [--count N] [--seed S] [--large K] < /dev/null
"""

import argparse
import io
import json
import os
import random
import sys
import tempfile
from collections import deque

import pm4py
from pm4py.algo.simulation.tree_generator import algorithm as tree_gen
from pm4py.objects.conversion.process_tree import converter as pt_conv
from pm4py.objects.petri_net.obj import PetriNet, Marking
from pm4py.objects.petri_net.utils import petri_utils
from pm4py.objects.petri_net.utils import reachability_graph

MAX_STATES = 150_000
SMALL_STATES = 20_000


def arcs_of(net):
    """Per transition: (pre, post) as {place: weight}, duplicate arcs adding up."""
    pre = {t: {} for t in net.transitions}
    post = {t: {} for t in net.transitions}
    for a in net.arcs:
        if isinstance(a.source, PetriNet.Place):
            pre[a.target][a.source] = pre[a.target].get(a.source, 0) + a.weight
        else:
            post[a.source][a.target] = post[a.source].get(a.target, 0) + a.weight
    return pre, post


def reference(net, im, fm, max_states):
    """Classical soundness of (net, im, fm), decided on pm4py's objects."""
    places = sorted(net.places, key=lambda p: p.name)
    index = {p: i for i, p in enumerate(places)}
    trans = sorted(net.transitions, key=lambda t: t.name)
    pre, post = arcs_of(net)
    tp = [[(index[p], w) for p, w in pre[t].items()] for t in trans]
    tq = [[(index[p], w) for p, w in post[t].items()] for t in trans]
    m0 = tuple(im.get(p, 0) for p in places)
    final = tuple(fm.get(p, 0) for p in places)
    seen = {m0: 0}
    parent = [-1]
    order = [m0]
    succ = []
    dead = []
    fired = [False] * len(trans)
    queue = deque([0])
    unbounded = False
    complete = True
    while queue:
        i = queue.popleft()
        m = order[i]
        out = []
        for k in range(len(trans)):
            if all(m[p] >= w for p, w in tp[k]):
                fired[k] = True
                n = list(m)
                for p, w in tp[k]:
                    n[p] -= w
                for p, w in tq[k]:
                    n[p] += w
                n = tuple(n)
                j = seen.get(n)
                if j is None:
                    # Karp–Miller: covering an ancestor strictly means unbounded.
                    a, depth = i, 0
                    while a != -1 and depth < 400:
                        depth += 1
                        am = order[a]
                        if am != n and all(x >= y for x, y in zip(n, am)):
                            unbounded = True
                            break
                        a = parent[a]
                    if unbounded:
                        break
                    if len(order) >= max_states:
                        complete = False
                        break
                    j = len(order)
                    seen[n] = j
                    order.append(n)
                    parent.append(i)
                    queue.append(j)
                out.append(j)
        if unbounded or not complete:
            break
        succ.append(out)
        if not out:
            dead.append(i)
    if unbounded:
        return {"bounded": False, "sound": False}
    if not complete:
        return None
    n = len(order)
    deadlocks = sum(1 for s in dead if order[s] != final)
    improper = any(
        m != final and all(x >= y for x, y in zip(m, final)) for m in order
    )
    rev = [[] for _ in range(n)]
    for s, out in enumerate(succ):
        for t in out:
            rev[t].append(s)
    ok = [False] * n
    stack = [s for s in range(n) if order[s] == final]
    for s in stack:
        ok[s] = True
    while stack:
        s = stack.pop()
        for p in rev[s]:
            if not ok[p]:
                ok[p] = True
                stack.append(p)
    option = all(ok)
    no_dead = all(fired)
    return {
        "bounded": True,
        "states": n,
        "deadlocks": deadlocks,
        "option_to_complete": option,
        "proper_completion": not improper,
        "no_dead_transitions": no_dead,
        "sound": option and not improper and no_dead,
    }


def mutate(net, im, fm, rng):
    """One random change; returns its description."""
    places = sorted(net.places, key=lambda p: p.name)
    trans = sorted(net.transitions, key=lambda t: t.name)
    arcs = sorted(net.arcs, key=lambda a: (a.source.name, a.target.name))
    kind = rng.choice(["add_in", "add_out", "remove", "duplicate", "redirect", "transition"])
    if kind == "add_in":
        p, t = rng.choice(places), rng.choice(trans)
        petri_utils.add_arc_from_to(p, t, net)
    elif kind == "add_out":
        t, p = rng.choice(trans), rng.choice(places)
        petri_utils.add_arc_from_to(t, p, net)
    elif kind == "remove" and arcs:
        petri_utils.remove_arc(net, rng.choice(arcs))
    elif kind == "duplicate" and arcs:
        a = rng.choice(arcs)
        petri_utils.add_arc_from_to(a.source, a.target, net)
    elif kind == "redirect" and arcs:
        a = rng.choice(arcs)
        petri_utils.remove_arc(net, a)
        if isinstance(a.source, PetriNet.Place):
            petri_utils.add_arc_from_to(rng.choice(places), a.target, net)
        else:
            petri_utils.add_arc_from_to(a.source, rng.choice(places), net)
    else:
        t = PetriNet.Transition(f"extra_{rng.randrange(1 << 30)}", None)
        net.transitions.add(t)
        petri_utils.add_arc_from_to(rng.choice(places), t, net)
        petri_utils.add_arc_from_to(t, rng.choice(places), net)
    return kind


def write_pnml(net, im, fm):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "net.pnml")
        pm4py.write_pnml(net, im, fm, path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        back = pm4py.read_pnml(path)
    return text, back


def has_duplicate_arcs(net):
    pairs = [(id(a.source), id(a.target)) for a in net.arcs]
    return len(pairs) != len(set(pairs))


def pm4py_states(net, im):
    # pm4py's construction is quadratic in the states, and a net with duplicate arcs can
    # make it walk negative markings for long: bounded by its own time limit.
    rg = reachability_graph.construct_reachability_graph(
        net, im, use_trans_name=False, parameters={"max_elab_time": 10}
    )
    return len(rg.states)


def tree(rng, large):
    random.seed(rng.randrange(1 << 30))
    if large:
        # A wide parallel block: far more interleavings than weft's probe explores.
        return tree_gen.apply(parameters={
            "mode": 16, "min": 15, "max": 17, "sequence": 0.1, "choice": 0.0,
            "parallel": 0.9, "loop": 0.0, "or": 0.0, "silent": 0.0})
    return tree_gen.apply(parameters={
        "mode": rng.randint(4, 9), "min": 3, "max": 12,
        "sequence": 0.3, "choice": 0.25, "parallel": 0.25, "loop": 0.2,
        "or": 0.0, "silent": 0.15})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--large", type=int, default=6)
    ap.add_argument("--seed", type=int, default=26)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = []
    attempts = 0
    while len(rows) < args.count + args.large:
        attempts += 1
        large = len(rows) >= args.count
        t = tree(rng, large)
        net, im, fm = pt_conv.apply(t)
        mutations = []
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 3)):
                mutations.append(mutate(net, im, fm, rng))
        text, (net2, im2, fm2) = write_pnml(net, im, fm)
        ref = reference(net2, im2, fm2, MAX_STATES if large else SMALL_STATES)
        if ref is None:
            continue  # too many states for the reference: skip
        if large and ref.get("states", 0) <= 20_000:
            continue
        if ref["bounded"] and ref["states"] <= 1_000:
            n = pm4py_states(net2, im2)
            if n != ref["states"]:
                if not has_duplicate_arcs(net2):
                    sys.exit(f"pm4py's reachability graph has {n} states, the reference {ref['states']}")
                # pm4py tests each arc on its own (two arcs p → t of weight 1 enable t with
                # one token on p, then take two); PNML arcs add up, as weft and the reference
                # read them. Recorded, not a disagreement between the two checks.
                ref["pm4py_states"] = n
        ref.update({
            "name": f"net{len(rows):04d}",
            "mutations": mutations,
            "large": large,
            "pnml": text,
        })
        rows.append(ref)
        print(f"{ref['name']}: {ref.get('states')} states, sound={ref['sound']}", file=sys.stderr)
    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    sound = sum(1 for r in rows if r["sound"])
    unbounded = sum(1 for r in rows if not r["bounded"])
    print(f"{len(rows)} nets ({attempts} tried): {sound} sound, {unbounded} unbounded", file=sys.stderr)


if __name__ == "__main__":
    main()
