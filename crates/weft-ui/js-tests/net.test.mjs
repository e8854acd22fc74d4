// Unit tests of net.js's pure part (withFailureArcs), run with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { withFailureArcs } from "../assets/net.js";
import { layout } from "../assets/layout.js";

const net = {
  places: [{ id: "start" }, { id: "charge.failed" }, { id: "skipped" }, { id: "done" }],
  steps: [{ id: "charge", on_fail: null }, { id: "archive", on_fail: "emit:skipped" }, { id: "apologise" }],
  arcs: [
    { from: "start", to: "charge", kind: "consume" },
    { from: "start", to: "archive", kind: "consume" },
    { from: "charge.failed", to: "apologise", kind: "consume" },
    { from: "apologise", to: "done", kind: "emit" },
  ],
};

test("failure arcs go from a step to its .failed event and its on_fail target", () => {
  const arcs = withFailureArcs(net).arcs.filter((a) => a.kind === "fail");
  assert.deepEqual(arcs.map((a) => [a.from, a.to]), [["charge", "charge.failed"], ["archive", "skipped"]]);
  assert.equal(net.arcs.length, 4, "the input net is not modified");
});

test("failure arcs lay out forwards, like emits", () => {
  const l = layout(withFailureArcs(net));
  const layer = (k) => l.nodes.find((n) => n.key === k).layer;
  assert.ok(layer("s:charge") < layer("p:charge.failed"));
  assert.ok(layer("p:charge.failed") < layer("s:apologise"));
});
