// Layered (Sugiyama-style) layout of a plan's net, left to right: pure functions, no DOM, so the
// browser draws with it and `node --test` checks it. Steps: break cycles (DFS back-edges are
// reversed), longest-path layering, dummy nodes on long edges, barycenter ordering sweeps that
// keep the ordering with the fewest crossings, then coordinates (columns per layer, rows placed
// by an order-preserving least-squares fit towards neighbours), then edge polylines.

/** Geometry constants (px). */
export const GEOM = {
  placeR: 15,
  stepH: 30,
  charW: 6.6,
  labelH: 14,
  rowGap: 14,
  colGap: 70,
  margin: 24,
  maxLabel: 28,
};

/** Visible label: long ids are cut with an ellipsis (the full id is in the tooltip). */
export function shortLabel(id) {
  return id.length > GEOM.maxLabel ? id.slice(0, GEOM.maxLabel - 1) + "…" : id;
}

function nodeSize(kind, id) {
  const text = shortLabel(id).length * GEOM.charW;
  if (kind === "place") {
    const w = Math.max(GEOM.placeR * 2, text);
    return { w, h: GEOM.placeR * 2 + GEOM.labelH };
  }
  if (kind === "dummy") return { w: 0, h: 4 };
  return { w: Math.max(60, text + 20), h: GEOM.stepH };
}

/**
 * Lays out `net` = {places:[{id}], steps:[{id}], arcs:[{from,to,kind}]} (the shape of
 * `GET /v1/plans/{name}/net`). Arcs go place→step (consume, read) or step→place (emit, and
 * fail: where a step's failure goes); an endpoint that names both a place and a step is
 * resolved by direction. Returns
 * {nodes:[{key,id,kind,layer,order,x,y,w,h}], edges:[{from,to,kind,when,reversed,points}],
 *  width, height, layers}. `x`,`y` are node centres; `points` run from the arc's source to its
 * target. Deterministic: the same net gives the same layout.
 */
