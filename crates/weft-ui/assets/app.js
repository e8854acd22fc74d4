// Entry module: a hash router (#/plans, #/plans/NAME, #/instances, #/instances/ID, #/quotas,
// #/generate) that renders one view into <main>. A view returns a cleanup function (closes
// streams and timers) that runs before the next view renders.
import { h, clear, problemBox } from "./util.js";
import { plansView, planView } from "./plans.js";
import { instancesView, instanceView } from "./instances.js";
import { generateView } from "./generate.js";
import { quotasView } from "./quotas.js";

let cleanup = null;

function parse() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query) };
}

async function route() {
  if (cleanup) {
    try {
      cleanup();
    } catch {
      /* a view's cleanup never blocks navigation */
    }
    cleanup = null;
  }
  const main = document.getElementById("main");
  const toastEl = document.getElementById("toast");
  if (toastEl) toastEl.className = "";
  clear(main);
  const { parts, params } = parse();
  for (const a of document.querySelectorAll("nav a")) {
    const active = a.getAttribute("href") === `#/${parts[0] || "plans"}`;
    if (active) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    if (parts[0] === "instances" && parts[1]) cleanup = await instanceView(main, parts[1], params);
    else if (parts[0] === "instances") cleanup = await instancesView(main, params);
    else if (parts[0] === "plans" && parts[1]) cleanup = await planView(main, parts[1], params);
    else if (parts[0] === "generate") cleanup = await generateView(main, params);
    else if (parts[0] === "quotas") cleanup = await quotasView(main, params);
    else cleanup = await plansView(main, params);
  } catch (err) {
    clear(main);
    main.append(h("h1", {}, "Something went wrong"), problemBox(err));
  }
}

// Module scripts run after the document is parsed, so the first route can render at once.
window.addEventListener("hashchange", route);
if (!location.hash) history.replaceState(null, "", "#/plans");
route();
