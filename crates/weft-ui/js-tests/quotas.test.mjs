// Unit tests of the Quotas page's pure helpers (quotas.js: quotaItems, itemText, fmtAmount,
// fmtPeriod, fmtUntil, noQuotas), run with `node --test`: what a GET /v1/quotas answer becomes
// on screen, without a browser.
import { test } from "node:test";
import assert from "node:assert/strict";
import { quotaItems, itemText, fmtAmount, fmtPeriod, fmtUntil, noQuotas, ITEMS } from "../assets/quotas.js";

test("each item: used against its limit, share and state; an unset limit is unlimited", () => {
  const items = quotaItems({
    limits: { max_tool_calls: 500, max_llm_calls: 10, max_cost: 2 },
    used: { tool_calls: 6, llm_calls: 8, cost: 2 }, // llm_tokens is left out while zero
  });
  assert.deepEqual(items.map((i) => i.key), ["tool_calls", "llm_calls", "llm_tokens", "cost"]);
  const [calls, llm, tokens, cost] = items;
  assert.deepEqual(calls, { key: "tool_calls", label: "Tool calls", used: 6, limit: 500, share: 0.012, state: "ok" });
  assert.equal(llm.state, "high");
  assert.deepEqual(tokens, { key: "llm_tokens", label: "LLM tokens", used: 0, limit: null, share: null, state: "ok" });
  assert.equal(cost.state, "full");
  assert.equal(cost.share, 1);
});

test("a use past its limit (tokens are known after the call) is full, its share over 1", () => {
  const [tokens] = quotaItems({ limits: { max_llm_tokens: 1000 }, used: { llm_tokens: 1500 } }, ITEMS.filter((i) => i.key === "llm_tokens"));
  assert.equal(tokens.state, "full");
  assert.equal(tokens.share, 1.5);
});

test("a zero limit is full at once; a missing quota counts nothing", () => {
  assert.equal(quotaItems({ limits: { max_tool_calls: 0 }, used: {} })[0].state, "full");
  assert.deepEqual(quotaItems(null).map((i) => [i.used, i.limit]), [[0, null], [0, null], [0, null], [0, null]]);
});

test("text: used / limit, or the use alone without a limit", () => {
  const [calls, , tokens, cost] = quotaItems({
    limits: { max_tool_calls: 1000000, max_cost: 50 },
    used: { tool_calls: 1234, llm_tokens: 98765, cost: 0.1 + 0.2 },
  });
  assert.equal(itemText(calls), "1,234 / 1,000,000");
  assert.equal(itemText(tokens), "98,765");
  assert.equal(itemText(cost), "0.3 / 50");
});

test("amounts: counts grouped, costs to at most 4 decimals, garbage as 0", () => {
  assert.equal(fmtAmount(0, "tool_calls"), "0");
  assert.equal(fmtAmount(2000000, "llm_tokens"), "2,000,000");
  assert.equal(fmtAmount(12.345678, "cost"), "12.3457");
  assert.equal(fmtAmount(undefined, "cost"), "0");
});

test("periods and the time left in one", () => {
  assert.equal(fmtPeriod(86400), "1 day");
  assert.equal(fmtPeriod(7 * 86400), "7 days");
  assert.equal(fmtPeriod(3600), "1 hour");
  assert.equal(fmtPeriod(5400), "1 hour 30 minutes");
  assert.equal(fmtPeriod(120), "2 minutes");
  assert.equal(fmtPeriod(45), "45 s");
  const now = 1_700_000_000_000;
  assert.equal(fmtUntil(now + (3 * 3600 + 20 * 60 + 5) * 1000, now), "in 3 h 20 min");
  assert.equal(fmtUntil(now + (2 * 86400 + 3600) * 1000, now), "in 2 d 1 h");
  assert.equal(fmtUntil(now + 45_000, now), "in 45 s");
  assert.equal(fmtUntil(now - 1, now), "now");
});

test("no quotas: nothing configured, as the server answers without [budget]", () => {
  assert.equal(noQuotas({ period_secs: 86400, tenant: null, plans: {}, plan_limits: null, planner: null }), true);
  assert.equal(noQuotas({ tenant: null, plans: {}, plan_limits: { max_tool_calls: 5 }, planner: null }), false);
  assert.equal(noQuotas({ tenant: { limits: {}, used: {} }, plans: {} }), false);
  assert.equal(noQuotas({ tenant: null, plans: { a: { limits: {}, used: {} } }, planner: null }), false);
});