export function layout(net) {
  const nodes = [];
  const byKey = new Map();
  const add = (kind, id, extra) => {
    const key = (kind === "place" ? "p:" : "s:") + id;
    if (byKey.has(key)) return;
    const n = { key, id, kind, ...nodeSize(kind, id), ...extra };
    byKey.set(key, n);
    nodes.push(n);
  };
  for (const p of net.places || []) add("place", p.id);
  for (const s of net.steps || []) add("step", s.id);

  // Arcs: resolve endpoints (place→step for consume/read, step→place for emit).
  const edges = [];
  for (const a of net.arcs || []) {
    const emit = a.kind === "emit" || a.kind === "fail";
    const from = (emit ? "s:" : "p:") + a.from;
    const to = (emit ? "p:" : "s:") + a.to;
    if (!byKey.has(from) || !byKey.has(to)) continue;
    edges.push({ from, to, kind: a.kind || "consume", when: a.when ?? null, reversed: false });
  }

  const index = new Map(nodes.map((n, i) => [n.key, i]));
  const N = nodes.length;
  const out = Array.from({ length: N }, () => []);
  const inc = Array.from({ length: N }, () => []);
  edges.forEach((e, i) => {
    out[index.get(e.from)].push(i);
    inc[index.get(e.to)].push(i);
  });

  // 1. Cycle breaking: iterative DFS from sources first (then anything left), in input order;
  //    an edge to a node on the stack is a back-edge and is reversed for layering.
  const state = new Uint8Array(N); // 0 new, 1 on stack, 2 done
  const roots = [];
  for (let i = 0; i < N; i++) if (inc[i].length === 0) roots.push(i);
  for (let i = 0; i < N; i++) if (inc[i].length !== 0) roots.push(i);
  for (const r of roots) {
    if (state[r]) continue;
    const stack = [[r, 0]];
    state[r] = 1;
    while (stack.length) {
      const top = stack[stack.length - 1];
      const [v, k] = top;
      if (k < out[v].length) {
        top[1]++;
        const ei = out[v][k];
        const w = index.get(edges[ei].to);
        if (state[w] === 1) edges[ei].reversed = true;
        else if (state[w] === 0) {
          state[w] = 1;
          stack.push([w, 0]);
        }
      } else {
        state[v] = 2;
        stack.pop();
      }
    }
  }
  // Layout direction of each edge (lower layer → higher layer).
  const dirFrom = (e) => index.get(e.reversed ? e.to : e.from);
  const dirTo = (e) => index.get(e.reversed ? e.from : e.to);
  const succ = Array.from({ length: N }, () => []);
  const pred = Array.from({ length: N }, () => []);
  for (const e of edges) {
    const a = dirFrom(e);
    const b = dirTo(e);
    if (a === b) continue; // self loop: no layering constraint
    succ[a].push(b);
    pred[b].push(a);
  }

  // 2. Longest-path layering (Kahn order, ties by input order).
  const layer = new Int32Array(N);
  const indeg = pred.map((p) => p.length);
  const queue = [];
  for (let i = 0; i < N; i++) if (indeg[i] === 0) queue.push(i);
  const topo = [];
  for (let qi = 0; qi < queue.length; qi++) {
    const v = queue[qi];
    topo.push(v);
    for (const w of succ[v]) {
      if (layer[v] + 1 > layer[w]) layer[w] = layer[v] + 1;
      if (--indeg[w] === 0) queue.push(w);
    }
  }
  // Sources sit just before their earliest successor (an input event consumed late in the net
  // is drawn next to its consumer, not in column 0 with a long arc).
  for (let t = topo.length - 1; t >= 0; t--) {
    const v = topo[t];
    if (pred[v].length === 0 && succ[v].length > 0) {
      let m = Infinity;
      for (const w of succ[v]) m = Math.min(m, layer[w]);
      layer[v] = m - 1;
    }
  }
  let layerCount = 0;
  for (let i = 0; i < N; i++) {
    nodes[i].layer = layer[i];
    layerCount = Math.max(layerCount, layer[i] + 1);
  }

  // 3. Dummy nodes: every edge spanning k>1 layers becomes a chain of k-1 dummies.
  const all = nodes.slice(); // real + dummy, by index
  const chains = edges.map((e) => {
    const a = dirFrom(e);
    const b = dirTo(e);
    const chain = [a];
    for (let l = layer[a] + 1; l < layer[b]; l++) {
      const d = { key: `d:${all.length}`, id: "", kind: "dummy", layer: l, ...nodeSize("dummy", "") };
      all.push(d);
      chain.push(all.length - 1);
    }
    chain.push(b);
    return chain;
  });
  const M = all.length;
  const up = Array.from({ length: M }, () => []); // neighbours in layer-1
  const down = Array.from({ length: M }, () => []); // neighbours in layer+1
  for (const chain of chains) {
    for (let i = 0; i + 1 < chain.length; i++) {
      const a = chain[i];
      const b = chain[i + 1];
      if (a === b || all[a].layer >= all[b].layer) continue;
      down[a].push(b);
      up[b].push(a);
    }
  }

  // 4. Ordering: initial order by a DFS over the layout direction (keeps connected parts
  //    together), then barycenter sweeps; keep the ordering with the fewest crossings.
  const layers = Array.from({ length: layerCount }, () => []);
  const seen = new Uint8Array(M);
  const visit = (r) => {
    const st = [r];
    while (st.length) {
      const v = st.pop();
      if (seen[v]) continue;
      seen[v] = 1;
      layers[all[v].layer].push(v);
      for (let k = down[v].length - 1; k >= 0; k--) if (!seen[down[v][k]]) st.push(down[v][k]);
    }
  };
  for (const v of topo) if (up[v].length === 0) visit(v);
  for (let v = 0; v < M; v++) if (!seen[v]) visit(v);

  const pos = new Float64Array(M);
  const setPos = () => layers.forEach((l) => l.forEach((v, i) => (pos[v] = i)));
  setPos();
  const crossings = () => {
    let total = 0;
    for (let l = 0; l + 1 < layerCount; l++) total += crossBetween(layers[l], down, pos);
    return total;
  };
  let best = layers.map((l) => l.slice());
  let bestC = crossings();
  const sweep = (downward) => {
    const range = downward
      ? [...Array(layerCount).keys()].slice(1)
      : [...Array(layerCount).keys()].reverse().slice(1);
    for (const l of range) {
      const nbrs = downward ? up : down;
      const keyed = layers[l].map((v, i) => {
        const ns = nbrs[v];
        if (ns.length === 0) return [v, i, pos[v]];
        let s = 0;
        for (const w of ns) s += pos[w];
        return [v, i, s / ns.length];
      });
      keyed.sort((a, b) => a[2] - b[2] || a[1] - b[1]);
      layers[l] = keyed.map((k) => k[0]);
      layers[l].forEach((v, i) => (pos[v] = i));
    }
  };
  const iterations = M > 2000 ? 4 : 12;
  for (let it = 0; it < iterations && bestC > 0; it++) {
    sweep(it % 2 === 0);
    const c = crossings();
    if (c < bestC) {
      bestC = c;
      best = layers.map((l) => l.slice());
    }
  }
  for (let l = 0; l < layerCount; l++) layers[l] = best[l];
  setPos();

  // 5. Coordinates: columns by layer, rows placed by an order-preserving fit to neighbours.
  const colW = layers.map((l) => l.reduce((m, v) => Math.max(m, all[v].w), 0));
  const colX = [];
  let x = GEOM.margin;
  for (let l = 0; l < layerCount; l++) {
    colX.push(x + colW[l] / 2);
    x += colW[l] + GEOM.colGap;
  }
  const y = new Float64Array(M);
  const gapAfter = (v) => all[v].h / 2;
  const packLayer = (l) => {
    let cy = 0;
    for (const v of layers[l]) {
      cy += gapAfter(v);
      y[v] = cy;
      cy += gapAfter(v) + GEOM.rowGap;
    }
  };
  for (let l = 0; l < layerCount; l++) packLayer(l);
  // Centre every layer on the tallest one before fitting.
  const span = (l) =>
    layers[l].length ? y[layers[l][layers[l].length - 1]] - y[layers[l][0]] : 0;
  const tallest = Math.max(0, ...layers.map((_, l) => span(l)));
  for (let l = 0; l < layerCount; l++) {
    const shift = (tallest - span(l)) / 2;
    for (const v of layers[l]) y[v] += shift;
  }
  const fit = (l, nbrs) => {
    const vs = layers[l];
    if (!vs.length) return;
    const want = vs.map((v) => {
      const ns = nbrs[v];
      if (!ns.length) return y[v];
      let s = 0;
      for (const w of ns) s += y[w];
      return s / ns.length;
    });
    // Minimum distance between consecutive centres.
    const offs = [0];
    for (let i = 1; i < vs.length; i++)
      offs.push(offs[i - 1] + gapAfter(vs[i - 1]) + gapAfter(vs[i]) + GEOM.rowGap);
    const fitted = isotonic(want.map((w, i) => w - offs[i]));
    vs.forEach((v, i) => (y[v] = fitted[i] + offs[i]));
  };
  const both = Array.from({ length: M }, (_, v) => up[v].concat(down[v]));
  for (let it = 0; it < 6; it++) {
    for (let l = 1; l < layerCount; l++) fit(l, up);
    for (let l = layerCount - 2; l >= 0; l--) fit(l, down);
  }
  for (let l = 0; l < layerCount; l++) fit(l, both);
  let minY = Infinity;
  let maxY = -Infinity;
  for (let v = 0; v < M; v++) {
    minY = Math.min(minY, y[v] - all[v].h / 2);
    maxY = Math.max(maxY, y[v] + all[v].h / 2);
  }
  if (!Number.isFinite(minY)) {
    minY = 0;
    maxY = 0;
  }
  for (let v = 0; v < M; v++) {
    all[v].x = round(colX[all[v].layer]);
    all[v].y = round(y[v] - minY + GEOM.margin);
  }
  layers.forEach((l) => l.forEach((v, i) => (all[v].order = i)));

  // 6. Edge polylines, from the arc's source to its target.
  const attach = (n, side) => {
    const half = n.kind === "place" ? GEOM.placeR : n.w / 2;
    const cy = n.kind === "place" ? n.y - GEOM.labelH / 2 : n.y;
    return [round(n.x + side * half), round(cy)];
  };
  edges.forEach((e, i) => {
    const chain = chains[i];
    const pts = [];
    if (chain[0] === chain[chain.length - 1]) {
      const n = all[chain[0]];
      const [ax, ay] = attach(n, 1);
      pts.push([ax, ay], [ax + 20, ay - 24], [ax - n.w - 20, ay - 24], attach(n, -1));
    } else {
      pts.push(attach(all[chain[0]], 1));
      for (let k = 1; k + 1 < chain.length; k++) pts.push([all[chain[k]].x, all[chain[k]].y]);
      pts.push(attach(all[chain[chain.length - 1]], -1));
    }
    if (e.reversed) {
      // Back-edges run right to left below the forward arcs so a 2-cycle stays two lines.
      for (const p of pts) p[1] = round(p[1] + 8);
      if (pts.length === 2) {
        const [[x0, y0], [x1, y1]] = pts;
        pts.splice(1, 0, [round((x0 + x1) / 2), round(Math.max(y0, y1) + 22)]);
      }
      pts.reverse();
    }
    e.points = pts;
  });

  const real = all.slice(0, N);
  return {
    nodes: real,
    edges,
    width: round(x - GEOM.colGap + GEOM.margin),
    height: round(maxY - minY + 2 * GEOM.margin),
    layers: layerCount,
    crossings: bestC,
  };
}

