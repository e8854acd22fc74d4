// Plans: the list (name, version, steps, verdict, register a plan by pasting JSON) and one
// plan's view (its net, analysis findings, the deadlock witness stepper, start an instance).
import { api, enc } from "./api.js";
import { h, clear, badge, fmtTime, findingsList, problemBox, toast, json } from "./util.js";
import { drawNet } from "./net.js";

export async function plansView(main) {
  main.append(h("h1", {}, "Plans"));
  const body = h("div", { class: "stack" });
  main.append(body);
  const list = await api("/v1/plans");
  const plans = list.plans || [];
  if (!plans.length) body.append(h("p", { class: "muted" }, "No plans yet. Register one below, or generate one."));
  else
    body.append(
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { "data-testid": "plans-table" },
          h("thead", {}, h("tr", {}, ["Name", "Version", "Steps", "Verdict", "Status", "Created"].map((t) => h("th", { scope: "col" }, t)))),
          h(
            "tbody",
            {},
            plans.map((p) =>
              h(
                "tr",
                { "data-testid": `plan-row-${p.name}` },
                h("td", {}, h("a", { href: `#/plans/${enc(p.name)}` }, p.name)),
                h("td", {}, String(p.version)),
                h("td", {}, String(p.steps ?? "–")),
                h("td", {}, badge(p.verdict || "unknown")),
                h("td", {}, p.status || ""),
                h("td", {}, fmtTime(p.created_at_ms)),
              ),
            ),
          ),
        ),
      ),
    );

  // Register a plan: paste its JSON.
  const text = h("textarea", { id: "plan-json", rows: 8, spellcheck: "false", "aria-label": "Plan JSON", "data-testid": "plan-json", placeholder: '{"plan_name": "…", "events": {…}, "steps": {…}}' });
  const out = h("div", { "aria-live": "polite" });
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "reg-h" },
    h("h2", { id: "reg-h" }, "Register a plan"),
    h("label", { for: "plan-json" }, "Plan document (JSON)"),
    text,
    h("div", { class: "row" }, h("button", { type: "submit", "data-testid": "register-plan" }, "Register")),
    out,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(out);
    let doc;
    try {
      doc = JSON.parse(text.value);
    } catch (e) {
      out.append(problemBox({ code: "invalid_json", message: e.message }));
      return;
    }
    try {
      const r = await api("/v1/plans", { body: doc });
      toast(`Registered ${r.name} v${r.version}`);
      location.hash = `#/plans/${enc(r.name)}`;
    } catch (e) {
      out.append(problemBox(e));
    }
  });
  body.append(form);
  return null;
}

