// Draws a plan's net as SVG from the layout (layout.js): places as circles with their token
// count, steps as boxes, arcs as paths with arrowheads; tooltips (<title>) carry guards, tools,
// args and `when` conditions. Returns a handle the views use to show a marking, step states
// (in flight, failed, witness) and the selected place, and to zoom.
import { layout, pathData, shortLabel, GEOM } from "./layout.js";
import { h, clear } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
const s = (tag, attrs, ...kids) => h(`svg:${tag}`, attrs, ...kids);

function stepTitle(st) {
  const lines = [`step ${st.id}`];
  if (st.tool) lines.push(`tool: ${st.tool}`);
  if (st.guard) lines.push(`guard: ${st.guard}`);
  if (st.args) lines.push(`args: ${JSON.stringify(st.args, null, 1)}`);
  if (st.on_fail) lines.push(`on_fail: ${st.on_fail}`);
  return lines.join("\n");
}

/**
 * Adds the arcs a failure takes (drawn dashed red): a step to its `<step>.failed` event when a
 * step consumes that, and to its `on_fail: "emit:X"` target.
 */
export function withFailureArcs(net) {
  const places = new Set((net.places || []).map((p) => p.id));
  const arcs = (net.arcs || []).slice();
  for (const st of net.steps || []) {
    const failed = `${st.id}.failed`;
    if (places.has(failed) && !arcs.some((a) => a.from === st.id && a.to === failed))
      arcs.push({ from: st.id, to: failed, kind: "fail", when: "the step failed" });
    const m = /^emit:(.+)$/.exec(st.on_fail || "");
    if (m && places.has(m[1]) && !arcs.some((a) => a.from === st.id && a.to === m[1]))
      arcs.push({ from: st.id, to: m[1], kind: "fail", when: "the step failed (on_fail)" });
  }
  return { ...net, arcs };
}

/**
 * Draws `net` (GET /v1/plans/{name}/net) into `container`.
 * `opts.onPlace(id)` / `opts.onStep(id)` are called on click or Enter/Space.
 */
