// Instances: the list with a status filter, and one instance's view: its net with the live
// marking (SSE-driven refetch of GET /v1/instances/{id}), in-flight and failed steps, a place's
// token payloads, the time-travel slider over the journal, the timeline of step firings with
// the journal records behind each, and the actions (send event, stop, resume, checkpoint).
import { api, enc, streamUrl } from "./api.js";
import { h, clear, badge, coalesced, fmtTime, fmtDuration, json, problemBox, toast, eventTypeForms } from "./util.js";
import { drawNet } from "./net.js";
import { fmtAmount } from "./quotas.js";

const STATUSES = ["running", "waiting", "paused", "completed", "stuck", "failed", "stopped"];
const TERMINAL = new Set(["completed", "failed", "stopped"]);
// SSE frames are named by the CloudEvent type: its reverse-DNS form (`dev.weft.plan.…`), or
// the short one of older servers; both are listened to.
const LIFECYCLE = [
  ...[
    "plan.started", "plan.step.started", "plan.step.finished", "plan.step.error",
    "plan.completed", "plan.waiting", "plan.stuck", "plan.failed", "plan.stopped",
    "approval.requested", "approval.decided", "policy.decided", "budget.exceeded",
  ].flatMap(eventTypeForms),
  "weft.lagged", // the stream fell behind: the refetch catches up
];

export async function instancesView(main, params) {
  const status = params.get("status") || "";
  const plan = params.get("plan") || "";
  main.append(h("h1", {}, "Instances"));
  const sel = h(
    "select",
    { id: "status-filter", "data-testid": "status-filter" },
    h("option", { value: "" }, "any status"),
    STATUSES.map((s) => h("option", { value: s, selected: s === status }, s)),
  );
  const planIn = h("input", { id: "plan-filter", type: "text", value: plan, placeholder: "plan name", "data-testid": "plan-filter" });
  const form = h(
    "form",
    { class: "filters", role: "search" },
    h("label", { for: "status-filter" }, "Status"),
    sel,
    h("label", { for: "plan-filter" }, "Plan"),
    planIn,
    h("button", { type: "submit" }, "Filter"),
  );
  const apply = (ev) => {
    ev && ev.preventDefault();
    const q = new URLSearchParams();
    if (sel.value) q.set("status", sel.value);
    if (planIn.value.trim()) q.set("plan", planIn.value.trim());
    location.hash = `#/instances${q.toString() ? "?" + q : ""}`;
  };
  form.addEventListener("submit", apply);
  sel.addEventListener("change", apply);
  main.append(form);

  const tbody = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "More");
  main.append(
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { "data-testid": "instances-table" },
        h("thead", {}, h("tr", {}, ["Instance", "Plan", "Version", "Status", "Created", "Updated"].map((t) => h("th", { scope: "col" }, t)))),
        tbody,
      ),
    ),
    more,
  );
  let cursor = null;
  const load = async () => {
    const q = new URLSearchParams({ limit: "50" });
    if (status) q.set("status", status);
    if (plan) q.set("plan", plan);
    if (cursor) q.set("cursor", cursor);
    const r = await api(`/v1/instances?${q}`);
    for (const i of r.instances || [])
      tbody.append(
        h(
          "tr",
          { "data-testid": `instance-row-${i.id}` },
          h("td", {}, h("a", { href: `#/instances/${enc(i.id)}`, class: "mono" }, i.id)),
          h("td", {}, h("a", { href: `#/plans/${enc(i.plan)}` }, i.plan)),
          h("td", {}, String(i.version)),
          h("td", {}, badge(i.status)),
          h("td", {}, fmtTime(i.created_at_ms)),
          h("td", {}, fmtTime(i.updated_at_ms)),
        ),
      );
    if (!tbody.children.length)
      tbody.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No instances match.")));
    cursor = r.next || null;
    more.hidden = !cursor;
  };
  more.addEventListener("click", () => load().catch((e) => main.append(problemBox(e))));
  await load();
  return null;
}

function countsOf(marking) {
  const out = {};
  if (Array.isArray(marking)) for (const [k, v] of marking) out[k] = Number(v) || 0;
  else if (marking) for (const [k, v] of Object.entries(marking)) out[k] = Array.isArray(v) ? v.length : Number(v) || 0;
  return out;
}

