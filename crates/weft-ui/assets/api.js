// The one place the UI talks to the server (the HTTP API of /work/api-contract.md): JSON
// requests, problem+json errors, and the tenant token. A 401 opens the token prompt; the token
// lives in sessionStorage and goes out as `Authorization: Bearer` (and `?access_token=` for
// EventSource, which cannot set headers).

const TOKEN_KEY = "weft.token";

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(t) {
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage disabled: the token lasts for this request only */
  }
}

/** An error answer: `status`, and the problem document's `code`, `title`, `detail`, `hint`. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code || `http_${status}`;
    this.problem = problem;
  }
}

let pendingPrompt = null;

/** Shows the token dialog once (concurrent 401s share it); resolves when a token is entered. */
export function askToken(message) {
  if (pendingPrompt) return pendingPrompt;
  pendingPrompt = new Promise((resolve) => {
    const dlg = document.getElementById("token-dialog");
    const form = dlg.querySelector("form");
    const input = dlg.querySelector("input");
    dlg.querySelector("[data-role=message]").textContent =
      message || "This server requires an API token.";
    input.value = "";
    const done = (ev) => {
      ev.preventDefault();
      const t = input.value.trim();
      if (!t) return;
      setToken(t);
      form.removeEventListener("submit", done);
      dlg.close();
      pendingPrompt = null;
      resolve(t);
    };
    form.addEventListener("submit", done);
    dlg.showModal();
    input.focus();
  });
  return pendingPrompt;
}

/**
 * `api(path, {method, body, contentType})` → parsed JSON. Throws `ApiError` on a non-2xx answer
 * (after the token prompt on 401).
 */
export async function api(path, opts = {}) {
  for (let attempt = 0; attempt < 5; attempt++) {
    const headers = { Accept: "application/json" };
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    let body;
    if (opts.body !== undefined) {
      headers["Content-Type"] = opts.contentType || "application/json";
      body = typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
    }
    const res = await fetch(path, { method: opts.method || (body ? "POST" : "GET"), headers, body });
    const text = await res.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = { detail: text };
      }
    }
    if (res.status === 401) {
      setToken("");
      await askToken(token ? "That token was not accepted. Enter another." : undefined);
      continue;
    }
    if (!res.ok) throw new ApiError(res.status, data || {});
    return data;
  }
  throw new ApiError(401, { code: "unauthorized", detail: "no accepted token" });
}

/** A GET URL for EventSource, with the token as a query parameter when there is one. */
export function streamUrl(path) {
  const token = getToken();
  if (!token) return path;
  return path + (path.includes("?") ? "&" : "?") + "access_token=" + encodeURIComponent(token);
}

export const enc = encodeURIComponent;