export function drawNet(container, net, opts = {}) {
  clear(container);
  const lay = layout(withFailureArcs(net));
  const stepInfo = new Map((net.steps || []).map((st) => [st.id, st]));
  const placeInfo = new Map((net.places || []).map((p) => [p.id, p]));

  const svg = s("svg", {
    class: "net",
    xmlns: SVG,
    viewBox: `0 0 ${lay.width} ${lay.height}`,
    role: "group",
    "aria-label": `Net with ${net.places.length} events and ${net.steps.length} steps`,
    "data-testid": "net",
  });
  svg.append(
    s(
      "defs",
      {},
      s(
        "marker",
        { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
        s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }),
      ),
    ),
  );
  const gEdges = s("g", { class: "arcs" });
  const gNodes = s("g", { class: "nodes" });
  svg.append(gEdges, gNodes);

  for (const e of lay.edges) {
    const from = e.from.slice(2);
    const to = e.to.slice(2);
    const cls = `arc arc-${e.kind}${e.reversed ? " arc-back" : ""}${e.when ? " arc-when" : ""}`;
    const path = s("path", {
      d: pathData(e.points),
      class: cls,
      "marker-end": e.kind === "read" ? null : "url(#arrow)",
      "data-from": from,
      "data-to": to,
    });
    path.append(s("title", {}, `${from} → ${to} (${e.kind})${e.when ? `\nwhen: ${e.when}` : ""}`));
    gEdges.append(path);
  }

  const placeEls = new Map();
  const stepEls = new Map();
  const activate = (fn, id) => (ev) => {
    if (ev.type === "keydown" && ev.key !== "Enter" && ev.key !== " ") return;
    ev.preventDefault();
    fn && fn(id);
  };
  for (const n of lay.nodes) {
    if (n.kind === "place") {
      const info = placeInfo.get(n.id) || {};
      const cy = n.y - GEOM.labelH / 2;
      const count = s("text", { x: n.x, y: cy + 4, class: "count", "aria-hidden": "true" }, "");
      const g = s(
        "g",
        {
          class: `place kind-${info.kind || "internal"}`,
          "data-testid": `place-${n.id}`,
          "data-id": n.id,
          "data-tokens": "0",
          tabindex: "0",
          role: "button",
          "aria-label": `event ${n.id}`,
        },
        s("title", {}, `event ${n.id}${info.kind ? ` (${info.kind})` : ""}`),
        s("circle", { cx: n.x, cy, r: GEOM.placeR }),
        count,
        s("text", { x: n.x, y: n.y + n.h / 2 - 2, class: "label" }, shortLabel(n.id)),
      );
      g.addEventListener("click", activate(opts.onPlace, n.id));
      g.addEventListener("keydown", activate(opts.onPlace, n.id));
      placeEls.set(n.id, { g, count });
      gNodes.append(g);
    } else {
      const info = stepInfo.get(n.id) || { id: n.id };
      const g = s(
        "g",
        {
          class: "step",
          "data-testid": `step-${n.id}`,
          "data-id": n.id,
          tabindex: "0",
          role: "button",
          "aria-label": `step ${n.id}${info.tool ? `, tool ${info.tool}` : ""}`,
        },
        s("title", {}, stepTitle(info)),
        s("rect", { x: n.x - n.w / 2, y: n.y - n.h / 2, width: n.w, height: n.h, rx: 4 }),
        s("text", { x: n.x, y: n.y + 4, class: "label" }, shortLabel(n.id)),
      );
      g.addEventListener("click", activate(opts.onStep, n.id));
      g.addEventListener("keydown", activate(opts.onStep, n.id));
      stepEls.set(n.id, g);
      gNodes.append(g);
    }
  }

  // Zoom: the SVG's pixel size is the layout size times the scale; the container scrolls.
  const wrap = h("div", { class: "net-scroll", "data-testid": "net-scroll" }, svg);
  let scale = 1;
  const apply = () => {
    svg.setAttribute("width", String(Math.max(1, Math.round(lay.width * scale))));
    svg.setAttribute("height", String(Math.max(1, Math.round(lay.height * scale))));
    zoomLabel.textContent = `${Math.round(scale * 100)}%`;
  };
  const fit = () => {
    const avail = Math.max(200, wrap.clientWidth - 8);
    const availH = Math.max(200, (wrap.clientHeight || 500) - 8);
    scale = Math.min(1.25, avail / lay.width, Math.max(availH / lay.height, 0.35));
    scale = Math.max(0.2, scale);
    apply();
  };
  const zoomLabel = h("span", { class: "zoom-label", "aria-live": "polite" }, "100%");
  const tools = h(
    "div",
    { class: "net-tools" },
    h("button", { type: "button", "aria-label": "Zoom out", onclick: () => ((scale = Math.max(0.1, scale / 1.25)), apply()) }, "−"),
    zoomLabel,
    h("button", { type: "button", "aria-label": "Zoom in", onclick: () => ((scale = Math.min(4, scale * 1.25)), apply()) }, "+"),
    h("button", { type: "button", "aria-label": "Fit to view", onclick: fit }, "Fit"),
    h("span", { class: "legend muted" },
      h("span", { class: "lg lg-place" }), " event ",
      h("span", { class: "lg lg-step" }), " step ",
      h("span", { class: "lg lg-inflight" }), " in flight ",
      h("span", { class: "lg lg-failed" }), " failed"),
  );
  container.append(tools, wrap);
  apply();
  requestAnimationFrame(fit);

  let selected = null;
  return {
    layout: lay,
    svg,
    /** Token counts per place (`{place: n}`); places not named show 0. */
    setMarking(counts) {
      for (const [id, { g, count }] of placeEls) {
        const n = counts[id] || 0;
        g.setAttribute("data-tokens", String(n));
        g.classList.toggle("marked", n > 0);
        count.textContent = n > 0 ? String(n) : "";
        g.setAttribute("aria-label", `event ${id}, ${n} token${n === 1 ? "" : "s"}`);
      }
    },
    /** Step states: `{step: "inflight"|"failed"|"fired"|"waiting"}`; others are cleared. */
    setStepStates(states) {
      for (const [id, g] of stepEls) {
        const st = states[id] || "";
        for (const c of ["inflight", "failed", "fired", "waiting"]) g.classList.toggle(c, st === c);
        if (st) g.setAttribute("data-state", st);
        else g.removeAttribute("data-state");
      }
    },
    /** Witness highlight: `past` steps already fired, `current` the one being shown. */
    setWitness(past, current) {
      const p = new Set(past);
      for (const [id, g] of stepEls) {
        const w = id === current ? "current" : p.has(id) ? "past" : null;
        g.classList.toggle("witness-current", w === "current");
        g.classList.toggle("witness-past", w === "past");
        if (w) g.setAttribute("data-witness", w);
        else g.removeAttribute("data-witness");
      }
      if (current && stepEls.get(current)) {
        stepEls.get(current).scrollIntoView?.({ block: "nearest", inline: "nearest" });
      }
    },
    /** Marks the selected place (side panel open). */
    select(id) {
      if (selected && placeEls.get(selected)) placeEls.get(selected).g.classList.remove("selected");
      selected = id;
      if (id && placeEls.get(id)) placeEls.get(id).g.classList.add("selected");
    },
    /** Dead steps / unbounded places from the analysis. */
    markAnalysis(analysis) {
      const dead = new Set((analysis && analysis.dead_steps) || []);
      for (const [id, g] of stepEls) g.classList.toggle("dead", dead.has(id));
      const unb = new Set((analysis && analysis.unbounded) || []);
      for (const [id, { g }] of placeEls) g.classList.toggle("unbounded", unb.has(id));
    },
  };
}