export async function instanceView(main, id) {
  let inst = await api(`/v1/instances/${enc(id)}`);
  const net = await api(`/v1/plans/${enc(inst.plan)}/net?version=${enc(inst.version)}`);
  let trace = { steps: [] };
  let mode = "live"; // or "history"
  let historyAt = null;
  let selectedPlace = null;
  let inspected = null;
  let closed = false;

  // Header.
  const status = badge(inst.status, { "data-testid": "instance-status", "aria-live": "polite" });
  const streamEl = h("span", { class: "stream muted", "data-testid": "stream", "data-stream": "closed", title: "Updates from the server's event stream" });
  const stopBtn = h("button", { type: "button", "data-testid": "stop" }, "Stop");
  const resumeBtn = h("button", { type: "button", "data-testid": "resume" }, "Resume");
  const cpBtn = h("button", { type: "button", "data-testid": "checkpoint" }, "Checkpoint");
  const fromIn = h("input", { type: "text", id: "resume-from", placeholder: "from cp-… (optional)", "aria-label": "Resume from checkpoint (optional)", "data-testid": "resume-from", size: 18 });
  const actionOut = h("div", { "aria-live": "polite" });
  main.append(
    h(
      "div",
      { class: "title-row" },
      h("h1", {}, "Instance ", h("span", { class: "mono" }, id)),
      h("span", {}, "plan ", h("a", { href: `#/plans/${enc(inst.plan)}?version=${enc(inst.version)}` }, `${inst.plan} v${inst.version}`)),
      status,
      streamEl,
      h("span", { class: "spacer" }),
      h("div", { class: "row" }, stopBtn, cpBtn, fromIn, resumeBtn),
    ),
    actionOut,
  );

  // Time travel.
  const slider = h("input", {
    type: "range", id: "time-slider", min: 1, max: Math.max(1, inst.journal_head || 1),
    value: Math.max(1, inst.journal_head || 1), step: 1, "data-testid": "time-slider",
    "aria-label": "Journal position",
  });
  const timePos = h("span", { "data-testid": "time-position", "aria-live": "polite" });
  const liveBtn = h("button", { type: "button", "data-testid": "time-live" }, "Live");
  main.append(
    h(
      "div",
      { class: "time card" },
      h("label", { for: "time-slider" }, "Time travel"),
      slider,
      timePos,
      liveBtn,
    ),
  );

  // Net + side panel.
  const netBox = h("section", { class: "net-panel", "aria-label": "Net with marking" });
  const side = h("aside", { class: "side", "aria-label": "Instance details" });
  main.append(h("div", { class: "split" }, netBox, side));
  const view = drawNet(netBox, net, {
    onPlace: (p) => {
      selectedPlace = p;
      view.select(p);
      renderPlace();
    },
    // A step: the journal records of its latest firing (as a click on its timeline bar).
    onStep: (st) => {
      const fired = (trace.steps || []).filter((t) => t.step === st);
      if (fired.length) showRecords(records, id, fired[fired.length - 1]);
      else clear(records).append(h("p", { class: "muted" }, h("code", {}, st), " has not fired yet."));
    },
  });
  const placePanel = h("section", { class: "card", "data-testid": "tokens-panel", "aria-live": "polite" });
  const statePanel = h("section", { class: "card", "data-testid": "state-panel" });
  const sender = sendEventForm(id, net, () => refresh());
  side.append(placePanel, statePanel, sender.form);

  // Timeline.
  const timeline = h("section", { class: "card timeline-card", "aria-label": "Timeline" });
  const records = h("div", { class: "records", "data-testid": "records", "aria-live": "polite" });
  main.append(timeline, records);

  const renderPlace = () => {
    clear(placePanel);
    if (!selectedPlace) {
      placePanel.append(h("h2", {}, "Tokens"), h("p", { class: "muted" }, "Select an event (circle) to see its tokens."));
      return;
    }
    placePanel.append(h("h2", {}, "Tokens on ", h("code", {}, selectedPlace)));
    if (mode === "history") {
      const n = countsOf(inspected && inspected.marking)[selectedPlace] || 0;
      placePanel.append(h("p", {}, `${n} token${n === 1 ? "" : "s"} at record ${historyAt}.`),
        h("p", { class: "muted" }, "Payloads are shown for the live marking; press Live."));
      return;
    }
    const toks = (inst.marking && inst.marking[selectedPlace]) || [];
    if (!toks.length) placePanel.append(h("p", { class: "muted" }, "No tokens."));
    toks.forEach((t, i) =>
      placePanel.append(h("div", { class: "token" }, h("div", { class: "muted" }, `token ${i + 1}`), h("pre", { class: "code", "data-testid": "token-payload" }, json(t.data !== undefined ? t.data : t)))),
    );
  };

  const failedSteps = () => {
    const out = {};
    for (const s of trace.steps || []) if (s.outcome === "error") out[s.step] = "failed";
    if (inst.failure && inst.failure.step) out[inst.failure.step] = "failed";
    return out;
  };

  const renderState = () => {
    clear(statePanel);
    const src = mode === "history" ? inspected || {} : inst;
    statePanel.append(h("h2", {}, mode === "history" ? `State at record ${historyAt}` : "State"));
    const waiting = src.waiting || [];
    const inflight = src.in_flight || [];
    if (inflight.length)
      statePanel.append(h("h3", {}, "In flight"), h("ul", { "data-testid": "in-flight" }, inflight.map((a) => {
        const since = a.since_ms ?? startedOf(a.firing, a.step);
        return h("li", { "data-step": a.step },
          h("code", {}, a.step), a.tool ? ` (${a.tool})` : "",
          ` — attempt ${a.attempt || 1}`,
          since != null && mode === "live"
            ? [", running for ", h("span", { class: "elapsed", "data-since": since, "data-testid": "elapsed" }, fmtDuration(Math.max(0, Date.now() - since))), h("span", { class: "muted" }, ` (since ${fmtTime(since)})`)]
            : null);
      })));
    const approvals = mode === "live" ? inst.approvals || [] : [];
    if (approvals.length)
      statePanel.append(h("h3", {}, "Approvals"), h("ul", { "data-testid": "approvals" }, approvals.map(approvalItem)));
    const usage = mode === "live" ? inst.usage : null;
    if (usage) {
      const lim = usage.limits || {};
      const part = (used, max, what) => `${used}${max != null ? ` of ${max}` : ""} ${what}`;
      const parts = [part(usage.tool_calls, lim.max_tool_calls, "tool calls"), part(usage.llm_calls, lim.max_llm_calls, "LLM calls")];
      if (lim.max_llm_tokens != null || usage.llm_tokens) parts.push(part(usage.llm_tokens || 0, lim.max_llm_tokens, "tokens"));
      if (lim.max_cost != null || usage.cost)
        parts.push(part(fmtAmount(usage.cost, "cost"), lim.max_cost != null ? fmtAmount(lim.max_cost, "cost") : null, "cost"));
      statePanel.append(h("h3", {}, "Budget"), h("p", { "data-testid": "usage" }, parts.join(" · ")));
    }
    const awaits = mode === "live" ? inst.awaits : null;
    if (awaits)
      statePanel.append(h("h3", {}, "Waits for"), h("ul", { "data-testid": "awaits" }, [
        ...(awaits.events || []).map((e) => h("li", {}, "an event on ", h("code", {}, e))),
        ...(awaits.timers_due_ms || []).map((t) => h("li", {}, `a timer due ${fmtTime(t)}`)),
      ]));
    if (waiting.length)
      statePanel.append(h("h3", {}, "Waiting"), h("ul", {}, waiting.map((w) => h("li", {}, h("code", {}, w.step), w.guard_blocked ? " — its guard does not hold" : ` lacks ${(w.lacks || []).join(", ")}`))));
    if (mode === "live" && inst.failure)
      statePanel.append(h("h3", {}, "Failure"), h("p", { class: "problem failure-text", "data-testid": "failure" }, failureText(inst)));
    // Every failed firing with its whole error (the timeline has room for its start only).
    const failedFirings = mode === "live" ? (trace.steps || []).filter((t) => t.outcome === "error") : [];
    if (failedFirings.length)
      statePanel.append(h("h3", {}, "Failed steps"), h("ul", { "data-testid": "failed-firings" }, failedFirings.map((t) =>
        h("li", {}, h("code", {}, t.step), t.attempts > 1 ? ` after ${t.attempts} attempts` : "", h("div", { class: "failure-text" }, t.error || "failed (no reason recorded)")))));
    if (mode === "live" && inst.results && inst.results.length)
      statePanel.append(h("h3", {}, "Results"), h("pre", { class: "code", "data-testid": "results" }, json(inst.results)));
    if (!inflight.length && !waiting.length && !(mode === "live" && (inst.failure || (inst.results && inst.results.length))))
      statePanel.append(h("p", { class: "muted" }, "Nothing waiting or in flight."));
  };

  // One approval: what is asked, and Grant / Deny while it waits (the call runs only once
  // granted; a denial fails the step with `approval_denied`).
  const approvalItem = (a) => {
    const li = h("li", { "data-testid": "approval", "data-step": a.step },
      h("code", {}, a.step), ` (firing ${a.firing})`,
      h("ul", {}, (a.reasons || []).map((r) => h("li", {}, r))));
    if (a.decision) {
      li.append(h("p", { class: "muted" }, `${a.decision.granted ? "granted" : "denied"} by ${a.decision.principal}`));
      return li;
    }
    if (a.deadline_ms) li.append(h("p", { class: "muted" }, `${a.default === "grant" ? "granted" : "denied"} at ${fmtTime(a.deadline_ms)} unless decided`));
    const comment = h("input", { type: "text", placeholder: "comment (optional)", "aria-label": `Comment on ${a.step}`, "data-testid": "approval-comment" });
    const decide = async (decision) => {
      try {
        const body = { decision, firing: a.firing };
        if (comment.value.trim()) body.comment = comment.value.trim();
        await api(`/v1/instances/${enc(id)}/approvals/${enc(a.step)}`, { body });
        toast(`${decision === "grant" ? "Granted" : "Denied"} ${a.step}`);
        await refresh();
      } catch (e) {
        li.append(problemBox(e));
      }
    };
    const grant = h("button", { type: "button", "data-testid": "approval-grant" }, "Grant");
    const deny = h("button", { type: "button", "data-testid": "approval-deny" }, "Deny");
    grant.addEventListener("click", () => decide("grant"));
    deny.addEventListener("click", () => decide("deny"));
    li.append(h("div", { class: "row" }, comment), h("div", { class: "row" }, grant, deny));
    return li;
  };

  const renderNet = () => {
    if (mode === "history" && inspected) {
      view.setMarking(countsOf(inspected.marking));
      const st = {};
      for (const a of inspected.in_flight || []) st[a.step] = "inflight";
      view.setStepStates(st);
      const s = inspected.status || "?";
      timePos.textContent = `record ${inspected.at ?? historyAt} of ${inspected.head ?? inst.journal_head} — ${s}`;
      timePos.setAttribute("data-at", String(inspected.at ?? historyAt));
    } else {
      view.setMarking(countsOf(inst.marking));
      const st = failedSteps();
      for (const w of inst.waiting || []) if (!st[w.step]) st[w.step] = "waiting";
      for (const a of inst.in_flight || []) st[a.step] = "inflight";
      view.setStepStates(st);
      timePos.textContent = `live — record ${inst.journal_head} of ${inst.journal_head}`;
      timePos.setAttribute("data-at", String(inst.journal_head));
    }
    netBox.classList.toggle("history", mode === "history");
    liveBtn.disabled = mode === "live";
  };

  const renderHeader = () => {
    status.textContent = inst.status;
    status.className = `badge badge-${inst.status}`;
    const terminal = TERMINAL.has(inst.status);
    stopBtn.disabled = terminal;
    const head = Math.max(1, inst.journal_head || 1);
    slider.max = String(head);
    if (mode === "live") slider.value = String(head);
  };

  const renderTimeline = () => renderTimelineInto(timeline, trace, (s) => showRecords(records, id, s));

  // When a firing in flight started: the server's `since_ms`, else its trace entry.
  const startedOf = (firing, step) => {
    const t = (trace.steps || []).filter((x) => (firing != null ? x.firing === firing : x.step === step) && x.finished_ms == null);
    return t.length ? t[t.length - 1].started_ms : null;
  };
  const tick = setInterval(() => {
    for (const el of statePanel.querySelectorAll("[data-since]"))
      el.textContent = fmtDuration(Math.max(0, Date.now() - Number(el.getAttribute("data-since"))));
  }, 1000);

  const renderAll = () => {
    sender.awaiting(mode === "live" && inst.awaits ? inst.awaits.events || [] : []);
    renderHeader();
    renderNet();
    renderState();
    renderPlace();
    renderTimeline();
  };

  // Refetch on every stream message; concurrent triggers coalesce into one more fetch.
  const refetch = coalesced(async () => {
    const [i, t] = await Promise.all([
      api(`/v1/instances/${enc(id)}`),
      api(`/v1/instances/${enc(id)}/trace`).catch(() => trace),
    ]);
    if (closed) return;
    inst = i;
    trace = t || { steps: [] };
    renderAll();
  }, () => closed);
  const refresh = async () => {
    try {
      await refetch();
    } catch (e) {
      if (!closed) toast(`refresh failed: ${e.message}`, "error");
    }
    if (TERMINAL.has(inst.status) && !closed) stopStream();
  };

  // Live updates: the SSE stream for this instance (whatever happened before it opened is
  // caught by the refetch on its `open`).
  // The state can trail the event that announced it by a moment (the server publishes, then
  // records), so each message also schedules one trailing refetch shortly after the burst.
  let es = null;
  let trail = null;
  const onMessage = () => {
    refresh();
    clearTimeout(trail);
    trail = setTimeout(refresh, 250);
  };
  const setStream = (state, text) => {
    streamEl.setAttribute("data-stream", state);
    streamEl.textContent = text;
  };
  const startStream = () => {
    if (es || closed) return;
    es = new EventSource(streamUrl(`/v1/events/stream?instance=${enc(id)}`));
    setStream("connecting", "connecting…");
    es.addEventListener("open", () => setStream("open", "● live"));
    es.addEventListener("error", () => setStream("reconnecting", "reconnecting (polling)"));
    es.addEventListener("open", onMessage);
    es.addEventListener("message", onMessage);
    for (const t of LIFECYCLE) es.addEventListener(t, onMessage);
  };
  const stopStream = () => {
    if (es) es.close();
    es = null;
    setStream("closed", "");
  };
  // Fallback only: poll while the stream is not open (connecting, reconnecting, refused).
  const poll = setInterval(() => {
    if (!TERMINAL.has(inst.status) && !document.hidden && !(es && es.readyState === EventSource.OPEN)) refresh();
  }, 3000);

  // Time travel.
  let tt = null;
  let seqReq = 0;
  const goTo = async (n) => {
    const head = inst.journal_head || 1;
    if (n >= head && TERMINAL.has(inst.status)) {
      // The head of a finished journal is the live state.
    }
    mode = "history";
    historyAt = n;
    const my = ++seqReq;
    try {
      const r = await api(`/v1/instances/${enc(id)}/inspect?at=${n}`);
      if (my !== seqReq || closed || mode !== "history") return;
      inspected = r;
      renderNet();
      renderState();
      renderPlace();
    } catch (e) {
      toast(`inspect failed: ${e.message}`, "error");
    }
  };
  slider.addEventListener("input", () => {
    clearTimeout(tt);
    const n = Number(slider.value);
    tt = setTimeout(() => goTo(n), 80);
  });
  liveBtn.addEventListener("click", () => {
    mode = "live";
    inspected = null;
    seqReq++;
    renderAll();
  });

  // Actions.
  const act = async (label, path, body) => {
    clear(actionOut);
    try {
      const r = await api(path, { method: "POST", body: body ?? {} });
      toast(`${label}: ${r.status || r.checkpoint || "ok"}`);
      if (r.checkpoint) {
        actionOut.append(h("p", { "data-testid": "checkpoint-out" }, "Checkpoint ", h("code", {}, r.checkpoint), ` at record ${r.seq}; Resume from it forks a new instance.`));
        fromIn.value = r.checkpoint;
      }
      if (r.id && r.id !== id) {
        // Resuming from a checkpoint forks a new instance: follow it.
        location.hash = `#/instances/${enc(r.id)}`;
        return;
      }
      startStream();
      await refresh();
    } catch (e) {
      actionOut.append(problemBox(e));
    }
  };
  stopBtn.addEventListener("click", () => act("Stopped", `/v1/instances/${enc(id)}/stop`));
  resumeBtn.addEventListener("click", () =>
    act("Resumed", `/v1/instances/${enc(id)}/resume`, fromIn.value.trim() ? { from: fromIn.value.trim() } : {}));
  cpBtn.addEventListener("click", () => act("Checkpoint", `/v1/instances/${enc(id)}/checkpoint`));

  renderAll();
  if (!TERMINAL.has(inst.status)) startStream();
  refresh();

  return () => {
    closed = true;
    clearInterval(poll);
    clearInterval(tick);
    clearTimeout(tt);
    clearTimeout(trail);
    stopStream();
  };
}

