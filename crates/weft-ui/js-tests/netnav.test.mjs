// Unit tests of the large-net views (assets/netnav.js: collapsed chains, neighbourhoods,
// search, a plan's net before registration) and of the "fit" scale (net.js), on the 50- and
// 300-step plans the browser test uses (ui-tests/big-plans.mjs). Run with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { collapseChains, neighbourhood, findNodes, netOfPlan, wrapRows, CHAIN_SEP } from "../assets/netnav.js";
import { layout, GEOM } from "../assets/layout.js";
import { fitScale, LABEL_PX, MIN_LABEL_PX, withFailureArcs } from "../assets/net.js";
import { shortType, isType, eventTypeForms } from "../assets/util.js";
import { bigPlan } from "../../../ui-tests/big-plans.mjs";

const ends = (net) => {
  const places = new Set(net.places.map((p) => p.id));
  const steps = new Set(net.steps.map((s) => s.id));
  for (const a of net.arcs) {
    const emit = a.kind === "emit" || a.kind === "fail";
    assert.ok(emit ? steps.has(a.from) && places.has(a.to) : places.has(a.from) && steps.has(a.to), `arc ${a.from}->${a.to} has both ends`);
  }
};

/** Overlapping node boxes in a layout (0 expected). */
function overlaps(l) {
  let n = 0;
  const sorted = l.nodes.slice().sort((p, q) => p.x - q.x || p.y - q.y);
  for (let i = 0; i < sorted.length; i++)
    for (let j = i + 1; j < sorted.length; j++) {
      const [a, b] = [sorted[i], sorted[j]];
      if (b.x - b.w / 2 >= a.x + a.w / 2) break;
      if (Math.abs(a.x - b.x) < (a.w + b.w) / 2 && Math.abs(a.y - b.y) < (a.h + b.h) / 2) n++;
    }
  return n;
}

test("a linear chain of 300 steps collapses into one node; expanding it restores the net", () => {
  const places = [{ id: "in", kind: "input" }];
  const steps = [];
  const arcs = [];
  for (let i = 0; i < 300; i++) {
    places.push({ id: `e${i}`, kind: i === 299 ? "result" : "internal" });
    steps.push({ id: `s${i}` });
    arcs.push({ from: i ? `e${i - 1}` : "in", to: `s${i}`, kind: "consume" }, { from: `s${i}`, to: `e${i}`, kind: "emit" });
  }
  const net = { places, steps, arcs };
  const c = collapseChains(net);
  assert.equal(c.net.steps.length, 1);
  assert.deepEqual(c.net.places.map((p) => p.id), ["in", "e299"], "input and result stay");
  const id = `s0${CHAIN_SEP}s299`;
  assert.equal(c.groups.get(id).members.length, 300);
  ends(c.net);
  assert.equal(collapseChains(net, { expanded: new Set([id]) }).net.steps.length, 300);
  assert.equal(net.steps.length, 300, "the input is not modified");
});

test("big plans: collapsing keeps every fork and join, lays out without overlaps and fits readable", () => {
  for (const n of [50, 300]) {
    const net = withFailureArcs(netOfPlan(bigPlan(n)));
    assert.equal(net.steps.length, n);
    const c = collapseChains(net);
    ends(c.net);
    // Every step is either drawn or a member of exactly one drawn chain.
    const drawn = new Set(c.net.steps.map((s) => s.id));
    for (const s of net.steps) assert.ok(drawn.has(s.id) !== c.memberOf.has(s.id), `${s.id} drawn once`);
    assert.ok(c.net.steps.length <= n * 0.6, `${n} steps collapse to ${c.net.steps.length} nodes`);
    const full = layout(net);
    const small = layout(c.net);
    assert.equal(overlaps(full), 0);
    assert.equal(overlaps(small), 0);
    assert.ok(small.width < full.width * 0.7, `collapsed is narrower: ${small.width} vs ${full.width}`);
    assert.ok(small.crossings <= full.crossings);
    // Fit never shrinks labels below MIN_LABEL_PX, whatever the size.
    const s = fitScale(small.width, small.height, 600, 500);
    assert.ok(s * LABEL_PX >= MIN_LABEL_PX - 1e-9, `label ${s * LABEL_PX}px at fit`);
    console.log(`${n} steps: ${full.width}x${full.height} (${full.crossings} crossings) -> collapsed ${c.net.steps.length} nodes ${small.width}x${small.height}`);
  }
});