export async function planView(main, name, params) {
  const version = params.get("version");
  const q = version ? `?version=${enc(version)}` : "";
  const [plan, net] = await Promise.all([
    api(`/v1/plans/${enc(name)}${version ? `/versions/${enc(version)}` : ""}`),
    api(`/v1/plans/${enc(name)}/net${q}`),
  ]);
  const latestVersion = version ? (await api(`/v1/plans/${enc(name)}`)).version : plan.version;
  const analysis = net.analysis || plan.analysis || {};
  const verdict = analysis.verdict || "unknown";
  main.append(
    h(
      "div",
      { class: "title-row" },
      h("h1", {}, "Plan ", h("span", { class: "mono" }, plan.name)),
      versionPicker(plan, latestVersion),
      badge(verdict, { "data-testid": "plan-verdict" }),
    ),
  );
  if (plan.plan && plan.plan.description) main.append(h("p", { class: "desc" }, plan.plan.description));

  const netBox = h("section", { class: "net-panel", "aria-label": "Net" });
  const side = h("aside", { class: "side", "aria-label": "Plan details" });
  main.append(h("div", { class: "split" }, netBox, side));
  // Details of the clicked (or Enter-activated) step or event: what the tooltip shows on hover.
  const details = h("section", { class: "card", "data-testid": "node-details", "aria-live": "polite" },
    h("h2", {}, "Details"), h("p", { class: "muted" }, "Select a step (box) or an event (circle)."));
  const showStep = (id) => {
    const st = (net.steps || []).find((x) => x.id === id) || { id };
    const ins = net.arcs.filter((a) => a.to === id && a.kind !== "emit").map((a) => a.from);
    const outs = net.arcs.filter((a) => a.from === id && a.kind === "emit").map((a) => (a.when ? `${a.to} (when ${a.when})` : a.to));
    // Through h(): an absent part is skipped (DOM append would print it as "null").
    clear(details).append(h("div", {},
      h("h2", {}, "Step ", h("code", {}, id)),
      h("dl", { class: "kv" },
        h("dt", {}, "tool"), h("dd", {}, h("code", {}, st.tool ?? "–")),
        h("dt", {}, "on"), h("dd", {}, ins.join(", ") || "–"),
        h("dt", {}, "emits"), h("dd", {}, outs.join(", ") || "–"),
        st.guard ? [h("dt", {}, "guard"), h("dd", {}, h("code", {}, st.guard))] : null,
        st.on_fail ? [h("dt", {}, "on_fail"), h("dd", {}, st.on_fail)] : null),
      st.args ? h("pre", { class: "code" }, json(st.args)) : null,
    ));
  };
  const showPlace = (id) => {
    view.select(id);
    const p = (net.places || []).find((x) => x.id === id) || { id };
    const by = net.arcs.filter((a) => a.to === id && a.kind === "emit").map((a) => a.from);
    const to = net.arcs.filter((a) => a.from === id && a.kind !== "emit").map((a) => a.to);
    clear(details).append(h("div", {},
      h("h2", {}, "Event ", h("code", {}, id)),
      h("dl", { class: "kv" },
        h("dt", {}, "kind"), h("dd", {}, p.kind || "–"),
        h("dt", {}, "emitted by"), h("dd", {}, by.join(", ") || (p.kind === "input" ? "outside (input)" : "–")),
        h("dt", {}, "consumed by"), h("dd", {}, to.join(", ") || "– (an output)")),
      p.description ? h("p", { class: "muted" }, p.description) : null,
    ));
  };
  const view = drawNet(netBox, net, { onPlace: showPlace, onStep: showStep });
  const initial = {};
  for (const p of net.places) if (p.initial) initial[p.id] = p.initial;
  view.setMarking(initial);
  view.markAnalysis(analysis);

  // Start an instance.
  const input = h("textarea", { id: "start-input", rows: 4, spellcheck: "false", "data-testid": "start-input", "aria-label": "Instance input (JSON)" }, "{}");
  const startOut = h("div", { "aria-live": "polite" });
  const startForm = h(
    "form",
    { class: "card" },
    h("h2", {}, "Start an instance"),
    h("label", { for: "start-input" }, "Input (JSON)"),
    input,
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary", "data-testid": "start-instance" }, "Start")),
    startOut,
  );
  startForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(startOut);
    let data;
    try {
      data = input.value.trim() ? JSON.parse(input.value) : {};
    } catch (e) {
      startOut.append(problemBox({ code: "invalid_json", message: e.message }));
      return;
    }
    try {
      const r = await api("/v1/instances", { body: { plan: plan.name, version: plan.version, input: data } });
      location.hash = `#/instances/${enc(r.id)}`;
    } catch (e) {
      startOut.append(problemBox(e));
    }
  });
  side.append(details, startForm);

  // Deadlock witnesses.
  const deadlocks = (analysis.deadlocks || []).filter((d) => d.witness);
  if (!deadlocks.length)
    for (const f of analysis.findings || plan.findings || [])
      if (Array.isArray(f.witness)) deadlocks.push({ witness: f.witness, marking: null, message: f.message });
  if (deadlocks.length) side.append(witnessStepper(deadlocks, view, initial, net));

  // Findings.
  const findings = analysis.findings || plan.findings || [];
  side.append(h("section", { class: "card" }, h("h2", {}, `Findings (${findings.length})`), findingsList(findings)));

  // Explain.
  const explainOut = h("div", { class: "explain", "aria-live": "polite" });
  side.append(
    h(
      "section",
      { class: "card" },
      h("h2", {}, "Explain"),
      h(
        "button",
        {
          type: "button",
          "data-testid": "explain",
          onclick: async () => {
            clear(explainOut).append("…");
            try {
              const r = await api("/v1/explain", { body: { name: plan.name } });
              clear(explainOut).append(h("pre", { class: "wrap", "data-testid": "explain-text" }, r.text));
            } catch (e) {
              clear(explainOut).append(problemBox(e));
            }
          },
        },
        "Explain this plan",
      ),
      explainOut,
    ),
  );
  side.append(
    h("details", { class: "card" }, h("summary", {}, "Plan document"), h("pre", { class: "code" }, json(plan.plan))),
  );
  return null;
}