/** The failure's whole reason, in words (`reason` of the instance, else the failure's JSON). */
function failureText(inst) {
  const f = inst.failure || {};
  const r = f.reason ?? inst.reason;
  if (typeof r === "string" && r) return r;
  if (r && typeof r === "object") return r.message ? `${r.code ? `[${r.code}] ` : ""}${r.message}` : json(r);
  return json(f);
}

/**
 * "Send an event": the event list puts what the instance waits for (`awaits.events`) first and
 * selects it, until the user picks another.
 */
function sendEventForm(id, net, after) {
  const places = (net.places || []).slice().sort((a, b) => (a.kind === "input" ? 0 : 1) - (b.kind === "input" ? 0 : 1));
  const type = h("select", { id: "event-type", "data-testid": "event-type" });
  let awaited = [];
  let touched = false;
  const fill = () => {
    const keep = type.value;
    const aw = new Set(awaited);
    const sorted = places.slice().sort((a, b) => (aw.has(a.id) ? 0 : 1) - (aw.has(b.id) ? 0 : 1));
    clear(type).append(...sorted.map((p) => h("option", { value: p.id }, `${p.id}${aw.has(p.id) ? " (awaited)" : p.kind === "input" ? " (input)" : ""}`)));
    type.value = touched && keep ? keep : awaited.find((e) => places.some((p) => p.id === e)) || (sorted[0] && sorted[0].id) || "";
  };
  fill();
  type.addEventListener("change", () => (touched = true));
  const data = h("textarea", { id: "event-data", rows: 3, spellcheck: "false", "data-testid": "event-data" }, "{}");
  const out = h("div", { "aria-live": "polite" });
  const form = h(
    "form",
    { class: "card" },
    h("h2", {}, "Send an event"),
    h("label", { for: "event-type" }, "Event"),
    type,
    h("label", { for: "event-data" }, "Data (JSON)"),
    data,
    h("div", { class: "row" }, h("button", { type: "submit", "data-testid": "send-event" }, "Send")),
    out,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(out);
    let payload;
    try {
      payload = data.value.trim() ? JSON.parse(data.value) : null;
    } catch (e) {
      out.append(problemBox({ code: "invalid_json", message: e.message }));
      return;
    }
    const evId = (crypto.randomUUID && crypto.randomUUID()) || `ui-${Date.now()}-${Math.random()}`;
    const ce = { specversion: "1.0", id: evId, source: "weft-ui", type: type.value, weftinstance: id };
    if (payload !== null) ce.data = payload;
    try {
      const r = await api("/v1/events", { body: ce, contentType: "application/cloudevents+json" });
      out.append(h("p", { class: "muted", "data-testid": "send-result" }, `accepted ${r.accepted}, routed ${r.routed}`));
      after();
    } catch (e) {
      out.append(problemBox(e));
    }
  });
  return {
    form,
    /** The events the instance waits for now (`awaits.events`). */
    awaiting(events) {
      const next = Array.isArray(events) ? events.map(String) : [];
      if (next.join("\n") === awaited.join("\n")) return;
      awaited = next;
      fill();
    },
  };
}

