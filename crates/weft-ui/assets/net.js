// Draws a plan's net as SVG from the layout (layout.js): places as circles with their token
// count, steps as boxes, arcs as paths with arrowheads; tooltips (<title>) carry guards, tools,
// args and `when` conditions. Returns a handle the views use to show a marking, step states
// (in flight, failed, witness) and the selected place. Large nets stay readable (netnav.js):
// linear chains start collapsed into one expandable node, "fit" never shrinks labels below
// MIN_LABEL_PX (beyond that the view pans: drag, scroll, the minimap), a search box centres a
// step, and "Focus" shows only a step's neighbourhood.
import { layout, pathData, shortLabel, GEOM } from "./layout.js";
import { collapseChains, neighbourhood, findNodes, wrapRows } from "./netnav.js";
import { h, clear } from "./util.js";

/** Label size in the SVG's units (app.css `.net .label`) and the least it may be on screen. */
export const LABEL_PX = 11;
export const MIN_LABEL_PX = 9;
/** Nets with more steps than this start with their linear chains collapsed. */
export const AUTO_COLLAPSE_STEPS = 30;

/** The "fit" scale: the whole layout in `availW`×`availH`, but labels stay ≥ MIN_LABEL_PX. */
export function fitScale(width, height, availW, availH) {
  const s = Math.min(1.25, availW / Math.max(1, width), availH / Math.max(1, height));
  return Math.max(MIN_LABEL_PX / LABEL_PX, Number.isFinite(s) ? s : 1);
}

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
 * `opts.onPlace(id)` / `opts.onStep(id)` are called on click or Enter/Space; a click on a
 * collapsed chain expands it.
 */
