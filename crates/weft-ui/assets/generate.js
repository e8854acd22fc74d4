// Generate a plan from an instruction (POST /v1/generate): shows the critic rounds and their
// findings and the resulting plan, its net and its analysis verdict (POST /v1/analyze, which
// stores nothing), so it can be judged before it is registered. When the server answers
// 503 llm_unavailable the form is disabled with that explanation.
import { api, enc } from "./api.js";
import { h, clear, badge, findingsList, problemBox, json, toast } from "./util.js";
import { drawNet } from "./net.js";
import { netOfPlan } from "./netnav.js";

let llmUnavailable = null; // the problem, once the server said so (kept for this page load)

const sentence = (t) => (/[.!?]$/.test(t.trim()) ? t.trim() : `${t.trim()}.`);

export async function generateView(main) {
  main.append(h("h1", {}, "Generate a plan"));
  const instr = h("textarea", { id: "instruction", rows: 4, "data-testid": "instruction", placeholder: "e.g. When an order arrives, check stock and charge the card in parallel, then send a confirmation." });
  const btn = h("button", { type: "submit", class: "primary", "data-testid": "generate" }, "Generate");
  const status = h("div", { "aria-live": "polite", "data-testid": "generate-status" });
  const out = h("div", { class: "stack" });
  const form = h(
    "form",
    { class: "card" },
    h("label", { for: "instruction" }, "Instruction"),
    instr,
    h("div", { class: "row" }, btn),
    status,
  );
  main.append(form, out);
  const disable = (problem) => {
    llmUnavailable = problem;
    btn.disabled = true;
    instr.disabled = true;
    clear(status).append(
      h("p", { class: "problem", "data-testid": "llm-unavailable" }, "Plan generation is unavailable: ", sentence(problem.detail || "no LLM is configured on the server"), problem.hint ? ` ${sentence(problem.hint)}` : ""),
    );
  };
  if (llmUnavailable) disable(llmUnavailable);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (!instr.value.trim()) return;
    clear(out);
    btn.disabled = true;
    clear(status).append(h("p", { class: "muted" }, "Planning… (the critic loop may take several rounds)"));
    try {
      const r = await api("/v1/generate", { body: { instruction: instr.value.trim() } });
      clear(status);
      btn.disabled = false;
      out.append(
        h("section", { class: "card" }, h("h2", {}, `Critic rounds (${(r.rounds || []).length})`),
          h("ol", { class: "rounds", "data-testid": "rounds" }, (r.rounds || []).map((rd) =>
            h("li", {}, h("strong", {}, `Round ${rd.round}`), findingsList(rd.findings))))),
      );
      const reg = h("button", { type: "button", class: "primary", "data-testid": "register-generated" }, "Register this plan");
      const regOut = h("div", { "aria-live": "polite" });
      reg.addEventListener("click", async () => {
        clear(regOut);
        try {
          const p = await api("/v1/plans", { body: r.plan });
          toast(`Registered ${p.name} v${p.version}`);
          location.hash = `#/plans/${enc(p.name)}`;
        } catch (e) {
          regOut.append(problemBox(e));
        }
      });
      // Its net and verdict, before it is registered.
      const verdictEl = h("span", { "data-testid": "generated-verdict" }, badge("analysing…"));
      const netBox = h("section", { class: "net-panel", "aria-label": "Generated plan's net", "data-testid": "generated-net" });
      const analysisOut = h("div", { "aria-live": "polite" });
      out.append(
        h("section", { class: "card stack" }, h("div", { class: "title-row" }, h("h2", {}, "Net of the generated plan"), verdictEl), netBox, analysisOut),
        h("section", { class: "card" }, h("h2", {}, "Plan"), h("details", {}, h("summary", {}, "Plan document (JSON)"), h("pre", { class: "code" }, json(r.plan))), reg, regOut),
      );
      try {
        const view = drawNet(netBox, netOfPlan(r.plan));
        const initial = {};
        for (const p of netOfPlan(r.plan).places) if (p.initial) initial[p.id] = p.initial;
        view.setMarking(initial);
        api("/v1/analyze", { body: r.plan }).then((a) => {
          const an = a.analysis || {};
          clear(verdictEl).append(badge(an.verdict || ((a.findings || []).some((f) => f.severity === "error") ? "invalid" : "unknown")));
          verdictEl.setAttribute("data-verdict", an.verdict || "");
          view.markAnalysis(an);
          clear(analysisOut).append(h("h3", {}, "Analysis findings"), findingsList(a.findings || []));
        }).catch((e) => {
          clear(verdictEl).append(badge("unknown"));
          clear(analysisOut).append(problemBox(e));
        });
      } catch (e) {
        clear(netBox).append(problemBox(e));
      }
    } catch (e) {
      btn.disabled = false;
      if (e.status === 503 && e.code === "llm_unavailable") disable(e.problem);
      else clear(status).append(problemBox(e));
    }
  });
  return null;
}