/** Steps as horizontal bars in time (from /trace); a bar is a button opening its records. */
function renderTimelineInto(box, trace, onPick) {
  clear(box);
  const steps = (trace && trace.steps) || [];
  box.append(h("h2", {}, `Timeline (${steps.length} firing${steps.length === 1 ? "" : "s"})`));
  if (!steps.length) {
    box.append(h("p", { class: "muted" }, trace && trace.recorded === false
      ? "The server keeps no firing trace for this instance (see the journal via time travel)."
      : "No step has fired yet."));
    return;
  }
  const now = Date.now();
  const t0 = Math.min(...steps.map((s) => s.started_ms));
  const t1 = Math.max(...steps.map((s) => s.finished_ms ?? now), t0 + 1);
  const span = t1 - t0;
  const rows = h("div", { class: "timeline", "data-testid": "timeline" });
  steps.forEach((s, i) => {
    const end = s.finished_ms ?? now;
    const left = ((s.started_ms - t0) / span) * 100;
    const width = Math.max(0.4, ((end - s.started_ms) / span) * 100);
    const dur = s.finished_ms != null ? fmtDuration(Math.max(0, s.finished_ms - s.started_ms)) : "in flight";
    const desc = `${s.step}: ${s.outcome}, ${dur}${s.attempts > 1 ? `, ${s.attempts} attempts` : ""}${s.error ? `, error: ${s.error}` : ""}`;
    rows.append(
      h(
        "div",
        { class: "tl-row" },
        h("span", { class: "tl-label mono", title: s.step }, s.step),
        h(
          "div",
          { class: "tl-track" },
          h(
            "button",
            {
              type: "button",
              class: `tl-bar outcome-${s.outcome}`,
              style: `left:${left}%;width:${width}%`,
              title: desc,
              "aria-label": desc,
              "data-testid": `tl-bar-${s.step}`,
              "data-index": i,
              onclick: () => onPick(s),
            },
            s.attempts > 1 ? `×${s.attempts}` : "",
          ),
        ),
        h("span", { class: "tl-dur muted" }, dur, s.error ? h("span", { class: "err" }, ` ✕ ${s.error}`) : null),
      ),
    );
  });
  box.append(
    h("div", { class: "tl-axis muted" }, h("span", {}, fmtTime(t0)), h("span", {}, `span ${fmtDuration(span)}`)),
    rows,
  );
}

