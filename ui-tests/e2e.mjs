// End-to-end test of the weft web UI in a real headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core; no browser is downloaded). Usage:
//   node ui-tests/e2e.mjs URL [--weft BIN] [--store STORE] [--token TOKEN]
// URL is a running `weft serve`; BIN/STORE are the `weft` binary and the same store the server
// uses (for comparing the time-travel marking with `weft inspect --at N --json`); TOKEN is an
// API token when the server has tokens (the test enters it in the UI's token prompt).
// Screenshots go to $WEFT_UI_ARTIFACTS (default target/ui-artifacts/). Exit 0 when every check
// passes; prints "N passed, M failed".
import { execFileSync } from "node:child_process";
import { bigPlan } from "./big-plans.mjs";
import { args, apiCall, example, assert, assertEq, shot, open, check, launch, finish } from "./harness.mjs";

// --- helpers ---------------------------------------------------------------------------------
function weftInspect(instance, at) {
  if (!args.weft || !args.store) throw new Error("--weft and --store are needed to compare with `weft inspect`");
  const out = execFileSync(args.weft, ["inspect", instance, "--at", String(at), "--json", "--store", args.store], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  return JSON.parse(out);
}

function asCounts(marking) {
  const out = {};
  if (Array.isArray(marking)) {
    for (const [k, v] of marking) if (v) out[k] = Number(v);
  } else if (marking) {
    for (const [k, v] of Object.entries(marking)) {
      const n = Array.isArray(v) ? v.length : Number(v);
      if (n) out[k] = n;
    }
  }
  return sortKeys(out);
}

function sortKeys(o) {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** The marking the UI shows: data-tokens of every place, non-zero only. */
async function shownMarking(page) {
  const m = await page.$$eval("[data-testid^='place-']", (els) =>
    els.map((e) => [e.getAttribute("data-id"), Number(e.getAttribute("data-tokens"))]));
  const out = {};
  for (const [k, v] of m) if (v) out[k] = v;
  return sortKeys(out);
}

const place = (id) => `[data-testid="place-${id}"]`;
const step = (id) => `[data-testid="step-${id}"]`;

/** A lifecycle event's type without `dev.weft.`: the short and reverse-DNS forms compare equal. */
const shortType = (t) => String(t ?? "").replace(/^dev\.weft\./, "");

/**
 * What the net view shows right now: the label size on screen (CSS px: font size times the
 * SVG's scale), whether the whole graph is visible or else the minimap is, the page's
 * horizontal overflow, and the drawn steps and chains.
 */
async function netState(page) {
  return page.evaluate(() => {
    const svg = document.querySelector('[data-testid="net"]');
    const scroller = document.querySelector('[data-testid="net-scroll"]');
    const label = svg.querySelector(".label");
    const mini = document.querySelector('[data-testid="minimap"]');
    const sr = scroller.getBoundingClientRect();
    const gr = svg.getBoundingClientRect();
    return {
      labelPx: parseFloat(getComputedStyle(label).fontSize) * svg.getScreenCTM().a,
      labelBoxPx: label.getBoundingClientRect().height,
      fits: gr.width <= sr.width + 1 && gr.height <= sr.height + 1,
      minimap: !!mini && getComputedStyle(mini).display !== "none" && mini.getBoundingClientRect().width > 20,
      overflow: document.documentElement.scrollWidth - window.innerWidth,
      steps: svg.querySelectorAll('[data-testid^="step-"]').length,
      chains: svg.querySelectorAll('[data-testid="chain"]').length,
      panelRight: document.querySelector(".net-panel").getBoundingClientRect().right,
      rows: Number(svg.getAttribute("data-rows") || 1),
      fitsWidth: gr.width <= sr.width + 1,
    };
  });
}

/** Is the element's centre inside the net's visible area? */
async function inNetView(page, selector) {
  return page.evaluate((sel) => {
    const el = document.querySelector(sel);
    if (!el) return false;
    const r = el.getBoundingClientRect();
    const v = document.querySelector('[data-testid="net-scroll"]').getBoundingClientRect();
    const [x, y] = [r.left + r.width / 2, r.top + r.height / 2];
    return x >= v.left && x <= v.right && y >= v.top && y <= v.bottom;
  }, selector);
}

/** Opens the UI at `hash`, answering the token prompt when the server has tokens. */
// --- the tests -------------------------------------------------------------------------------
const { browser, page, consoleErrors } = await launch();

let fanoutInstance = null;

await check("token prompt (when the server has tokens) and the plans list", async () => {
  const fanout = example("fanout.json");
  const gated = structuredClone(fanout);
  gated.plan_name = "fanout-gated";
  gated.description = "The fan-out example with its join gated on an external `approve` event.";
  gated.events.approve = { kind: "input" };
  gated.steps.merge.on.push("approve");
  for (const p of [fanout, gated, example("broken/deadlock.json")]) await apiCall("/v1/plans", { body: p });
  if (args.token) {
    await page.goto(`${args.url}/#/plans`);
    await page.locator("#token-dialog").waitFor({ state: "visible", timeout: 10000 });
    await shot(page, "00-token-prompt");
  }
  await open(page, "#/plans");
  await page.locator('[data-testid="plan-row-fanout"]').waitFor({ timeout: 10000 });
  await page.locator('[data-testid="plan-row-deadlock"]').waitFor();
  const rowText = await page.locator('[data-testid="plan-row-fanout"]').innerText();
  assert(/\b11\b/.test(rowText), `fanout row shows 11 steps: ${rowText}`);
  await shot(page, "01-plans");
});

await check("fan-out example started from the UI runs to completed", async () => {
  await open(page, "#/plans/fanout");
  await page.locator(step("merge")).waitFor({ timeout: 10000 });
  // Record every token count the UI shows from here on (same document: the app routes by hash).
  await page.evaluate(() => {
    window.__marks = [];
    const mo = new MutationObserver((ms) => {
      for (const m of ms) if (m.attributeName === "data-tokens")
        window.__marks.push([m.target.getAttribute("data-id"), Number(m.target.getAttribute("data-tokens"))]);
    });
    mo.observe(document.getElementById("main"), { subtree: true, attributes: true, attributeFilter: ["data-tokens"], childList: true });
  });
  await shot(page, "02-plan-fanout");
  await page.fill('[data-testid="start-input"]', '{"dataset": "sales"}');
  await page.click('[data-testid="start-instance"]');
  await page.waitForURL(/#\/instances\/[^/]+$/, { timeout: 10000 });
  fanoutInstance = decodeURIComponent(page.url().split("#/instances/")[1]);
  const status = page.locator('[data-testid="instance-status"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "completed", null, { timeout: 20000 });
  assertEq(await status.innerText(), "completed", "status badge");
  await page.waitForFunction((sel) => document.querySelector(sel)?.getAttribute("data-tokens") === "1", place("all.checked"), { timeout: 10000 });
  const shown = await shownMarking(page);
  const api = await apiCall(`/v1/instances/${encodeURIComponent(fanoutInstance)}`);
  assertEq(shown, asCounts(api.marking), "final marking shown = GET /v1/instances/{id}");
  assertEq(shown["all.checked"], 1, "the join emitted its output");
  assert(!shown.start, "the input token was consumed");
  const marks = await page.evaluate(() => window.__marks);
  assert(marks.some(([id, n]) => id === "all.checked" && n === 1), "all.checked changed to 1 on screen");
  // The timeline shows all 11 firings.
  await page.locator('[data-testid="timeline"]').waitFor();
  assertEq(await page.locator(".tl-bar").count(), 11, "timeline bars");
  await shot(page, "03-instance-fanout-completed");
});

await check("live marking: gated fan-out shows branch tokens, then completes after an event sent from the UI", async () => {
  await open(page, "#/plans/fanout-gated");
  await page.locator(step("merge")).waitFor({ timeout: 10000 });
  await page.fill('[data-testid="start-input"]', '{"dataset": "live"}');
  await page.click('[data-testid="start-instance"]');
  await page.waitForURL(/#\/instances\/[^/]+$/, { timeout: 10000 });
  // All ten branches fire; their tokens wait on the join, which lacks `approve`.
  await page.waitForFunction(() => {
    const els = [...document.querySelectorAll('[data-testid^="place-shard_"]')];
    return els.length === 10 && els.every((e) => e.getAttribute("data-tokens") === "1");
  }, null, { timeout: 20000 });
  // Updates come over the SSE stream (the view polls only while the stream is not open).
  await page.waitForFunction(() => document.querySelector('[data-testid="stream"]')?.getAttribute("data-stream") === "open", null, { timeout: 10000 });
  const before = await shownMarking(page);
  assert(!before["all.checked"], "no output before the gate opens");
  const st = await page.locator('[data-testid="instance-status"]').innerText();
  assert(st !== "completed", `not completed before the event (status ${st})`);
  await page.locator(step("merge")).waitFor();
  await shot(page, "04-instance-gated-waiting");
  // The event the instance waits for is the one the form sends unless another is picked.
  await page.waitForFunction(() => document.querySelector('[data-testid="event-type"]')?.value === "approve", null, { timeout: 10000 });
  await page.selectOption('[data-testid="event-type"]', "approve");
  await page.fill('[data-testid="event-data"]', '{"by": "e2e"}');
  await page.click('[data-testid="send-event"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "completed", null, { timeout: 20000 });
  await page.waitForFunction((sel) => document.querySelector(sel)?.getAttribute("data-tokens") === "1", place("all.checked"), { timeout: 10000 });
  const after = await shownMarking(page);
  for (let i = 0; i < 10; i++) assert(!after[`shard_${i}.checked`], `shard_${i}.checked consumed by the join`);
  // Click a place: its tokens' payloads appear in the side panel.
  await page.click(place("all.checked"));
  const payload = await page.locator('[data-testid="token-payload"]').first().innerText();
  assert(payload.includes("live"), `payload of all.checked mentions the dataset: ${payload}`);
  await shot(page, "05-instance-gated-completed");
});

await check("actions: checkpoint, stop, resume from the checkpoint (a fork), then complete it", async () => {
  const started = await apiCall("/v1/instances", { body: { plan: "fanout-gated", input: { dataset: "fork" } } });
  await open(page, `#/instances/${encodeURIComponent(started.id)}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="place-shard_9.checked"]')?.getAttribute("data-tokens") === "1", null, { timeout: 20000 });
  await page.click('[data-testid="checkpoint"]');
  await page.locator('[data-testid="checkpoint-out"]').waitFor({ timeout: 10000 });
  const cp = await page.inputValue('[data-testid="resume-from"]');
  assert(/^cp-/.test(cp), `the checkpoint id is offered for resume: ${cp}`);
  await page.click('[data-testid="stop"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "stopped", null, { timeout: 10000 });
  assert(await page.locator('[data-testid="stop"]').isDisabled(), "Stop is disabled once stopped");
  await page.click('[data-testid="resume"]');
  await page.waitForFunction((old) => location.hash.startsWith("#/instances/") && !location.hash.endsWith(`/${old}`), encodeURIComponent(started.id), { timeout: 10000 });
  const fork = decodeURIComponent(page.url().split("#/instances/")[1]);
  assert(fork !== started.id, "resuming from a checkpoint opens the forked instance");
  await page.waitForFunction(() => document.querySelector('[data-testid="place-shard_9.checked"]')?.getAttribute("data-tokens") === "1", null, { timeout: 20000 });
  await page.selectOption('[data-testid="event-type"]', "approve");
  await page.click('[data-testid="send-event"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "completed", null, { timeout: 20000 });
  const orig = await apiCall(`/v1/instances/${encodeURIComponent(started.id)}`);
  assertEq(orig.status, "stopped", "the original instance stays stopped");
});

await check("a step waiting for approval is granted from the instance page", async () => {
  const plan = {
    plan_name: "ui-approval", graph_type: "acyclic", limits: { max_tool_calls: 3 },
    events: { start: {}, done: { kind: "output" } },
    steps: { ship: { on: ["start"], action: "echo", args: { what: "parcel" },
      approval: { reason: "ship the parcel?" }, emits: ["done"] } },
  };
  await apiCall("/v1/plans", { body: plan });
  const started = await apiCall("/v1/instances", { body: { plan: "ui-approval", input: {} } });
  await open(page, `#/instances/${encodeURIComponent(started.id)}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "waiting_approval", null, { timeout: 20000 });
  const item = page.locator('[data-testid="approval"][data-step="ship"]');
  await item.waitFor({ timeout: 10000 });
  assert((await item.innerText()).includes("ship the parcel?"), "the reason is shown");
  // The step in flight: its attempt and how long it has been running (ticking).
  const inflight = page.locator('[data-testid="in-flight"] li[data-step="ship"]');
  await inflight.waitFor({ timeout: 10000 });
  assert((await inflight.innerText()).includes("attempt 1"), `attempt shown: ${await inflight.innerText()}`);
  const e0 = await inflight.locator('[data-testid="elapsed"]').innerText();
  await page.waitForFunction((e0) => document.querySelector('[data-testid="in-flight"] [data-testid="elapsed"]')?.textContent !== e0, e0, { timeout: 5000 });
  await shot(page, "05-approval-waiting");
  await page.fill('[data-testid="approval-comment"]', "looks right");
  await page.click('[data-testid="approval-grant"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "completed", null, { timeout: 20000 });
  const journal = await apiCall(`/v1/instances/${encodeURIComponent(started.id)}/journal`);
  const decided = journal.records.find((r) => r.kind === "approval.decided");
  assert(decided && decided.body.granted === true && decided.body.comment === "looks right", `decision journaled: ${JSON.stringify(decided)}`);
  // The plan's budget: the one call, counted against its limit.
  await page.waitForFunction(() => (document.querySelector('[data-testid="usage"]')?.textContent || "").includes("1 of 3 tool calls"), null, { timeout: 10000 });
});

await check("failed steps are marked on the net and in the timeline (failure-handling example)", async () => {
  await apiCall("/v1/plans", { body: example("failure-handling.json") });
  const started = await apiCall("/v1/instances", { body: { plan: "failure-handling", input: { order: "A-1", email: "buyer@example.com" } } });
  await open(page, `#/instances/${encodeURIComponent(started.id)}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "completed", null, { timeout: 30000 });
  await page.waitForFunction((sel) => document.querySelector(sel)?.getAttribute("data-state") === "failed", step("charge"), { timeout: 10000 });
  const bar = page.locator('[data-testid="tl-bar-charge"]');
  assertEq((await bar.innerText()).trim(), "×3", "charge's bar shows its three attempts");
  assert((await bar.getAttribute("class")).includes("outcome-error"), "charge's bar is an error");
  // Its records: the error in words, and no stray text such as "nullnull" for absent parts.
  await bar.click();
  await page.locator('[data-testid="record-list"] li').first().waitFor({ timeout: 10000 });
  const loose = await page.evaluate(() => {
    const box = document.querySelector('[data-testid="records"]').cloneNode(true);
    box.querySelectorAll("pre").forEach((e) => e.remove());
    return box.textContent;
  });
  assert(!/null/.test(loose), `no "null" outside the JSON blocks of the record panel: ${loose.slice(0, 300)}`);
  assert((await page.locator('[data-testid="record-error"]').innerText()).includes("card declined"), "the firing's error is shown");
  await shot(page, "05b-instance-failure-handling");
});

await check("time-travel slider shows the marking of `weft inspect --at N` at every N", async () => {
  assert(fanoutInstance, "the fan-out instance exists");
  await open(page, `#/instances/${encodeURIComponent(fanoutInstance)}`);
  const slider = page.locator('[data-testid="time-slider"]');
  await slider.waitFor({ timeout: 10000 });
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "completed", null, { timeout: 10000 });
  const head = Number(await slider.getAttribute("max"));
  assert(head >= 2, `journal has records (head ${head})`);
  const seen = new Set();
  let sawBranches = false;
  let sawInflight = false;
  for (let n = 1; n <= head; n++) {
    await slider.fill(String(n));
    await page.waitForFunction((n) => {
      const e = document.querySelector('[data-testid="time-position"]');
      return e && e.getAttribute("data-at") === String(n) && document.querySelector(".net-panel.history");
    }, n, { timeout: 10000 });
    const shown = await shownMarking(page);
    const cli = weftInspect(fanoutInstance, n);
    assertEq(shown, asCounts(cli.marking), `marking at ${n} equals weft inspect --at ${n}`);
    seen.add(JSON.stringify(shown));
    const inflight = await page.$$eval('[data-state="inflight"]', (els) => els.map((e) => e.getAttribute("data-id")));
    const cliInflight = (cli.in_flight || []).map((a) => a.step).sort();
    assertEq(inflight.slice().sort(), [...new Set(cliInflight)], `in-flight steps highlighted at ${n}`);
    if (inflight.length) sawInflight = true;
    if (Object.keys(shown).some((k) => k.startsWith("shard_"))) sawBranches = true;
    if (n === Math.ceil(head / 2)) await shot(page, "06-time-travel-mid");
  }
  assert(seen.size >= 3, `the marking changes over the journal (${seen.size} distinct)`);
  assert(sawBranches, "branch tokens appear at some point of the journal");
  assert(sawInflight, "some step is in flight at some point of the journal");
  const last = asCounts(weftInspect(fanoutInstance, head).marking);
  assertEq(last["all.checked"], 1, "the output is there at the head");
  await page.click('[data-testid="time-live"]');
  await page.waitForFunction(() => !document.querySelector(".net-panel.history"));
});

await check("timeline bar opens the journal records behind it", async () => {
  await page.click('[data-testid="tl-bar-merge"]');
  await page.locator('[data-testid="record-list"] li').first().waitFor({ timeout: 10000 });
  const n = await page.locator('[data-testid="record-list"] li').count();
  assert(n >= 1, "at least one record");
  await shot(page, "07-timeline-records");
});

await check("deadlock witness stepper highlights the witness steps one by one", async () => {
  const net = await apiCall("/v1/plans/deadlock/net");
  const dl = (net.analysis && net.analysis.deadlocks) || [];
  assert(dl.length >= 1 && dl[0].witness.length >= 1, `the analysis reports a deadlock with a witness: ${JSON.stringify(net.analysis)}`);
  const w = dl[0].witness;
  await open(page, "#/plans/deadlock");
  await page.locator('[data-testid="witness"]').waitFor({ timeout: 10000 });
  const verdict = await page.locator('[data-testid="plan-verdict"]').innerText();
  assert(verdict !== "sound", `verdict shown is not sound: ${verdict}`);
  const highlighted = () => page.$$eval("[data-witness]", (els) => els.map((e) => [e.getAttribute("data-id"), e.getAttribute("data-witness")]));
  assertEq(await highlighted(), [], "nothing highlighted before Next");
  for (let i = 0; i < w.length; i++) {
    await page.click('[data-testid="witness-next"]');
    const h = Object.fromEntries(await highlighted());
    assertEq(h[w[i]], "current", `step ${i + 1} (${w[i]}) is the current one`);
    for (let j = 0; j < i; j++) if (w[j] !== w[i]) assertEq(h[w[j]], "past", `step ${j + 1} is marked as fired`);
    const pos = await page.locator('[data-testid="witness-position"]').getAttribute("data-current");
    assertEq(pos, w[i], "position text names the step");
  }
  assert(await page.locator('[data-testid="witness-next"]').isDisabled(), "Next is disabled at the deadlock");
  const text = await page.locator('[data-testid="witness-position"]').innerText();
  assert(/deadlock/i.test(text), `the end says deadlock: ${text}`);
  // The deadlock marking: `finish` holds `checked` but lacks `approved`.
  const atDeadlock = await shownMarking(page);
  assertEq(atDeadlock, { checked: 1 }, "marking shown at the deadlock");
  await shot(page, "08-deadlock-witness");
  await page.click('[data-testid="witness-prev"]');
  if (w.length > 1) assertEq(Object.fromEntries(await highlighted())[w[w.length - 2]], "current", "Prev goes back one step");
  else assertEq(await highlighted(), [], "Prev goes back to the initial marking");
  await page.focus('[data-testid="witness-next"]');
  await page.keyboard.press("Enter");
  assertEq(Object.fromEntries(await highlighted())[w[w.length - 1]], "current", "Next works from the keyboard");
  // Steps are focusable; Enter shows what the hover tooltip shows (tool, inputs, emits).
  await page.focus(step("finish"));
  await page.keyboard.press("Enter");
  const details = await page.locator('[data-testid="node-details"]').innerText();
  assert(details.includes("approved") && details.includes("log"), `step details: ${details}`);
  assert(!/null/.test(details), `no stray "null" in the step details: ${details}`);
  await page.click(place("checked"));
  const eventDetails = await page.locator('[data-testid="node-details"]').innerText();
  assert(eventDetails.includes("check") && !/null/.test(eventDetails), `event details: ${eventDetails}`);
  const tip = await page.locator(`${step("check")} title`).textContent();
  assert(tip.includes("tool: echo") && tip.includes("amount"), `tooltip of check: ${tip}`);
});

await check("explain shows the plan in words", async () => {
  await open(page, "#/plans/fanout");
  await page.click('[data-testid="explain"]');
  const text = await page.locator('[data-testid="explain-text"]').innerText({ timeout: 30000 });
  assert(text.includes("merge") || text.includes("fanout"), `explanation names the plan's parts: ${text.slice(0, 200)}`);
});

await check("instances list filters by status", async () => {
  await open(page, "#/instances?status=completed");
  await page.locator('[data-testid="instances-table"] tbody tr').first().waitFor({ timeout: 10000 });
  const rows = await page.locator('[data-testid="instances-table"] tbody tr').allInnerTexts();
  assert(rows.length >= 2, `both completed instances are listed: ${rows.length}`);
  assert(rows.every((r) => r.includes("completed")), "every row is completed");
  await shot(page, "09-instances");
});

await check("generate page shows the generated plan's net and verdict before it is registered", async () => {
  // The model's answer is stubbed in the browser (no LLM here); /v1/analyze is the real server.
  const plan = example("fanout.json");
  plan.plan_name = "generated-fanout";
  await page.route("**/v1/generate", (route) => route.fulfill({
    status: 200, contentType: "application/json",
    body: JSON.stringify({ plan, rounds: [{ round: 1, findings: [], feedback: null }], findings: [], attempts: 1 }),
  }));
  await open(page, "#/generate");
  await page.fill('[data-testid="instruction"]', "Check ten shards in parallel, then merge.");
  await page.click('[data-testid="generate"]');
  await page.locator('[data-testid="generated-net"] [data-testid="net"]').waitFor({ timeout: 10000 });
  assertEq(await page.locator('[data-testid="generated-net"] [data-testid^="step-"]').count(), 11, "the generated net's steps");
  await page.waitForFunction(() => document.querySelector('[data-testid="generated-verdict"]')?.getAttribute("data-verdict"), null, { timeout: 10000 });
  assertEq(await page.locator('[data-testid="generated-verdict"]').getAttribute("data-verdict"), "sound", "verdict of the generated plan");
  const listed = await apiCall("/v1/plans");
  assert(!(listed.plans || []).some((p) => p.name === "generated-fanout"), "nothing is registered before the button");
  await shot(page, "10a-generate-net");
  await page.unroute("**/v1/generate");
  // A malformed generated plan: the page shows the findings and an empty net, and does not break.
  await page.route("**/v1/generate", (route) => route.fulfill({
    status: 200, contentType: "application/json",
    body: JSON.stringify({ plan: { plan_name: "bad", events: 3, steps: { a: null, b: { on: 5, emits: [null, 7] } } }, rounds: [], findings: [], attempts: 1 }),
  }));
  await page.click('[data-testid="generate"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="generated-verdict"]')?.hasAttribute("data-verdict"), null, { timeout: 10000 });
  assert((await page.locator('[data-testid="generated-net"]').innerText()).length >= 0, "the net panel is there");
  assert(/L004/.test(await page.locator("main").innerText()), "the load finding is shown");
  await page.unroute("**/v1/generate");
});

await check("generate page reports an unavailable LLM or shows rounds", async () => {
  await open(page, "#/generate");
  await page.fill('[data-testid="instruction"]', "Check stock and charge the card in parallel, then confirm.");
  await page.click('[data-testid="generate"]');
  await page.waitForFunction(() =>
    document.querySelector('[data-testid="llm-unavailable"]') || document.querySelector('[data-testid="rounds"]') || document.querySelector('[data-testid="problem"]'),
    null, { timeout: 120000 });
  if (await page.locator('[data-testid="llm-unavailable"]').count())
    assert(await page.locator('[data-testid="generate"]').isDisabled(), "Generate is disabled without an LLM");
  await shot(page, "10-generate");
});

await check("narrow window: the net panel and side panel stack", async () => {
  await page.setViewportSize({ width: 420, height: 860 });
  await open(page, `#/instances/${encodeURIComponent(fanoutInstance)}`);
  await page.locator(step("merge")).waitFor({ timeout: 10000 });
  const [net, side] = await Promise.all([page.locator(".net-panel").boundingBox(), page.locator("aside.side").boundingBox()]);
  assert(side.y >= net.y + net.height - 1, "side panel below the net");
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert(overflow <= 0, `no horizontal page scroll (${overflow}px)`);
  await shot(page, "11-narrow-instance");
  await open(page, "#/plans/deadlock");
  await page.locator('[data-testid="witness"]').waitFor({ timeout: 10000 });
  await shot(page, "12-narrow-plan");
  await page.setViewportSize({ width: 1280, height: 800 });
});

await check("dark colour scheme follows the system setting", async () => {
  await page.emulateMedia({ colorScheme: "dark" });
  await open(page, `#/instances/${encodeURIComponent(fanoutInstance)}`);
  await page.locator(step("merge")).waitFor({ timeout: 10000 });
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const [r, g, b] = bg.match(/\d+/g).map(Number);
  assert(r + g + b < 150, `dark background: ${bg}`);
  await shot(page, "13-dark-instance");
  await page.emulateMedia({ colorScheme: "light" });
});


for (const n of [50, 300]) {
  await check(`a ${n}-step plan at 1024 px: readable at fit, collapsed chains, minimap, search and focus`, async () => {
    await page.setViewportSize({ width: 1024, height: 768 });
    const plan = bigPlan(n);
    await apiCall("/v1/plans", { body: plan });
    const steps = Object.keys(plan.steps);
    const deep = steps[steps.length - 1];
    const mid = steps[Math.floor(steps.length * 0.6)];
    await open(page, `#/plans/${plan.plan_name}`);
    await page.locator('[data-testid="net"]').waitFor({ timeout: 10000 });
    await page.waitForFunction(() => document.querySelector('[data-testid="minimap"]')?.hasAttribute("data-fits"), null, { timeout: 10000 });
    const st = await netState(page);
    assert(st.labelPx >= 8.95, `labels at fit are ${st.labelPx.toFixed(1)} px (≥ 9)`);
    assert(st.labelBoxPx >= 9, `a label's box is ${st.labelBoxPx.toFixed(1)} px tall`);
    assert(st.overflow <= 0, `no horizontal page scroll at 1024 px (${st.overflow}px)`);
    assert(st.panelRight <= 1024, `the net panel ends inside the window (${st.panelRight})`);
    assert(st.fits || st.minimap, "the whole graph is visible, or the minimap is there to reach the rest");
    assert(st.chains > 0 && st.steps + st.chains < n, `linear chains are collapsed (${st.steps} steps + ${st.chains} chains for ${n})`);
    // Long nets are cut into rows as wide as the view: no sideways panning at fit.
    assert(st.rows > 1 && st.fitsWidth, `wrapped into ${st.rows} rows that fit the width`);
    await shot(page, `14-plan-${n}-steps-fit`);
    // Expanding the chains draws every step; collapsing them again reduces the nodes.
    await page.click('[data-testid="net-collapse"]');
    const open_ = await netState(page);
    assertEq(open_.steps, n, "expanded: every step drawn");
    assertEq(open_.chains, 0, "expanded: no chain");
    assert(open_.labelPx >= 8.95, `labels stay readable expanded (${open_.labelPx.toFixed(1)} px)`);
    await page.click('[data-testid="net-collapse"]');
    assert((await netState(page)).steps + st.chains < n, "collapsed again");
    // Search finds a step deep in the plan (inside a collapsed chain), centres and marks it.
    assert(!(await page.locator(step(deep)).count()) || !(await inNetView(page, step(deep))), `${deep} is not in view before the search`);
    await page.fill('[data-testid="net-search"]', deep);
    await page.press('[data-testid="net-search"]', "Enter");
    await page.waitForFunction((sel) => document.querySelector(sel)?.getAttribute("data-found") === "true", step(deep), { timeout: 5000 });
    assert(await inNetView(page, step(deep)), `${deep} is inside the visible net after the search`);
    assertEq(await page.locator('[data-testid="net-search-result"]').getAttribute("data-found"), deep, "the result names it");
    await shot(page, `15-plan-${n}-steps-search`);
    // A click on a chain expands it in place.
    const chainsBefore = (await netState(page)).chains;
    if (chainsBefore) {
      const chain = page.locator('[data-testid="chain"]').first();
      const members = Number(await chain.getAttribute("data-members"));
      await chain.click();
      const after = await netState(page);
      assertEq(after.chains, chainsBefore - 1, "one chain fewer");
      assert(after.steps >= members, `its ${members} steps are drawn`);
    }
    // Focus on a step's neighbourhood: only it and the steps next to it.
    await page.fill('[data-testid="net-search"]', mid);
    await page.press('[data-testid="net-search"]', "Enter");
    await page.selectOption('[data-testid="net-focus-hops"]', "1");
    await page.click('[data-testid="net-focus"]');
    const f = await netState(page);
    assert(f.steps >= 2 && f.steps <= 4, `1 hop around ${mid}: ${f.steps} steps`);
    assert(await page.locator(step(mid)).count(), `${mid} is drawn`);
    assert(f.fits, "the neighbourhood fits the view");
    await shot(page, `16-plan-${n}-steps-focus`);
    await page.click('[data-testid="net-show-all"]');
    assert((await netState(page)).steps > f.steps, "Show all leaves the focus");
    // The keyboard pans a net taller than its view.
    await page.click('[data-testid="zoom-fit"]');
    await page.focus('[data-testid="net-scroll"]');
    await page.keyboard.press("Home");
    await page.waitForFunction(() => document.querySelector('[data-testid="net-scroll"]').scrollTop === 0, null, { timeout: 5000 });
    await page.keyboard.press("PageDown");
    await page.waitForFunction(() => document.querySelector('[data-testid="net-scroll"]').scrollTop > 100, null, { timeout: 5000 });
    // Ctrl+wheel zooms in.
    const z0 = await page.locator('[data-testid="zoom-level"]').innerText();
    await page.locator('[data-testid="net-scroll"]').hover();
    await page.keyboard.down("Control");
    await page.mouse.wheel(0, -200);
    await page.keyboard.up("Control");
    assert((await page.locator('[data-testid="zoom-level"]').innerText()) !== z0, "Ctrl+wheel zooms");
    await page.setViewportSize({ width: 1280, height: 800 });
  });
}

await check("a 50-step instance: its timeline, its net, and readable labels on the instance page", async () => {
  await page.setViewportSize({ width: 1024, height: 768 });
  const started = await apiCall("/v1/instances", { body: { plan: "big-50", input: { run: "e2e" } } });
  await open(page, `#/instances/${encodeURIComponent(started.id)}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "completed", null, { timeout: 30000 });
  await page.waitForFunction(() => document.querySelectorAll(".tl-bar").length === 50, null, { timeout: 10000 });
  const st = await netState(page);
  assert(st.labelPx >= 8.95 && st.overflow <= 0, `readable (${st.labelPx.toFixed(1)} px) without page overflow (${st.overflow})`);
  await shot(page, "17-instance-50-steps");
  await page.setViewportSize({ width: 1280, height: 800 });
});

await check("a failure's whole reason is shown, and an event the instance awaits is the default to send", async () => {
  const reason = "the payment provider refused the card: " + "details ".repeat(40) + "END-OF-REASON";
  await apiCall("/v1/plans", { body: {
    plan_name: "ui-long-failure", graph_type: "acyclic",
    events: { start: {}, done: { kind: "output" } },
    steps: { charge: { on: ["start"], action: "fail", args: { message: reason }, emits: ["done"] } },
  } });
  const started = await apiCall("/v1/instances", { body: { plan: "ui-long-failure", input: {} } });
  await open(page, `#/instances/${encodeURIComponent(started.id)}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="instance-status"]')?.textContent === "failed", null, { timeout: 20000 });
  await page.locator('[data-testid="failed-firings"]').waitFor({ timeout: 10000 });
  for (const sel of ['[data-testid="failed-firings"]', '[data-testid="failure"]']) {
    const box = page.locator(sel);
    const text = await box.innerText();
    assert(text.includes("END-OF-REASON"), `${sel} shows the whole reason: ${text.slice(-80)}`);
    const clipped = await box.evaluate((e) => e.scrollWidth > e.clientWidth + 1);
    assert(!clipped, `${sel} is not cut off`);
  }
  await shot(page, "18-instance-long-failure");
});

await check("lifecycle events on the stream: their types compare in either form", async () => {
  // Frames are named by the event type; the reverse-DNS (`dev.weft.…`) and short forms are both
  // listened to, and every comparison strips `dev.weft.` (shortType).
  await open(page, "#/plans");
  const started = await apiCall("/v1/instances", { body: { plan: "fanout-gated", input: { dataset: "sse" } } });
  const names = ["plan.started", "plan.step.finished", "plan.waiting", "plan.completed"].flatMap((t) => [t, `dev.weft.${t}`]);
  const url = `/v1/events/stream?instance=${encodeURIComponent(started.id)}${args.token ? `&access_token=${encodeURIComponent(args.token)}` : ""}`;
  const seen = page.evaluate(([url, names]) => new Promise((resolve) => {
    const es = new EventSource(url);
    const types = [];
    const done = () => (es.close(), resolve(types));
    for (const n of names) es.addEventListener(n, (e) => {
      let t = n;
      try { t = JSON.parse(e.data).type || n; } catch { /* the frame name then */ }
      types.push(t);
      if (t.replace(/^dev\.weft\./, "") === "plan.completed") done();
    });
    es.addEventListener("open", () => types.push("open"));
    setTimeout(done, 20000);
  }), [url, names]);
  await new Promise((r) => setTimeout(r, 1000)); // the stream connects
  const res = await fetch(`${args.url}/v1/events`, {
    method: "POST",
    headers: { "Content-Type": "application/cloudevents+json", ...(args.token ? { Authorization: `Bearer ${args.token}` } : {}) },
    body: JSON.stringify({ specversion: "1.0", id: `e2e-sse-${Date.now()}`, source: "e2e", type: "approve", weftinstance: started.id }),
  });
  assert(res.ok, `event accepted: ${res.status}`);
  const types = await seen;
  const short = types.map(shortType);
  assert(short.includes("plan.completed"), `plan.completed arrives (as ${types.join(", ")})`);
  assert(short.includes("plan.step.finished"), "plan.step.finished arrives");
});

await check("quotas page: a server without [budget] quotas says none are configured", async () => {
  const q = await apiCall("/v1/quotas");
  assertEq([q.tenant, q.plans, q.plan_limits, q.planner], [null, {}, null, null], "this server has no quotas");
  await open(page, "#/quotas");
  await page.locator('[data-testid="quotas-none"]').waitFor({ timeout: 10000 });
  assert((await page.locator('[data-testid="quotas-none"]').innerText()).includes("No quotas are configured"), "the message");
  assertEq(await page.locator('[data-testid^="quota-item-"]').count(), 0, "no counts");
  await shot(page, "19-quotas-none");
});

await check("no script errors in the page", async () => {
  // Expected answers the UI handles: 401 (token prompt) and 503 (generate without an LLM).
  const real = consoleErrors.filter((e) => !/status of (401|503)\b/.test(e));
  assertEq(real, [], "console errors");
});

await finish(browser, "ui-e2e");
