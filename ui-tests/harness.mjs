// What every browser test script of the web UI shares (e2e.mjs, quotas.mjs), so each script
// holds only its checks: the command line (URL [--weft BIN] [--store STORE] [--token TOKEN]),
// Debian's headless Chromium through playwright-core, API calls with the token, opening a view
// through the UI's token prompt, screenshots in $WEFT_UI_ARTIFACTS (default
// target/ui-artifacts/), and `check` with the "N passed, M failed" summary that
// crates/weft-cli/tests/ui_e2e.rs looks for.
import { chromium } from "playwright-core";
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

function parseArgs(argv) {
  const out = { url: null, weft: process.env.WEFT_BIN || null, store: process.env.WEFT_STORE || null, token: process.env.WEFT_UI_TOKEN || null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--weft") out.weft = argv[++i];
    else if (a === "--store") out.store = argv[++i];
    else if (a === "--token") out.token = argv[++i];
    else if (!out.url) out.url = a;
    else throw new Error(`unexpected argument ${a}`);
  }
  if (!out.url) throw new Error(`usage: node ${process.argv[1]} URL [--weft BIN] [--store STORE] [--token TOKEN]`);
  out.url = out.url.replace(/\/$/, "");
  return out;
}

export const args = parseArgs(process.argv.slice(2));
export const artifacts = resolve(process.env.WEFT_UI_ARTIFACTS || join(root, "target", "ui-artifacts"));
mkdirSync(artifacts, { recursive: true });

const LAUNCH = {
  executablePath: process.env.WEFT_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
};

/** The browser and one page at 1280×800, with the page's console errors and script errors. */
export async function launch() {
  const browser = await chromium.launch(LAUNCH);
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const consoleErrors = [];
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  return { browser, page, consoleErrors };
}

/** The server's JSON answer at `path` (POST when `opts.body` is given); throws on non-2xx. */
export async function apiCall(path, opts = {}) {
  const headers = { Accept: "application/json" };
  if (args.token) headers.Authorization = `Bearer ${args.token}`;
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(args.url + path, {
    method: opts.method || (opts.body !== undefined ? "POST" : "GET"),
    headers,
    body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${opts.method || "GET"} ${path}: HTTP ${res.status} ${text.slice(0, 800)}`);
  return data;
}

/** A plan of examples/ as a document. */
export const example = (p) => JSON.parse(readFileSync(join(root, "examples", p), "utf8"));

export function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}

export function assertEq(a, b, msg) {
  const ja = JSON.stringify(a);
  const jb = JSON.stringify(b);
  if (ja !== jb) throw new Error(`${msg}: expected ${jb}, got ${ja}`);
}

export async function shot(page, name) {
  const file = join(artifacts, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  console.log(`  screenshot ${file}`);
}

/** Opens the UI at `hash`, answering the token prompt when the server has tokens. */
export async function open(page, hash) {
  await page.goto(`${args.url}/${hash}`);
  const stored = await page.evaluate(() => sessionStorage.getItem("weft.token"));
  if (args.token && !stored) {
    const dlg = page.locator("#token-dialog");
    try {
      await dlg.waitFor({ state: "visible", timeout: 3000 });
      await page.fill('[data-testid="token-input"]', args.token);
      await page.click('[data-testid="token-submit"]');
    } catch {
      /* already authenticated in this tab (sessionStorage) */
    }
  }
}

const results = [];

/** Runs one named check; a failure is reported and counted, and the next check runs. */
export async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push([name, true]);
    console.log(`ok - ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    results.push([name, false]);
    console.log(`not ok - ${name}\n  ${String(e && e.stack || e).replace(/\n/g, "\n  ")}`);
  }
}

/** Closes the browser, prints `<suite>: N passed, M failed` and exits 0 when none failed. */
export async function finish(browser, suite) {
  await browser.close();
  const passed = results.filter((r) => r[1]).length;
  const failed = results.length - passed;
  console.log(`${suite}: ${passed} passed, ${failed} failed`);
  process.exit(failed || !results.length ? 1 : 0);
}
