// Views of a large net that stay readable at 50–300 steps: linear chains of steps collapsed into
// one expandable node, the neighbourhood of one step (N hops), and finding a step by name.
// Pure functions over the net shape of GET /v1/plans/{name}/net (no DOM), so net.js draws with
// them and `node --test` checks them.

/** Separator of a collapsed chain's id: not in the plan-name charset, so it never collides. */
export const CHAIN_SEP = " … ";

const isEmit = (a) => a.kind === "emit" || a.kind === "fail";

/**
 * Collapses every maximal linear chain of at least `minLength` steps (each passes its one
 * output, an internal event nothing else touches, to the next step, which has no other input)
 * into one step node `{id: "first … last", group: true, members, inner}`. Chains whose id is in
 * `expanded` stay as they are. Returns `{net, groups: Map(id → {members, inner}), memberOf:
 * Map(step or event id → chain id)}`; the input net is not modified.
 */
export function collapseChains(net, { minLength = 3, expanded = new Set() } = {}) {
  const places = net.places || [];
  const steps = net.steps || [];
  const arcs = net.arcs || [];
  const placeById = new Map(places.map((p) => [p.id, p]));
  const stepIds = new Set(steps.map((s) => s.id));
  const producers = new Map();
  const consumers = new Map();
  const ins = new Map();
  const outs = new Map();
  const push = (m, k, v) => (m.has(k) ? m.get(k).push(v) : m.set(k, [v]));
  for (const a of arcs) {
    if (isEmit(a)) {
      if (!stepIds.has(a.from) || !placeById.has(a.to)) continue;
      push(producers, a.to, a.from);
      push(outs, a.from, a.to);
    } else {
      if (!placeById.has(a.from) || !stepIds.has(a.to)) continue;
      push(consumers, a.from, a.to);
      push(ins, a.to, a.from);
    }
  }
  // next.get(s) = [t, p]: s hands its only output p to t, p's only consumer, t's only input.
  const next = new Map();
  const prev = new Map();
  for (const s of steps) {
    const o = outs.get(s.id) || [];
    if (o.length !== 1) continue;
    const p = o[0];
    const info = placeById.get(p);
    if ((info.kind && info.kind !== "internal") || info.initial) continue; // inputs, results, errors stay

    const pr = producers.get(p) || [];
    const co = consumers.get(p) || [];
    if (pr.length !== 1 || co.length !== 1) continue;
    const t = co[0];
    if (t === s.id || (ins.get(t) || []).length !== 1) continue;
    next.set(s.id, [t, p]);
    prev.set(t, s.id);
  }
  const groups = new Map();
  const memberOf = new Map();
  for (const s of steps) {
    if (prev.has(s.id) || !next.has(s.id)) continue; // chains start where no link comes in
    const members = [s.id];
    const inner = [];
    let cur = s.id;
    while (next.has(cur)) {
      const [t, p] = next.get(cur);
      if (members.includes(t)) break;
      inner.push(p);
      members.push(t);
      cur = t;
    }
    if (members.length < minLength) continue;
    const id = `${members[0]}${CHAIN_SEP}${members[members.length - 1]}`;
    if (expanded.has(id)) continue;
    groups.set(id, { members, inner });
    for (const m of members) memberOf.set(m, id);
    for (const p of inner) memberOf.set(p, id);
  }
  if (!groups.size) return { net, groups, memberOf };
  const outSteps = [];
  for (const s of steps) {
    const g = memberOf.get(s.id);
    if (!g) outSteps.push(s);
    else if (groups.get(g).members[0] === s.id) {
      const { members, inner } = groups.get(g);
      outSteps.push({ id: g, group: true, members, inner, tool: null });
    }
  }
  const outArcs = [];
  for (const a of arcs) {
    const from = memberOf.get(a.from);
    const to = memberOf.get(a.to);
    if (isEmit(a)) {
      if (memberOf.has(a.to)) continue; // into an inner event
      if (from && groups.get(from).members.at(-1) !== a.from) continue;
      outArcs.push(from ? { ...a, from } : a);
    } else {
      if (memberOf.has(a.from)) continue; // from an inner event
      if (to && groups.get(to).members[0] !== a.to) continue;
      outArcs.push(to ? { ...a, to } : a);
    }
  }
  return {
    net: { ...net, places: places.filter((p) => !memberOf.has(p.id)), steps: outSteps, arcs: outArcs },
    groups,
    memberOf,
  };
}