function round(v) {
  return Math.round(v * 10) / 10;
}

/** Crossings between layer `upper` and the next one (edges via `down`), by inversion count. */
export function crossBetween(upper, down, pos) {
  const pairs = [];
  for (const v of upper) for (const w of down[v]) pairs.push([pos[v], pos[w]]);
  pairs.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  // Count pairs i<j with b_i > b_j (merge sort).
  const arr = pairs.map((p) => p[1]);
  const tmp = new Array(arr.length);
  const count = (lo, hi) => {
    if (hi - lo < 2) return 0;
    const mid = (lo + hi) >> 1;
    let c = count(lo, mid) + count(mid, hi);
    let i = lo;
    let j = mid;
    let k = lo;
    while (i < mid && j < hi) {
      if (arr[j] < arr[i]) {
        c += mid - i;
        tmp[k++] = arr[j++];
      } else tmp[k++] = arr[i++];
    }
    while (i < mid) tmp[k++] = arr[i++];
    while (j < hi) tmp[k++] = arr[j++];
    for (let t = lo; t < hi; t++) arr[t] = tmp[t];
    return c;
  };
  return count(0, arr.length);
}

/** Pool-adjacent-violators: the non-decreasing sequence closest (least squares) to `v`. */
export function isotonic(v) {
  const blocks = []; // [sum, count]
  for (const x of v) {
    blocks.push([x, 1]);
    while (blocks.length > 1) {
      const b = blocks[blocks.length - 1];
      const a = blocks[blocks.length - 2];
      if (a[0] / a[1] <= b[0] / b[1]) break;
      blocks.pop();
      a[0] += b[0];
      a[1] += b[1];
    }
  }
  const out = [];
  for (const [s, c] of blocks) for (let i = 0; i < c; i++) out.push(s / c);
  return out;
}

/** SVG path data for a polyline: straight ends, smooth horizontal S-curves between points. */
export function pathData(points) {
  if (!points.length) return "";
  let d = `M${points[0][0]},${points[0][1]}`;
  for (let i = 1; i < points.length; i++) {
    const [x0, y0] = points[i - 1];
    const [x1, y1] = points[i];
    const mx = (x0 + x1) / 2;
    d += ` C${round(mx)},${y0} ${round(mx)},${y1} ${x1},${y1}`;
  }
  return d;
}
