// Unit tests of util.js's coalesced(): the refetch the live views run on every stream
// message (a burst of triggers is one more run, never a pile of concurrent ones).
import { test } from "node:test";
import assert from "node:assert/strict";
import { coalesced } from "../assets/util.js";

const tick = () => new Promise((r) => setTimeout(r, 0));

test("calls while a run is under way make exactly one more run", async () => {
  let runs = 0;
  let running = 0;
  let most = 0;
  let release;
  const f = coalesced(async () => {
    runs += 1;
    running += 1;
    most = Math.max(most, running);
    if (runs === 1) await new Promise((r) => (release = r));
    running -= 1;
  }, () => false);
  const first = f();
  await tick();
  f();
  f();
  f();
  release();
  await first;
  assert.equal(runs, 2);
  assert.equal(most, 1);
  await f();
  assert.equal(runs, 3);
});

test("a stopped view does not run again, and an error reaches the caller", async () => {
  let runs = 0;
  let stopped = false;
  let release;
  const f = coalesced(async () => {
    runs += 1;
    if (runs === 1) await new Promise((r) => (release = r));
    if (runs === 3) throw new Error("boom");
  }, () => stopped);
  const first = f();
  await tick();
  f();
  stopped = true;
  release();
  await first;
  assert.equal(runs, 1);
  stopped = false;
  await f();
  await assert.rejects(f(), /boom/);
  await f(); // not stuck busy after the error
  assert.equal(runs, 4);
});
