// Plans of realistic size for the UI at scale (issue #28: 50 and 300 steps): a pipeline of
// stages, each either a run of steps one after another or a fan-out of parallel branches that a
// join step waits for. Generated, so the browser test (e2e.mjs) and the layout tests
// (crates/weft-ui/js-tests) use the same documents without large files in the repository.

const VERBS = ["fetch", "validate", "enrich", "score", "check", "transform", "store", "notify", "audit", "price"];

/** A valid plan document (`echo` steps only, runs offline) named `name` with exactly `n` steps. */
export function bigPlan(n, name = `big-${n}`) {
  const events = { start: { kind: "input", description: "The run's input." } };
  const steps = {};
  let count = 0;
  let prev = "start";
  let stage = 0;
  const step = (id, on, emits) => {
    steps[id] = { on, action: "echo", args: { step: id, after: on }, emits };
    count++;
  };
  const id = (k) => `${VERBS[k % VERBS.length]}_${String(k).padStart(3, "0")}`;
  while (count < n) {
    const left = n - count;
    if (stage % 3 === 2 && left >= 5) {
      // A fan-out: 2 or 3 branches of 1–2 steps, then a join.
      const width = 2 + (stage % 2);
      const ends = [];
      for (let b = 0; b < width && count < n - 1; b++) {
        let on = prev;
        const len = 1 + ((stage + b) % 2);
        for (let k = 0; k < len && count < n - 1; k++) {
          const s = id(count);
          const ev = `${s}.done`;
          events[ev] = {};
          step(s, [on], [ev]);
          on = ev;
        }
        ends.push(on);
      }
      const j = `join_${String(count).padStart(3, "0")}`;
      const ev = `${j}.done`;
      events[ev] = {};
      step(j, ends, [ev]);
      prev = ev;
    } else {
      // A run of 3–6 steps one after another.
      const len = Math.min(left, 3 + (stage % 4));
      for (let k = 0; k < len; k++) {
        const s = id(count);
        const ev = `${s}.done`;
        events[ev] = {};
        step(s, [prev], [ev]);
        prev = ev;
      }
    }
    stage++;
  }
  events[prev].kind = "output";
  return {
    plan_name: name,
    description: `A generated ${n}-step pipeline for the UI at scale: runs of steps and fan-outs joined again.`,
    graph_type: "acyclic",
    events,
    steps,
  };
}