/** The journal records behind one firing: its record, its dispatch and its outcome. */
async function showRecords(box, id, s) {
  clear(box).append(h("p", { class: "muted" }, "Loading records…"));
  try {
    const all = [];
    let from = 1;
    for (let page = 0; page < 20 && from != null; page++) {
      const r = await api(`/v1/instances/${enc(id)}/journal?from=${from}&limit=500`);
      all.push(...(r.records || []));
      from = r.next ?? null;
    }
    // The trace's `seq` is the firing id; records of a firing carry it as `body.firing`.
    const firing = s.firing ?? s.seq;
    const mine = all.filter((r) => r.body && r.body.firing === firing);
    // Through h(): a missing part is skipped (DOM append would print it as "null").
    clear(box).append(h("div", {},
      h("h2", {}, "Journal records for ", h("code", {}, s.step)),
      h("p", { class: "muted" }, `started ${fmtTime(s.started_ms)}, ${s.attempts} attempt${s.attempts === 1 ? "" : "s"}, outcome ${s.outcome}`),
      s.binding ? h("details", {}, h("summary", {}, "Binding"), h("pre", { class: "code" }, json(s.binding))) : null,
      s.args !== undefined && s.args !== null ? h("details", {}, h("summary", {}, "Args"), h("pre", { class: "code" }, json(s.args))) : null,
      s.error ? h("div", { class: "problem failure-text", "data-testid": "record-error" }, s.error) : null,
      s.result !== undefined && s.result !== null ? h("details", {}, h("summary", {}, "Result"), h("pre", { class: "code" }, json(s.result))) : null,
      s.emitted && s.emitted.length ? h("details", {}, h("summary", {}, "Emitted"), h("pre", { class: "code" }, json(s.emitted))) : null,
      mine.length
        ? h("ol", { class: "record-list", "data-testid": "record-list" }, mine.map((r) =>
            h("li", {}, h("strong", {}, `#${r.seq} ${r.kind}`), h("span", { class: "muted" }, ` ${fmtTime(r.at_ms)}`), h("pre", { class: "code" }, json(r.body)))))
        : h("p", { class: "muted" }, "No journal records name this firing."),
    ));
    box.scrollIntoView({ block: "nearest" });
  } catch (e) {
    clear(box).append(problemBox(e));
  }
}
