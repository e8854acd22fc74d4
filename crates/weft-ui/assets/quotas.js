// Quotas: the calling tenant's quotas in the current period (GET /v1/quotas), so an operator's
// `[budget]` is visible where the runs are: the tenant's quota, each plan's, the planner's, each
// counted item with what was used of its limit and a bar. Refetched on the tenant's lifecycle
// events that spend a quota (SSE) and every 10 s (other processes' counts reach the store with
// no event here). The formatting helpers are pure, for js-tests/quotas.test.mjs.
import { api, streamUrl } from "./api.js";
import { h, clear, coalesced, fmtTime, problemBox, eventTypeForms } from "./util.js";

/** What a quota counts: the key in `used`, the limit's key in `limits`, a label. */
export const ITEMS = [
  { key: "tool_calls", max: "max_tool_calls", label: "Tool calls" },
  { key: "llm_calls", max: "max_llm_calls", label: "LLM calls" },
  { key: "llm_tokens", max: "max_llm_tokens", label: "LLM tokens" },
  { key: "cost", max: "max_cost", label: "Cost" },
];
// The planner's quota counts model calls and their tokens only.
const PLANNER_ITEMS = ITEMS.filter((i) => i.key === "llm_calls" || i.key === "llm_tokens");

// Events after which a count may have changed; anything else leaves the quotas alone.
const SPENDING = [
  "plan.step.finished", "plan.step.error", "plan.completed", "plan.failed", "plan.paused",
  "budget.exceeded", "planner.throttled", "planner.rejected",
];
const POLL_MS = 10000;
// A share of a limit from which its bar turns to the warning colour.
const HIGH = 0.8;

/**
 * A quota's items: `{key, label, used, limit, share, state}` for each of `items`. `limit` is null
 * for an item without one (unlimited: only the use is shown), `share` the part of the limit
 * used (may pass 1: a model call's tokens are known only once it returns), `state` `ok`, `high`
 * (from 80 %) or `full` (the limit is reached: the next call is refused).
 */
export function quotaItems(quota, items = ITEMS) {
  const limits = (quota && quota.limits) || {};
  const used = (quota && quota.used) || {};
  return items.map(({ key, max, label }) => {
    const u = Number(used[key]) || 0; // `llm_tokens` is left out of `used` while zero
    const limit = limits[max] === null || limits[max] === undefined ? null : Number(limits[max]);
    if (limit === null) return { key, label, used: u, limit, share: null, state: "ok" };
    const share = limit > 0 ? u / limit : 1;
    return { key, label, used: u, limit, share, state: share >= 1 ? "full" : share >= HIGH ? "high" : "ok" };
  });
}

const GROUPED = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const COST = new Intl.NumberFormat("en-US", { maximumFractionDigits: 4 });

/** A count with thousands separators (`1,000,000`); a cost with at most 4 decimals (`0.3`). */
export function fmtAmount(n, key) {
  const v = Number(n) || 0;
  return key === "cost" ? COST.format(v) : GROUPED.format(v);
}

/** `used / limit`, or the use alone for an unlimited item: `6 / 500`, `6`. */
export function itemText(item) {
  const used = fmtAmount(item.used, item.key);
  return item.limit === null ? used : `${used} / ${fmtAmount(item.limit, item.key)}`;
}

/** A period in words: `1 day`, `12 hours`, `1 hour 30 minutes`, `45 s`. */
export function fmtPeriod(secs) {
  const s = Math.max(0, Math.floor(Number(secs) || 0));
  const plural = (n, w) => `${n} ${w}${n === 1 ? "" : "s"}`;
  if (s >= 86400 && s % 86400 === 0) return plural(s / 86400, "day");
  if (s >= 3600 && s % 60 === 0) {
    const m = (s % 3600) / 60;
    return plural(Math.floor(s / 3600), "hour") + (m ? ` ${plural(m, "minute")}` : "");
  }
  if (s >= 60 && s % 60 === 0) return plural(s / 60, "minute");
  return `${s} s`;
}

/** How long until `endsMs` from `nowMs`, roughly: `in 3 h 20 min`, `in 45 s`, `now`. */
export function fmtUntil(endsMs, nowMs) {
  const s = Math.floor((endsMs - nowMs) / 1000);
  if (!(s > 0)) return "now";
  const d = Math.floor(s / 86400);
  const hr = Math.floor((s % 86400) / 3600);
  const min = Math.floor((s % 3600) / 60);
  if (d) return `in ${d} d ${hr} h`;
  if (hr) return `in ${hr} h ${min} min`;
  if (min) return `in ${min} min`;
  return `in ${s} s`;
}

/** Are no quotas configured at all (nothing to show but that)? */
export function noQuotas(q) {
  return !q || (!q.tenant && !q.planner && !q.plan_limits && !Object.keys(q.plans || {}).length);
}

