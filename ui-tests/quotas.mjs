// The Quotas page (#/quotas) in a real headless Chromium against a `weft serve` whose weft.toml
// sets `[budget]` quotas (crates/weft-cli/tests/ui_e2e.rs writes it: tenant max_tool_calls 500
// and max_cost 50, plan max_tool_calls 8, planner max_llm_calls 20 and calls_per_minute 5,
// period_secs 604800). Usage: node ui-tests/quotas.mjs URL [--token TOKEN]. Plans with three
// `echo` calls run while the page is open: the counts it shows must follow without a reload
// and equal GET /v1/quotas, up to the plan quota's refusal; a failed request is said so.
import { apiCall, assert, assertEq, shot, open, check, launch, finish } from "./harness.mjs";

const { browser, page, consoleErrors } = await launch();

// The configuration ui_e2e.rs writes; the server's answer must agree before anything else.
const TENANT_CALLS = 500;
const PLAN_CALLS = 8;

/** Plan `name`: three `echo` calls one after the other. */
const three = (name) => ({
  plan_name: name, graph_type: "acyclic",
  events: { start: {}, a: {}, b: {}, done: { kind: "output" } },
  steps: {
    one: { on: ["start"], action: "echo", emits: ["a"] },
    two: { on: ["a"], action: "echo", emits: ["b"] },
    three: { on: ["b"], action: "echo", emits: ["done"] },
  },
});

/** Starts an instance of `plan` over the API and waits for one of `statuses`. */
async function run(plan, statuses = ["completed"]) {
  const started = await apiCall("/v1/instances", { body: { plan, input: {} } });
  for (let i = 0; i < 200; i++) {
    const inst = await apiCall(`/v1/instances/${encodeURIComponent(started.id)}`);
    if (statuses.includes(inst.status)) return inst;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`instance ${started.id} of ${plan} did not reach ${statuses.join("/")}`);
}

/** What a quota card shows for one item: data-used, data-limit, the text and the bar. */
async function shownItem(card, key) {
  return page.evaluate(([card, key]) => {
    const row = document.querySelector(`[data-testid="${card}"] [data-testid="quota-item-${key}"]`);
    if (!row) return null;
    const bar = row.querySelector('[role="meter"]');
    return {
      used: Number(row.getAttribute("data-used")),
      limit: row.getAttribute("data-limit") === "" ? null : Number(row.getAttribute("data-limit")),
      text: row.querySelector('[data-testid="quota-text"]').firstChild.textContent,
      state: ["ok", "high", "full"].find((s) => row.classList.contains(s)),
      bar: bar ? { now: Number(bar.getAttribute("aria-valuenow")), max: Number(bar.getAttribute("aria-valuemax")) } : null,
    };
  }, [card, key]);
}

/** The card of `card` agrees with the server's `quota` (`{limits, used}`) on every item. */
async function assertShown(card, quota, keys = ["tool_calls", "llm_calls", "llm_tokens", "cost"]) {
  const max = { tool_calls: "max_tool_calls", llm_calls: "max_llm_calls", llm_tokens: "max_llm_tokens", cost: "max_cost" };
  for (const key of keys) {
    const shown = await shownItem(card, key);
    assert(shown, `${card} shows ${key}`);
    const used = quota.used[key] ?? 0;
    const limit = quota.limits[max[key]] ?? null;
    assertEq([shown.used, shown.limit], [used, limit], `${card} ${key}: used and limit = GET /v1/quotas`);
    if (limit === null) {
      assertEq(shown.text, String(used), `${card} ${key}: an unlimited item shows its use alone`);
      assertEq(shown.bar, null, `${card} ${key}: no bar without a limit`);
    } else {
      assert(shown.text.startsWith(`${used} / `) && shown.text.replace(/,/g, "").endsWith(` / ${limit}`), `${card} ${key}: "${shown.text}" is ${used} / ${limit}`);
      assertEq(shown.bar, { now: Math.min(used, limit), max: limit }, `${card} ${key}: the bar`);
    }
  }
}

/** Waits until the page shows `used` for `key` on `card` (no reload: the page refreshes itself). */
async function waitShown(card, key, used, timeout) {
  await page.waitForFunction(([card, key, used]) =>
    document.querySelector(`[data-testid="${card}"] [data-testid="quota-item-${key}"]`)?.getAttribute("data-used") === String(used),
  [card, key, used], { timeout });
}

await check("before any run: the configured quotas at zero, each plan's limits, the planner's", async () => {
  const q = await apiCall("/v1/quotas");
  assertEq([q.tenant.limits.max_tool_calls, q.plan_limits.max_tool_calls, q.planner.limits.max_llm_calls, q.period_secs],
    [TENANT_CALLS, PLAN_CALLS, 20, 604800], "the server read weft.toml's [budget]");
  await open(page, "#/quotas");
  await page.locator('[data-testid="quota-tenant"]').waitFor({ timeout: 10000 });
  assertEq(await page.locator('[data-testid="nav-quotas"]').getAttribute("aria-current"), "page", "the nav link is current");
  await assertShown("quota-tenant", q.tenant);
  // No plan counted yet: the per-plan quota is shown as what each plan gets.
  await assertShown("quota-plans", { limits: q.plan_limits, used: {} });
  await assertShown("quota-planner", q.planner, ["llm_calls", "llm_tokens"]);
  assert((await page.locator('[data-testid="quota-planner"]').innerText()).includes("At most 5 calls a minute"), "the planner's rate");
  assert((await page.locator('[data-testid="quota-planner"] [data-testid="quota-item-tool_calls"]').count()) === 0, "the planner counts no tool calls");
  const period = await page.locator('[data-testid="quota-tenant"] [data-testid="quota-period"]').innerText();
  assert(period.startsWith("Per 7 days"), `the period: ${period}`);
  assertEq(await page.locator('[data-testid="quotas-none"]').count(), 0, "not 'no quotas'");
  await shot(page, "q1-quotas-before");
});