/**
 * The part of `net` within `hops` arcs of step or event `id` (arcs followed both ways): a
 * step's inputs and outputs are 1 hop away, the steps next to it 2. Unknown ids give an empty
 * net.
 */
export function neighbourhood(net, id, hops) {
  const adj = new Map();
  const link = (a, b) => {
    if (!adj.has(a)) adj.set(a, []);
    adj.get(a).push(b);
  };
  const stepIds = new Set((net.steps || []).map((s) => s.id));
  const placeIds = new Set((net.places || []).map((p) => p.id));
  const keyOf = (a) => (isEmit(a) ? [`s:${a.from}`, `p:${a.to}`] : [`p:${a.from}`, `s:${a.to}`]);
  for (const a of net.arcs || []) {
    const [x, y] = keyOf(a);
    link(x, y);
    link(y, x);
  }
  const start = stepIds.has(id) ? `s:${id}` : placeIds.has(id) ? `p:${id}` : null;
  const seen = new Map();
  if (start) {
    seen.set(start, 0);
    const queue = [start];
    for (let i = 0; i < queue.length; i++) {
      const v = queue[i];
      const d = seen.get(v);
      if (d >= hops) continue;
      for (const w of adj.get(v) || []) if (!seen.has(w)) (seen.set(w, d + 1), queue.push(w));
    }
  }
  return {
    ...net,
    places: (net.places || []).filter((p) => seen.has(`p:${p.id}`)),
    steps: (net.steps || []).filter((s) => seen.has(`s:${s.id}`)),
    arcs: (net.arcs || []).filter((a) => keyOf(a).every((k) => seen.has(k))),
  };
}

/**
 * Steps and events whose id matches `query` (case-insensitive), best first: exact, then
 * prefix, then substring; steps before events on ties. At most `limit`.
 */
export function findNodes(net, query, limit = 20) {
  const q = String(query || "").trim().toLowerCase();
  if (!q) return [];
  const all = [
    ...(net.steps || []).map((s) => ({ id: s.id, kind: "step" })),
    ...(net.places || []).map((p) => ({ id: p.id, kind: "place" })),
  ];
  const rank = (id) => {
    const l = id.toLowerCase();
    return l === q ? 0 : l.startsWith(q) ? 1 : l.includes(q) ? 2 : 3;
  };
  return all
    .map((n, i) => [n, rank(n.id), i])
    .filter(([, r]) => r < 3)
    .sort((a, b) => a[1] - b[1] || (a[0].kind === b[0].kind ? a[2] - b[2] : a[0].kind === "step" ? -1 : 1))
    .slice(0, limit)
    .map(([n]) => n);
}

/**
 * The net of a plan document that is not registered yet (the Generate page), in the shape of
 * GET /v1/plans/{name}/net: events as places (consumed and never emitted: input; consumed by
 * nothing or declared output: result), steps, `on` / `emits` arcs. Anything malformed is
 * skipped, never thrown.
 */