/** "version N" with a picker over the plan's stored versions (1..latest). */
function versionPicker(plan, latest) {
  if (!(latest > 1)) return h("span", { class: "muted" }, `version ${plan.version}`);
  const sel = h(
    "select",
    { id: "plan-version", "data-testid": "plan-version", "aria-label": "Plan version" },
    Array.from({ length: latest }, (_, i) => latest - i).map((v) =>
      h("option", { value: v, selected: v === plan.version }, `version ${v}${v === latest ? " (latest)" : ""}`)),
  );
  sel.addEventListener("change", () => (location.hash = `#/plans/${enc(plan.name)}?version=${sel.value}`));
  return sel;
}

/**
 * The token counts along a witness (P/T token game from the initial marking): a firing takes
 * one token from each consumed place and puts one on each unconditional emit; a conditional
 * (`when`) emit is taken only when a later witness step consumes from that place.
 */
export function witnessMarkings(net, initial, witness) {
  const m = { ...initial };
  const out = [{ ...m }];
  witness.forEach((st, k) => {
    for (const a of net.arcs) if (a.to === st && a.kind === "consume") m[a.from] = Math.max(0, (m[a.from] || 0) - 1);
    for (const a of net.arcs) {
      if (a.from !== st || a.kind !== "emit") continue;
      const needed = witness.slice(k + 1).some((later) => net.arcs.some((b) => b.to === later && b.from === a.to && b.kind !== "emit"));
      if (!a.when || needed) m[a.to] = (m[a.to] || 0) + 1;
    }
    out.push({ ...m });
  });
  return out;
}

/** Prev/Next through a deadlock's witness firing sequence, highlighting one step at a time. */
function witnessStepper(deadlocks, view, initial, net) {
  let which = 0;
  let pos = 0; // 0 = before the first firing; k = after firing witness[k-1]
  const info = h("p", { "data-testid": "witness-position", "aria-live": "polite" });
  const seq = h("ol", { class: "witness-seq", "data-testid": "witness-seq" });
  const prev = h("button", { type: "button", "data-testid": "witness-prev", "aria-label": "Previous witness step" }, "◀ Prev");
  const next = h("button", { type: "button", "data-testid": "witness-next", "aria-label": "Next witness step" }, "Next ▶");
  const pick = deadlocks.length > 1
    ? h("select", { "aria-label": "Deadlock", onchange: (e) => ((which = Number(e.target.value)), (pos = 0), show()) },
        deadlocks.map((d, i) => h("option", { value: i }, `Deadlock ${i + 1} (${d.witness.length} steps)`)))
    : null;
  const show = () => {
    const w = deadlocks[which].witness;
    pos = Math.max(0, Math.min(pos, w.length));
    prev.disabled = pos === 0;
    next.disabled = pos === w.length;
    const current = pos > 0 ? w[pos - 1] : null;
    view.setWitness(w.slice(0, Math.max(0, pos - 1)), current);
    clear(seq).append(
      ...w.map((st, i) =>
        h("li", { class: i === pos - 1 ? "current" : i < pos - 1 ? "past" : "" }, h("code", {}, st)),
      ),
    );
    const d = deadlocks[which];
    // The analysis's deadlock marking when it gives one, else the token game along the witness.
    const given = d.marking && Object.keys(d.marking).length ? d.marking : null;
    const played = witnessMarkings(net, initial, w);
    const m = pos === w.length && given ? given : played[pos];
    view.setMarking(m);
    if (pos === w.length) {
      const tokens = Object.entries(m).filter(([, v]) => v > 0).map(([k, v]) => `${k}=${v}`).join(", ");
      info.textContent = `Step ${pos} of ${w.length}: ${current ?? "–"}. Deadlock reached: nothing can fire. Tokens: ${tokens || "none"}.`;
      if (d.message) info.append(h("span", { class: "muted block" }, d.message));
    } else {
      info.textContent =
        pos === 0
          ? `Initial marking. Press Next to fire the first of ${w.length} witness steps.`
          : `Step ${pos} of ${w.length}: ${current}`;
    }
    info.setAttribute("data-current", current || "");
  };
  prev.addEventListener("click", () => ((pos -= 1), show()));
  next.addEventListener("click", () => ((pos += 1), show()));
  show();
  return h(
    "section",
    { class: "card witness", "data-testid": "witness" },
    h("h2", {}, "Deadlock witness"),
    h("p", { class: "muted" }, "The firing sequence from the initial marking that reaches a deadlock."),
    pick,
    h("div", { class: "row" }, prev, next),
    info,
    seq,
  );
}