test("a 300-step layout stays within a bounded size and crossing count", () => {
  const net = withFailureArcs(netOfPlan(bigPlan(300)));
  const l = layout(net);
  // One column per event or step on the longest path; the pipeline is at most 3 branches wide.
  assert.ok(l.height <= 3 * (GEOM.placeR * 2 + GEOM.labelH + GEOM.rowGap) + 2 * GEOM.margin + 60, `height ${l.height}`);
  assert.equal(l.crossings, 0, "a series-parallel pipeline draws without crossings");
});

test("fit scale: small nets are not blown up, big ones stop at the readable minimum", () => {
  assert.equal(fitScale(100, 100, 1000, 1000), 1.25);
  assert.equal(fitScale(4000, 300, 600, 500), MIN_LABEL_PX / LABEL_PX);
  assert.ok(Math.abs(fitScale(800, 300, 600, 500) - 0.82) < 0.01 || fitScale(800, 300, 600, 500) === 0.75);
  assert.ok(Number.isFinite(fitScale(0, 0, 600, 500)));
});

test("neighbourhood: a step's inputs and outputs at 1 hop, the next steps at 2", () => {
  const net = netOfPlan(bigPlan(50));
  const one = neighbourhood(net, "enrich_002", 1);
  assert.deepEqual(one.steps.map((s) => s.id), ["enrich_002"]);
  assert.deepEqual(one.places.map((p) => p.id).sort(), ["enrich_002.done", "validate_001.done"]);
  const two = neighbourhood(net, "enrich_002", 2);
  assert.deepEqual(two.steps.map((s) => s.id).sort(), ["enrich_002", "score_003", "validate_001"]);
  ends(two);
  assert.equal(neighbourhood(net, "nope", 3).steps.length, 0);
});

test("findNodes: exact, then prefix, then substring; steps first", () => {
  const net = netOfPlan(bigPlan(300));
  assert.equal(findNodes(net, "price_299")[0].id, "price_299");
  assert.equal(findNodes(net, "PRICE_29")[0].id, "price_299");
  assert.ok(findNodes(net, "PRICE_").every((n) => n.id.startsWith("price_")));
  assert.equal(findNodes(net, "_299")[0].id, "price_299");
  assert.equal(findNodes(net, "_299")[0].kind, "step");
  assert.deepEqual(findNodes(net, "zzz"), []);
  assert.deepEqual(findNodes(net, "  "), []);
});

test("netOfPlan tolerates malformed documents", () => {
  for (const doc of [null, 3, "x", {}, { events: 5, steps: [] }, { steps: { a: null, b: { on: "x", emits: [null, 4, { event: 1 }] } } }]) {
    const net = netOfPlan(doc);
    assert.ok(Array.isArray(net.places) && Array.isArray(net.steps) && Array.isArray(net.arcs));
    layout(collapseChains(net).net);
  }
});

test("event types compare in their short and reverse-DNS forms", () => {
  assert.equal(shortType("dev.weft.plan.step.finished"), "plan.step.finished");
  assert.ok(isType("dev.weft.plan.completed", "plan.completed"));
  assert.ok(isType("plan.completed", "dev.weft.plan.completed"));
  assert.ok(!isType("plan.completed", "plan.failed"));
  assert.deepEqual(eventTypeForms("plan.failed"), ["plan.failed", "dev.weft.plan.failed"]);
});

test("wrapRows cuts a long layout into rows no wider than asked, without overlaps", () => {
  for (const n of [50, 300]) {
    const l = layout(collapseChains(withFailureArcs(netOfPlan(bigPlan(n)))).net);
    const w = wrapRows(l, 1100);
    assert.ok(w.rows > 1, `${n}: ${w.rows} rows`);
    assert.ok(w.width <= 1100 + 2 * GEOM.margin, `${n}: width ${w.width}`);
    assert.equal(w.nodes.length, l.nodes.length);
    assert.equal(overlaps(w), 0);
    for (const nd of w.nodes) assert.ok(nd.x - nd.w / 2 >= 0 && nd.x + nd.w / 2 <= w.width && nd.y >= 0 && nd.y <= w.height, `${nd.key} inside`);
    // Reading order: a later layer is never in an earlier row.
    const byLayer = [...w.nodes].sort((a, b) => a.layer - b.layer);
    for (let i = 1; i < byLayer.length; i++) assert.ok(byLayer[i].row >= byLayer[i - 1].row);
    for (const e of w.edges) for (const [x, y] of e.points) assert.ok(Number.isFinite(x) && Number.isFinite(y));
  }
  const small = layout(netOfPlan(bigPlan(5)));
  assert.equal(wrapRows(small, 5000).rows, 1, "a narrow layout stays one row");
});