export function netOfPlan(doc) {
  const events = doc && typeof doc.events === "object" && doc.events ? doc.events : {};
  const stepsDoc = doc && typeof doc.steps === "object" && doc.steps ? doc.steps : {};
  const list = (v) => (Array.isArray(v) ? v : []);
  const evName = (e) => (typeof e === "string" ? e : e && typeof e.event === "string" ? e.event : null);
  const consumed = new Set();
  const emitted = new Set();
  const steps = [];
  const arcs = [];
  for (const [id, st] of Object.entries(stepsDoc)) {
    if (!st || typeof st !== "object") continue;
    steps.push({ id, tool: st.action ?? null, guard: st.guard ?? null, args: st.args ?? null, on_fail: typeof st.on_fail === "string" ? st.on_fail : null });
    for (const on of list(st.on)) {
      const e = evName(on);
      if (e) (consumed.add(e), arcs.push({ from: e, to: id, kind: "consume", when: null }));
    }
    for (const em of list(st.emits)) {
      const e = evName(em);
      if (e) (emitted.add(e), arcs.push({ from: id, to: e, kind: "emit", when: (em && em.when) ?? null }));
    }
  }
  const places = Object.entries(events).map(([id, def]) => {
    const kind = (def && def.kind) === "output" || !consumed.has(id) ? "result"
      : (def && def.kind) === "input" || !emitted.has(id) ? "input" : "internal";
    return { id, kind, initial: kind === "input" ? 1 : 0, description: (def && def.description) ?? null };
  });
  return { places, steps, arcs };
}

/**
 * A layout (layout.js) wider than `maxWidth` cut into rows read like lines of text: its layers
 * are split into bands no wider than `maxWidth` (a band has at least one layer), stacked top to
 * bottom `gap` apart. Arcs between bands run from the end of one row to the start of the next.
 * Returns a new layout of the same shape (`rows` says how many); a narrow one is returned as is.
 */
export function wrapRows(lay, maxWidth, gap = 36) {
  if (!lay || !(lay.width > maxWidth) || !lay.nodes.length) return { ...lay, rows: 1 };
  const left = [];
  const right = [];
  for (const n of lay.nodes) {
    left[n.layer] = Math.min(left[n.layer] ?? Infinity, n.x - n.w / 2);
    right[n.layer] = Math.max(right[n.layer] ?? -Infinity, n.x + n.w / 2);
  }
  // Band starts, in layout x: a new band begins at a layer that would overflow the current one.
  const starts = [];
  let bandLeft = null;
  for (let l = 0; l < left.length; l++) {
    if (left[l] === undefined) continue;
    if (bandLeft === null || right[l] - bandLeft > maxWidth) {
      bandLeft = left[l];
      starts.push({ layer: l, x: left[l] });
    }
  }
  if (starts.length < 2) return { ...lay, rows: 1 };
  const margin = starts[0].x;
  // Where a point belongs: the last band starting at or before it (points between layers go
  // with the band of the layer they lead to only once past the previous layer's right edge).
  const bandOfX = (x) => {
    let b = 0;
    for (let i = 1; i < starts.length; i++) if (x >= starts[i].x - 1) b = i;
    return b;
  };
  const rowH = lay.height;
  const move = (x, y, b) => [Math.round((x - starts[b].x + margin) * 10) / 10, Math.round((y + b * (rowH + gap)) * 10) / 10];
  let width = 0;
  const nodes = lay.nodes.map((n) => {
    const b = bandOfX(n.x - n.w / 2);
    const [x, y] = move(n.x, n.y, b);
    width = Math.max(width, x + n.w / 2 + margin);
    return { ...n, x, y, row: b };
  });
  // An arc into a later row leaves its row at the right, runs back along the gap above the
  // target's row and enters it from the left (a carriage return), instead of crossing rows.
  const xr = Math.round((width - margin / 2) * 10) / 10;
  const xl = Math.round((margin / 2) * 10) / 10;
  const edges = lay.edges.map((e) => {
    const pts = [];
    let prevBand = null;
    for (const [x, y] of e.points) {
      const b = bandOfX(x);
      const p = move(x, y, b);
      if (prevBand !== null && b > prevBand) {
        const last = pts[pts.length - 1];
        const gy = b * (rowH + gap) - gap / 2;
        pts.push([xr, last[1]], [xr, gy], [xl, gy], [xl, p[1]]);
      }
      pts.push(p);
      prevBand = b;
    }
    return { ...e, points: pts };
  });
  return { ...lay, nodes, edges, width: Math.round(width * 10) / 10, height: starts.length * rowH + (starts.length - 1) * gap, rows: starts.length };
}