export async function quotasView(main) {
  const refreshBtn = h("button", { type: "button", "data-testid": "quotas-refresh" }, "Refresh");
  const updated = h("span", { class: "muted", "data-testid": "quotas-updated" });
  main.append(h("div", { class: "title-row" }, h("h1", {}, "Quotas"), h("span", { class: "spacer" }), updated, refreshBtn));
  const status = h("div", { class: "quota-status", "aria-live": "polite", "data-testid": "quotas-status" });
  const body = h("div", { class: "stack", "data-testid": "quotas" });
  main.append(status, body);

  let closed = false;
  let shown = null; // the last answer rendered
  const refresh = coalesced(async () => {
    try {
      const q = await api("/v1/quotas");
      if (closed) return;
      shown = q;
      openStream(); // again, if a refused token had closed it
      clear(status);
      renderQuotas(body, q, Date.now());
      updated.textContent = `updated ${fmtTime(Date.now())}`;
    } catch (e) {
      if (closed) return;
      // Keep the last counts on screen; say that they could not be refreshed.
      clear(status).append(quotaProblem(e, shown !== null));
      if (shown === null) clear(body);
    }
  }, () => closed);
  refreshBtn.addEventListener("click", refresh);

  // Live: the tenant's stream, only the events that spend; a burst is one refetch.
  let pending = null;
  const schedule = () => {
    if (!pending) pending = setTimeout(() => ((pending = null), refresh()), 300);
  };
  let es = null;
  const openStream = () => {
    if (closed || (es && es.readyState !== EventSource.CLOSED)) return;
    es = new EventSource(streamUrl(`/v1/events/stream?type=${encodeURIComponent(SPENDING.join(","))}`));
    for (const t of [...SPENDING.flatMap(eventTypeForms), "weft.lagged"]) es.addEventListener(t, schedule);
    es.addEventListener("message", schedule);
  };
  const poll = setInterval(() => {
    if (!document.hidden) refresh();
  }, POLL_MS);

  await refresh();
  return () => {
    closed = true;
    if (es) es.close();
    clearInterval(poll);
    clearTimeout(pending);
  };
}

/** Why the quotas are not shown, in words, above the server's problem (code, detail, hint). */
function quotaProblem(err, stale) {
  const what = err && err.status === 401
    ? "The server did not accept the API token, so the quotas cannot be shown."
    : "The quotas could not be loaded from the server.";
  const box = problemBox(err);
  box.setAttribute("data-testid", "quotas-error");
  box.prepend(h("p", { class: "quota-what" }, what, stale ? " The counts below are from the last answer." : ""));
  return box;
}

function renderQuotas(body, q, now) {
  clear(body);
  if (noQuotas(q)) {
    body.append(h("p", { class: "card", "data-testid": "quotas-none" },
      "No quotas are configured for this tenant: the operator sets them in ",
      h("code", {}, "weft.toml"), "'s ", h("code", {}, "[budget]"), " (",
      h("code", {}, "tenant"), ", ", h("code", {}, "plan"), ", ", h("code", {}, "planner"),
      "). Plans' own ", h("code", {}, "limits"), " are shown on each instance's page."));
    return;
  }
  const period = `Per ${fmtPeriod(q.period_secs)}; this period ends ${fmtTime(q.period_ends_ms)} (${fmtUntil(q.period_ends_ms, now)}).`;
  body.append(h("p", { class: "muted", "data-testid": "quotas-shared" },
    q.shared ? "Counted by every process on the store" : "Counted by this process alone (no store)",
    "; the counts start again at zero when a period ends."));
  const cards = h("div", { class: "quota-grid" });
  body.append(cards);
  if (q.tenant)
    cards.append(quotaCard("quota-tenant", "Tenant", "All instances of this tenant.", period, quotaItems(q.tenant)));
  const plans = Object.entries(q.plans || {});
  for (const [name, quota] of plans)
    cards.append(quotaCard(`quota-plan-${name}`, ["Plan ", h("a", { href: `#/plans/${encodeURIComponent(name)}` }, name)],
      "All instances of this plan.", period, quotaItems(quota)));
  if (q.plan_limits && !plans.length)
    cards.append(quotaCard("quota-plans", "Each plan", "No plan has used this quota in this period yet; each plan gets these limits.",
      period, quotaItems({ limits: q.plan_limits, used: {} })));
  if (q.planner) {
    const perMinute = q.planner.limits && q.planner.limits.calls_per_minute;
    cards.append(quotaCard("quota-planner", "Planner",
      ["The planners' model calls: generate, explain, ReAct (the models plans call count as the tenant's).",
        perMinute != null ? ` At most ${perMinute} call${perMinute === 1 ? "" : "s"} a minute (each process).` : ""],
      period, quotaItems(q.planner, PLANNER_ITEMS)));
  }
}

function quotaCard(testid, title, what, period, items) {
  return h("section", { class: "card", "data-testid": testid },
    h("h2", {}, title),
    h("p", { class: "muted" }, what, " ", h("span", { "data-testid": "quota-period" }, period)),
    h("div", { class: "quota-items" }, items.map(itemRow)));
}

function itemRow(it) {
  const text = itemText(it);
  const pct = it.share === null ? null : Math.round(it.share * 100);
  return h("div", {
    class: `quota-row ${it.state}`, "data-testid": `quota-item-${it.key}`, "data-used": it.used,
    "data-limit": it.limit === null ? "" : it.limit,
  },
  h("span", { class: "quota-label" }, it.label),
  it.limit === null
    ? h("span", { class: "muted quota-nolimit" }, "no limit")
    : h("span", {
      class: "quota-bar", role: "meter", "aria-label": `${it.label}: ${text}`,
      "aria-valuemin": 0, "aria-valuemax": it.limit, "aria-valuenow": Math.min(it.used, it.limit),
    }, h("span", { class: "quota-fill", style: `width:${Math.min(100, pct)}%` })),
  h("span", { class: "quota-text", "data-testid": "quota-text" }, text, pct !== null ? h("span", { class: "muted" }, ` (${pct} %)`) : null));
}