export function drawNet(container, net, opts = {}) {
  clear(container);
  // A malformed net (missing or non-array parts) draws what there is instead of throwing.
  const arr = (v) => (Array.isArray(v) ? v.filter((x) => x && typeof x === "object" && (typeof x.id === "string" || "from" in x)) : []);
  const full = withFailureArcs({ ...net, places: arr(net && net.places), steps: arr(net && net.steps), arcs: arr(net && net.arcs) });
  const stepInfo = new Map(full.steps.map((st) => [st.id, st]));
  const placeInfo = new Map(full.places.map((p) => [p.id, p]));
  const totalSteps = full.steps.length;

  // View state: what is drawn (collapsed chains, a focus) and what was shown on it.
  let collapse = totalSteps > AUTO_COLLAPSE_STEPS;
  let wrap = totalSteps > AUTO_COLLAPSE_STEPS; // long nets read in rows, like lines of text
  const expanded = new Set();
  let focus = null; // {id, hops}
  let picked = null; // the last step or event clicked or found: what Focus centres on
  let scale = 1;
  let lay = null;
  let groups = new Map();
  let memberOf = new Map();
  let svg = null;
  let placeEls = new Map();
  let stepEls = new Map();
  let groupEls = new Map();
  const last = { counts: {}, states: {}, witness: null, selected: null, analysis: null, found: null };

  // Tools: zoom, fit, chains, search, focus, legend.
  const zoomLabel = h("span", { class: "zoom-label", "aria-live": "polite", "data-testid": "zoom-level" }, "100%");
  const chainBtn = h("button", { type: "button", "data-testid": "net-collapse", "aria-pressed": String(collapse) }, "");
  const wrapBtn = h("button", { type: "button", "data-testid": "net-wrap", "aria-pressed": String(wrap), title: "Cut a long net into rows that fit the width" }, "Rows");
  const searchIn = h("input", { type: "search", placeholder: "find a step…", "aria-label": "Find a step or event", "data-testid": "net-search", list: "", size: 14 });
  const searchOut = h("span", { class: "muted net-found", "aria-live": "polite", "data-testid": "net-search-result" });
  const hopsSel = h("select", { "aria-label": "Focus depth (steps away)", "data-testid": "net-focus-hops" }, [1, 2, 3, 4].map((n) => h("option", { value: n }, `${n} hop${n > 1 ? "s" : ""}`)));
  const focusBtn = h("button", { type: "button", "data-testid": "net-focus", title: "Show only the selected step's neighbourhood" }, "Focus");
  const allBtn = h("button", { type: "button", "data-testid": "net-show-all", hidden: true }, "Show all");
  const shownEl = h("span", { class: "muted", "data-testid": "net-shown" });
  const searchForm = h("form", { class: "net-search", role: "search" }, searchIn, h("button", { type: "submit" }, "Find"), searchOut);
  const tools = h(
    "div",
    { class: "net-tools" },
    h("button", { type: "button", "aria-label": "Zoom out", "data-testid": "zoom-out", onclick: () => zoomBy(1 / 1.25) }, "−"),
    zoomLabel,
    h("button", { type: "button", "aria-label": "Zoom in", "data-testid": "zoom-in", onclick: () => zoomBy(1.25) }, "+"),
    h("button", { type: "button", "aria-label": "Fit to view", "data-testid": "zoom-fit", onclick: () => fit() }, "Fit"),
    chainBtn,
    wrapBtn,
    searchForm,
    hopsSel,
    focusBtn,
    allBtn,
    shownEl,
    h("span", { class: "legend muted" },
      h("span", { class: "lg lg-place" }), " event ",
      h("span", { class: "lg lg-step" }), " step ",
      h("span", { class: "lg lg-chain" }), " chain ",
      h("span", { class: "lg lg-inflight" }), " in flight ",
      h("span", { class: "lg lg-failed" }), " failed"),
  );
  // Focusable, so the arrow keys and Page Up/Down pan it too.
  const scroller = h("div", { class: "net-scroll", "data-testid": "net-scroll", tabindex: "0", role: "region", "aria-label": "Net view: drag or use the arrow keys to pan, Ctrl+wheel to zoom", title: "Drag to pan; Ctrl+wheel to zoom" });
  const mini = s("svg", { class: "minimap", xmlns: SVG, "data-testid": "minimap", "aria-hidden": "true" });
  const view = h("div", { class: "net-view" }, scroller, h("div", { class: "minimap-row" }, mini));
  container.append(tools, view);
  // A large net gets the whole width: its side panel goes below it.
  if (totalSteps > AUTO_COLLAPSE_STEPS) container.parentElement?.classList.contains("split") && container.parentElement.classList.add("wide");

  const activate = (fn, id) => (ev) => {
    if (ev.type === "keydown" && ev.key !== "Enter" && ev.key !== " ") return;
    ev.preventDefault();
    picked = id;
    fn && fn(id);
  };

  function visibleNet() {
    if (focus) {
      groups = new Map();
      memberOf = new Map();
      return neighbourhood(full, focus.id, focus.hops * 2);
    }
    if (!collapse) {
      groups = new Map();
      memberOf = new Map();
      return full;
    }
    const c = collapseChains(full, { expanded });
    groups = c.groups;
    memberOf = c.memberOf;
    return c.net;
  }

  function render() {
    const v = visibleNet();
    lay = layout(v);
    if (wrap) {
      // Rows as wide as the view at the smallest readable scale: the net then pans only down.
      const avail = Math.max(300, (scroller.clientWidth || container.clientWidth || 900) - 8);
      lay = wrapRows(lay, avail / (MIN_LABEL_PX / LABEL_PX) - 2 * GEOM.margin - 4);
    }
    placeEls = new Map();
    stepEls = new Map();
    groupEls = new Map();
    svg = s("svg", {
      class: "net",
      xmlns: SVG,
      viewBox: `0 0 ${lay.width} ${lay.height}`,
      role: "group",
      "aria-label": `Net with ${full.places.length} events and ${totalSteps} steps`,
      "data-testid": "net",
      "data-rows": String(lay.rows || 1),
    });
    svg.append(s("defs", {}, s("marker",
      { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
      s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))));
    const gEdges = s("g", { class: "arcs" });
    const gNodes = s("g", { class: "nodes" });
    svg.append(gEdges, gNodes);
    for (const e of lay.edges) {
      const from = e.from.slice(2);
      const to = e.to.slice(2);
      const cls = `arc arc-${e.kind}${e.reversed ? " arc-back" : ""}${e.when ? " arc-when" : ""}`;
      const path = s("path", { d: pathData(e.points), class: cls, "marker-end": e.kind === "read" ? null : "url(#arrow)", "data-from": from, "data-to": to });
      path.append(s("title", {}, `${from} → ${to} (${e.kind})${e.when ? `\nwhen: ${e.when}` : ""}`));
      gEdges.append(path);
    }
    for (const n of lay.nodes) {
      if (n.kind === "place") {
        const info = placeInfo.get(n.id) || {};
        const cy = n.y - GEOM.labelH / 2;
        const count = s("text", { x: n.x, y: cy + 4, class: "count", "aria-hidden": "true" }, "");
        const g = s("g", {
          class: `place kind-${info.kind || "internal"}`, "data-testid": `place-${n.id}`, "data-id": n.id,
          "data-tokens": "0", tabindex: "0", role: "button", "aria-label": `event ${n.id}`,
        },
        s("title", {}, `event ${n.id}${info.kind ? ` (${info.kind})` : ""}`),
        s("circle", { cx: n.x, cy, r: GEOM.placeR }),
        count,
        s("text", { x: n.x, y: n.y + n.h / 2 - 2, class: "label" }, shortLabel(n.id)));
        g.addEventListener("click", activate(opts.onPlace, n.id));
        g.addEventListener("keydown", activate(opts.onPlace, n.id));
        placeEls.set(n.id, { g, count });
        gNodes.append(g);
      } else if (groups.has(n.id)) {
        const { members } = groups.get(n.id);
        const count = s("text", { x: n.x - n.w / 2 + 2, y: n.y - n.h / 2 - 4, class: "chain-count", "aria-hidden": "true" }, `${members.length} steps`);
        const g = s("g", {
          class: "step chain", "data-testid": "chain", "data-id": n.id, "data-members": String(members.length),
          tabindex: "0", role: "button", "aria-label": `chain of ${members.length} steps, ${members[0]} to ${members.at(-1)}: expand`,
        },
        s("title", {}, `${members.length} steps in a row (click to expand):\n${members.join(" → ")}`),
        s("rect", { x: n.x - n.w / 2, y: n.y - n.h / 2, width: n.w, height: n.h, rx: 4 }),
        s("rect", { x: n.x - n.w / 2 + 3, y: n.y - n.h / 2 + 3, width: n.w - 6, height: n.h - 6, rx: 3, class: "inner" }),
        s("text", { x: n.x, y: n.y + 4, class: "label" }, shortLabel(n.id)),
        count);
        const open = (ev) => {
          if (ev.type === "keydown" && ev.key !== "Enter" && ev.key !== " ") return;
          ev.preventDefault();
          expanded.add(n.id);
          rerender(members[0]);
        };
        g.addEventListener("click", open);
        g.addEventListener("keydown", open);
        groupEls.set(n.id, { g, count, members });
        gNodes.append(g);
      } else {
        const info = stepInfo.get(n.id) || { id: n.id };
        const g = s("g", {
          class: "step", "data-testid": `step-${n.id}`, "data-id": n.id, tabindex: "0", role: "button",
          "aria-label": `step ${n.id}${info.tool ? `, tool ${info.tool}` : ""}`,
        },
        s("title", {}, stepTitle(info)),
        s("rect", { x: n.x - n.w / 2, y: n.y - n.h / 2, width: n.w, height: n.h, rx: 4 }),
        s("text", { x: n.x, y: n.y + 4, class: "label" }, shortLabel(n.id)));
        g.addEventListener("click", activate(opts.onStep, n.id));
        g.addEventListener("keydown", activate(opts.onStep, n.id));
        stepEls.set(n.id, g);
        gNodes.append(g);
      }
    }
    clear(scroller).append(svg);
    const shownSteps = lay.nodes.filter((n) => n.kind === "step").length;
    shownEl.textContent = focus
      ? `${shownSteps} of ${totalSteps} steps near ${focus.id}`
      : groups.size ? `${shownSteps} nodes for ${totalSteps} steps` : `${totalSteps} step${totalSteps === 1 ? "" : "s"}`;
    shownEl.setAttribute("data-nodes", String(shownSteps));
    chainBtn.textContent = collapse ? "Expand chains" : "Collapse chains";
    chainBtn.setAttribute("aria-pressed", String(collapse));
    chainBtn.disabled = !!focus;
    wrapBtn.setAttribute("aria-pressed", String(wrap));
    allBtn.hidden = !focus;
    drawMinimap();
    reapply();
  }

  // Zoom: the SVG's pixel size is the layout size times the scale; the scroller pans.
  function apply(centre) {
    const c = centre || [(scroller.scrollLeft + scroller.clientWidth / 2) / (svg.clientWidth / lay.width || scale),
      (scroller.scrollTop + scroller.clientHeight / 2) / (svg.clientHeight / lay.height || scale)];
    svg.setAttribute("width", String(Math.max(1, Math.ceil(lay.width * scale))));
    svg.setAttribute("height", String(Math.max(1, Math.ceil(lay.height * scale))));
    zoomLabel.textContent = `${Math.round(scale * 100)}%`;
    scroller.scrollLeft = c[0] * scale - scroller.clientWidth / 2;
    scroller.scrollTop = c[1] * scale - scroller.clientHeight / 2;
    updateMinimap();
  }
  function zoomBy(f, centre) {
    scale = Math.min(4, Math.max(0.1, scale * f));
    apply(centre);
  }
  function fit() {
    const availW = Math.max(200, scroller.clientWidth - 8);
    const availH = Math.max(240, Math.min(window.innerHeight * 0.7, 900) - 8);
    scale = fitScale(lay.width, lay.height, availW, availH);
    apply([lay.width / 2, lay.height / 2]);
  }
  /** Scrolls so that layout point (x, y) is in the middle of the view. */
  function centreOn(x, y) {
    scroller.scrollLeft = x * scale - scroller.clientWidth / 2;
    scroller.scrollTop = y * scale - scroller.clientHeight / 2;
    updateMinimap();
  }
  const nodeOf = (id) => lay.nodes.find((n) => n.id === id) || lay.nodes.find((n) => n.id === memberOf.get(id));
  function rerender(centreId) {
    render();
    fit();
    const n = centreId && nodeOf(centreId);
    if (n) centreOn(n.x, n.y);
  }

  // Pan by dragging the background; Ctrl+wheel zooms about the pointer.
  let drag = null;
  scroller.addEventListener("pointerdown", (ev) => {
    if (ev.button !== 0 || ev.target.closest?.("g.place, g.step")) return;
    drag = { x: ev.clientX, y: ev.clientY, l: scroller.scrollLeft, t: scroller.scrollTop };
    scroller.setPointerCapture?.(ev.pointerId);
    scroller.classList.add("panning");
  });
  scroller.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    scroller.scrollLeft = drag.l - (ev.clientX - drag.x);
    scroller.scrollTop = drag.t - (ev.clientY - drag.y);
  });
  const endDrag = () => ((drag = null), scroller.classList.remove("panning"));
  scroller.addEventListener("pointerup", endDrag);
  scroller.addEventListener("pointercancel", endDrag);
  scroller.addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey && !ev.metaKey) return;
    ev.preventDefault();
    const r = scroller.getBoundingClientRect();
    const px = ev.clientX - r.left;
    const py = ev.clientY - r.top;
    const x = (scroller.scrollLeft + px) / scale;
    const y = (scroller.scrollTop + py) / scale;
    scale = Math.min(4, Math.max(0.1, scale * (ev.deltaY < 0 ? 1.15 : 1 / 1.15)));
    svg.setAttribute("width", String(Math.ceil(lay.width * scale)));
    svg.setAttribute("height", String(Math.ceil(lay.height * scale)));
    zoomLabel.textContent = `${Math.round(scale * 100)}%`;
    scroller.scrollLeft = x * scale - px;
    scroller.scrollTop = y * scale - py;
    updateMinimap();
  }, { passive: false });
  scroller.addEventListener("scroll", () => updateMinimap());

  // Minimap: every node as a dot, the visible part as a frame; click or drag to move there.
  let miniView = null;
  const MINI_W = 320;
  const MINI_H = 120;
  function drawMinimap() {
    clear(mini);
    const k = Math.min(MINI_W / lay.width, MINI_H / lay.height);
    mini.setAttribute("viewBox", `0 0 ${lay.width} ${lay.height}`);
    mini.setAttribute("width", String(Math.max(40, Math.round(lay.width * k))));
    mini.setAttribute("height", String(Math.max(24, Math.round(lay.height * k))));
    for (const n of lay.nodes)
      mini.append(s("rect", { x: n.x - n.w / 2, y: n.y - n.h / 2, width: Math.max(n.w, 8), height: n.h, class: n.kind === "place" ? "mm-place" : "mm-step" }));
    miniView = s("rect", { class: "mm-view", "data-testid": "minimap-viewport", x: 0, y: 0, width: 0, height: 0 });
    mini.append(miniView);
  }
  function updateMinimap() {
    if (!miniView || !lay) return;
    const w = scroller.clientWidth / scale;
    const hgt = scroller.clientHeight / scale;
    const fits = lay.width * scale <= scroller.clientWidth + 1 && lay.height * scale <= scroller.clientHeight + 1;
    mini.classList.toggle("idle", fits);
    mini.setAttribute("data-fits", String(fits));
    miniView.setAttribute("x", String(Math.max(0, scroller.scrollLeft / scale)));
    miniView.setAttribute("y", String(Math.max(0, scroller.scrollTop / scale)));
    miniView.setAttribute("width", String(Math.min(lay.width, w)));
    miniView.setAttribute("height", String(Math.min(lay.height, hgt)));
  }
  let miniDrag = false;
  const miniGo = (ev) => {
    const r = mini.getBoundingClientRect();
    if (!r.width || !r.height) return;
    centreOn(((ev.clientX - r.left) / r.width) * lay.width, ((ev.clientY - r.top) / r.height) * lay.height);
  };
  mini.addEventListener("pointerdown", (ev) => ((miniDrag = true), mini.setPointerCapture?.(ev.pointerId), miniGo(ev)));
  mini.addEventListener("pointermove", (ev) => miniDrag && miniGo(ev));
  mini.addEventListener("pointerup", () => (miniDrag = false));

  // Search: the best match is centred and highlighted (a collapsed chain holding it opens).
  function find(q) {
    const hits = findNodes(full, q);
    if (!hits.length) {
      searchOut.textContent = `no step or event matches “${q}”`;
      searchOut.setAttribute("data-found", "");
      return null;
    }
    const id = hits[0].id;
    if (focus && !nodeOf(id)) focus = null;
    const g = memberOf.get(id);
    if (g) {
      expanded.add(g);
      render();
      fit();
    }
    picked = id;
    last.found = id;
    markFound();
    const n = nodeOf(id);
    if (n) centreOn(n.x, n.y);
    searchOut.textContent = hits.length > 1 ? `${id} (1 of ${hits.length})` : id;
    searchOut.setAttribute("data-found", id);
    return id;
  }
  searchForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (searchIn.value.trim()) find(searchIn.value);
  });
  const listId = `net-ids-${Math.random().toString(36).slice(2, 8)}`;
  searchIn.setAttribute("list", listId);
  tools.append(h("datalist", { id: listId }, full.steps.slice(0, 2000).map((st) => h("option", { value: st.id }))));

  wrapBtn.addEventListener("click", () => {
    wrap = !wrap;
    rerender(picked);
  });
  chainBtn.addEventListener("click", () => {
    collapse = !collapse;
    rerender(picked);
  });
  focusBtn.addEventListener("click", () => {
    const id = picked || last.found || last.selected || (full.steps[0] && full.steps[0].id);
    if (!id) return;
    focus = { id, hops: Number(hopsSel.value) || 1 };
    rerender(id);
  });
  hopsSel.addEventListener("change", () => {
    if (focus) {
      focus = { ...focus, hops: Number(hopsSel.value) || 1 };
      rerender(focus.id);
    }
  });
  allBtn.addEventListener("click", () => {
    const id = focus && focus.id;
    focus = null;
    rerender(id);
  });

  // What the views showed, applied again after every re-render.
  function markFound() {
    for (const el of svg.querySelectorAll(".found")) (el.classList.remove("found"), el.removeAttribute("data-found"));
    const el = last.found && (stepEls.get(last.found) || placeEls.get(last.found)?.g);
    if (el) (el.classList.add("found"), el.setAttribute("data-found", "true"));
  }
  function reapply() {
    showMarking(last.counts);
    showStates(last.states);
    if (last.witness) showWitness(...last.witness, false);
    showSelected(last.selected);
    showAnalysis(last.analysis);
    markFound();
  }
  function showMarking(counts) {
    for (const [id, { g, count }] of placeEls) {
      const n = counts[id] || 0;
      g.setAttribute("data-tokens", String(n));
      g.classList.toggle("marked", n > 0);
      count.textContent = n > 0 ? String(n) : "";
      g.setAttribute("aria-label", `event ${id}, ${n} token${n === 1 ? "" : "s"}`);
    }
    for (const [gid, { g, count }] of groupEls) {
      let n = 0;
      for (const p of groups.get(gid).inner) n += counts[p] || 0;
      g.setAttribute("data-tokens", String(n));
      count.textContent = `${groups.get(gid).members.length} steps${n > 0 ? `, ${n} token${n === 1 ? "" : "s"} inside` : ""}`;
    }
  }
  const STATES = ["inflight", "failed", "fired", "waiting"];
  function showStates(states) {
    for (const [id, g] of stepEls) {
      const st = states[id] || "";
      for (const c of STATES) g.classList.toggle(c, st === c);
      if (st) g.setAttribute("data-state", st);
      else g.removeAttribute("data-state");
    }
    // A chain shows its most telling member state: failed, then in flight, then waiting.
    for (const [, { g, members }] of groupEls) {
      const mine = new Set(members.map((m) => states[m]).filter(Boolean));
      const st = ["failed", "inflight", "waiting", "fired"].find((x) => mine.has(x)) || "";
      for (const c of STATES) g.classList.toggle(c, st === c);
      if (st) g.setAttribute("data-state", st);
      else g.removeAttribute("data-state");
    }
  }
  function showWitness(past, current, scroll) {
    const p = new Set(past);
    for (const [id, g] of stepEls) {
      const w = id === current ? "current" : p.has(id) ? "past" : null;
      g.classList.toggle("witness-current", w === "current");
      g.classList.toggle("witness-past", w === "past");
      if (w) g.setAttribute("data-witness", w);
      else g.removeAttribute("data-witness");
    }
    if (scroll && current) {
      const n = nodeOf(current);
      const r = scroller.getBoundingClientRect();
      const el = stepEls.get(current);
      const er = el && el.getBoundingClientRect();
      if (n && er && (er.left < r.left || er.right > r.right || er.top < r.top || er.bottom > r.bottom)) centreOn(n.x, n.y);
    }
  }
  function showSelected(id) {
    for (const [pid, { g }] of placeEls) g.classList.toggle("selected", pid === id);
  }
  function showAnalysis(analysis) {
    const dead = new Set((analysis && analysis.dead_steps) || []);
    for (const [id, g] of stepEls) g.classList.toggle("dead", dead.has(id));
    const unb = new Set((analysis && analysis.unbounded) || []);
    for (const [id, { g }] of placeEls) g.classList.toggle("unbounded", unb.has(id));
  }

  render();
  apply([0, 0]);
  requestAnimationFrame(() => {
    fit();
    // A large net at its smallest readable scale starts at its beginning, not its middle.
    if (lay.width * scale > scroller.clientWidth) scroller.scrollLeft = 0;
    if (lay.height * scale > scroller.clientHeight) scroller.scrollTop = 0;
    updateMinimap();
  });

  return {
    get layout() {
      return lay;
    },
    get svg() {
      return svg;
    },
    /** Token counts per place (`{place: n}`); places not named show 0. */
    setMarking(counts) {
      last.counts = counts || {};
      showMarking(last.counts);
    },
    /** Step states: `{step: "inflight"|"failed"|"fired"|"waiting"}`; others are cleared. */
    setStepStates(states) {
      last.states = states || {};
      showStates(last.states);
    },
    /** Witness highlight: `past` steps already fired, `current` the one being shown. */
    setWitness(past, current) {
      // A witness step hidden in a collapsed chain is shown: its chain opens.
      const hidden = [...past, current].map((st) => memberOf.get(st)).filter(Boolean);
      if (hidden.length) {
        for (const g of hidden) expanded.add(g);
        render();
      }
      last.witness = [past, current];
      showWitness(past, current, true);
    },
    /** Marks the selected place (side panel open). */
    select(id) {
      last.selected = id;
      showSelected(id);
    },
    /** Dead steps / unbounded places from the analysis. */
    markAnalysis(analysis) {
      last.analysis = analysis;
      showAnalysis(analysis);
    },
    /** Finds a step or event by name: centres and highlights it (the search box does this). */
    find,
  };
}
