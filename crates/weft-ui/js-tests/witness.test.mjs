// Unit tests of the witness token game (plans.js: witnessMarkings), run with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { witnessMarkings } from "../assets/plans.js";

function netOf(plan) {
  const places = Object.keys(plan.events).map((id) => ({ id }));
  const arcs = [];
  for (const [id, s] of Object.entries(plan.steps)) {
    for (const on of s.on || []) arcs.push({ from: on, to: id, kind: "consume", when: null });
    for (const em of s.emits || [])
      arcs.push(typeof em === "string"
        ? { from: id, to: em, kind: "emit", when: null }
        : { from: id, to: em.event, kind: "emit", when: em.when ?? null });
  }
  return { places, steps: Object.keys(plan.steps).map((id) => ({ id })), arcs };
}

const deadlock = netOf(JSON.parse(readFileSync(new URL("../../../examples/broken/deadlock.json", import.meta.url))));

test("deadlock example: after `check` the join has `checked` but not the conditional `approved`", () => {
  const ms = witnessMarkings(deadlock, { start: 1 }, ["check"]);
  assert.equal(ms.length, 2);
  assert.deepEqual(ms[0], { start: 1 });
  assert.deepEqual(ms[1], { start: 0, checked: 1 });
});

test("a conditional emit is taken when a later witness step consumes it", () => {
  const ms = witnessMarkings(deadlock, { start: 1 }, ["check", "finish"]);
  assert.equal(ms[1].approved, 1);
  assert.deepEqual(ms[2], { start: 0, checked: 0, approved: 0, done: 1 });
});

test("counts never go negative and the initial marking is not modified", () => {
  const initial = { start: 0 };
  const ms = witnessMarkings(deadlock, initial, ["check"]);
  assert.equal(ms[1].start, 0);
  assert.deepEqual(initial, { start: 0 });
});
