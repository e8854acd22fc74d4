// Small DOM helpers shared by the views: an element builder, formatting, toasts.

/**
 * `h("button", {class: "x", onclick: f, "data-testid": "y"}, "text", child…)` → an element.
 * Attributes set to null/false are skipped; `on…` functions become listeners.
 */
export function h(tag, attrs = {}, ...children) {
  const el = tag.startsWith("svg:")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value" && "value" in el) el.value = v;
    // Through the CSSOM: the server's Content-Security-Policy refuses style attributes.
    else if (k === "style") el.style.cssText = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

export function fmtTime(ms) {
  if (ms === null || ms === undefined) return "–";
  const d = new Date(ms);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** A lifecycle event's type without its `dev.weft.` prefix: `plan.step.finished` either way. */
export function shortType(t) {
  return String(t ?? "").replace(/^dev\.weft\./, "");
}

/** Is `t` the lifecycle event type `name`? Compares in either form (short or reverse-DNS). */
export function isType(t, name) {
  return shortType(t) === shortType(name);
}

/** Both names of a lifecycle event type: `[short, dev.weft.short]`. */
export function eventTypeForms(t) {
  const short = shortType(t);
  return [short, `dev.weft.${short}`];
}

export function json(v) {
  return JSON.stringify(v, null, 2);
}

export function badge(status, attrs = {}) {
  return h("span", { class: `badge badge-${String(status).replace(/[^a-z_]/gi, "")}`, ...attrs }, status);
}

let toastTimer = null;
/** A short message in the live region (errors too: they also stay in the view that failed). */
export function toast(msg, kind = "info") {
  const el = document.getElementById("toast");
  if (!el) return;
  el.textContent = msg;
  el.className = `show ${kind}`;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (el.className = ""), 4000);
}

/** A problem or error as a readable block: code, detail, hint, findings. */
export function problemBox(err) {
  const p = err && err.problem ? err.problem : {};
  return h(
    "div",
    { class: "problem", role: "alert", "data-testid": "problem" },
    h("strong", {}, err.code ? `${err.code}: ` : "", err.message || String(err)),
    p.hint ? h("div", { class: "muted" }, "Hint: ", p.hint) : null,
    Array.isArray(p.findings) && p.findings.length ? findingsList(p.findings) : null,
  );
}

/** Findings as a list: severity, code, message, pointer, hint. */
export function findingsList(findings, attrs = {}) {
  if (!findings || !findings.length)
    return h("p", { class: "muted", "data-testid": "findings-empty" }, "No findings.");
  const rank = { error: 0, warning: 1, info: 2 };
  const sorted = findings
    .map((f, i) => [f, i])
    .sort(([a, i], [b, j]) => (rank[a.severity] ?? 3) - (rank[b.severity] ?? 3) || i - j)
    .map(([f]) => f);
  return h(
    "ul",
    { class: "findings", "data-testid": "findings", ...attrs },
    sorted.map((f) =>
      h(
        "li",
        { class: `finding sev-${f.severity || "info"}` },
        h("span", { class: "sev" }, f.severity || "info"),
        " ",
        h("code", {}, f.code || ""),
        " ",
        f.message || f.title || JSON.stringify(f),
        f.pointer || f.path ? h("span", { class: "muted" }, ` at ${f.pointer || f.path}`) : null,
        f.hint ? h("div", { class: "muted hint" }, f.hint) : null,
      ),
    ),
  );
}

/** `once` run one at a time: a call while it runs makes it run once more afterwards (a burst
 * of calls is one more run), until `stopped()`. Errors reach the caller of that run. */
export function coalesced(once, stopped) {
  let busy = false;
  let again = false;
  return async () => {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      do {
        again = false;
        await once();
      } while (again && !stopped());
    } finally {
      busy = false;
    }
  };
}