await check("a run's tool calls appear on the open page, equal to GET /v1/quotas", async () => {
  await apiCall("/v1/plans", { body: three("three-calls") });
  await run("three-calls");
  // The page refetches on the tenant's events (and every 10 s): no reload here.
  await waitShown("quota-tenant", "tool_calls", 3, 9000);
  await page.locator('[data-testid="quota-plan-three-calls"]').waitFor({ timeout: 5000 });
  await waitShown("quota-plan-three-calls", "tool_calls", 3, 5000);
  const q = await apiCall("/v1/quotas");
  assertEq([q.tenant.used.tool_calls, q.plans["three-calls"].used.tool_calls], [3, 3], "the server counted the three calls");
  await assertShown("quota-tenant", q.tenant);
  await assertShown("quota-plan-three-calls", q.plans["three-calls"]);
  assertEq(await page.locator('[data-testid="quota-plans"]').count(), 0, "the counted plan replaces 'each plan'");
  assertEq((await shownItem("quota-plan-three-calls", "tool_calls")).text, `3 / ${PLAN_CALLS}`, "the plan's text");
  await shot(page, "q2-quotas-after-one-run");
  // Another run moves the counts again, before the 10 s poll could.
  await run("three-calls");
  await waitShown("quota-plan-three-calls", "tool_calls", 6, 9000);
  const again = await apiCall("/v1/quotas");
  await assertShown("quota-plan-three-calls", again.plans["three-calls"]);
  const six = page.locator('[data-testid="quota-plan-three-calls"] [data-testid="quota-item-tool_calls"] [data-testid="quota-text"]');
  assertEq(await six.innerText(), "6 / 8 (75 %)", "6 of 8, as a share");
});

await check("the plan's quota reached: the call over it is refused, the page shows it full", async () => {
  // Runs until one is refused (the third after the two above: its third call is the 9th).
  let failed = null;
  for (let i = 0; i < 3 && !failed; i++) {
    const inst = await run("three-calls", ["completed", "failed", "paused"]);
    if (inst.status !== "completed") failed = inst;
  }
  assert(failed, "a run was refused");
  assertEq(failed.status, "failed", "on_exceeded = fail");
  assert(JSON.stringify(failed).includes("budget_exceeded"), "refused with budget_exceeded");
  const q = await apiCall("/v1/quotas");
  assertEq(q.plans["three-calls"].used.tool_calls, PLAN_CALLS, "the plan used its whole quota, no more");
  await waitShown("quota-plan-three-calls", "tool_calls", PLAN_CALLS, 9000);
  await assertShown("quota-plan-three-calls", q.plans["three-calls"]);
  await assertShown("quota-tenant", q.tenant);
  const item = await shownItem("quota-plan-three-calls", "tool_calls");
  assertEq([item.text, item.state], [`${PLAN_CALLS} / ${PLAN_CALLS}`, "full"], "the plan's quota is full");
  await shot(page, "q3-quotas-plan-full");
});

await check("a failed request is said so: the last counts stay, marked; a first load shows the error", async () => {
  const problem = { type: "about:blank", title: "Service Unavailable", status: 503, code: "store_unavailable", detail: "the store refuses writes" };
  const fail = (route) => route.fulfill({ status: 503, contentType: "application/problem+json", body: JSON.stringify(problem) });
  await page.route("**/v1/quotas", fail);
  await page.click('[data-testid="quotas-refresh"]');
  const err = page.locator('[data-testid="quotas-error"]');
  await err.waitFor({ timeout: 5000 });
  const text = await err.innerText();
  assert(text.includes("could not be loaded") && text.includes("store_unavailable") && text.includes("last answer"), `the error: ${text}`);
  assert(await page.locator('[data-testid="quota-tenant"]').count(), "the last counts stay on screen");
  await shot(page, "q4-quotas-refresh-failed");
  // Opened while the server fails: the message, and no counts.
  await open(page, "#/plans");
  await open(page, "#/quotas");
  await err.waitFor({ timeout: 5000 });
  assert(!(await err.innerText()).includes("last answer"), "no earlier answer to speak of");
  assertEq(await page.locator('[data-testid="quota-tenant"]').count(), 0, "no counts without an answer");
  await page.unroute("**/v1/quotas", fail);
  await page.click('[data-testid="quotas-refresh"]');
  await page.locator('[data-testid="quota-tenant"]').waitFor({ timeout: 5000 });
  assertEq(await err.count(), 0, "the error goes with the next answer");
});

await check("no script errors in the page", async () => {
  // Expected: 401 (token prompt) and the 503s stubbed above.
  const real = consoleErrors.filter((e) => !/status of (401|503)\b/.test(e));
  assertEq(real, [], "console errors");
});

await finish(browser, "ui-quotas");
