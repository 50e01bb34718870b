// What tether's pages share (the gateway's chat page, the operator page): element lookup, the
// status line, and JSON calls that carry the page's token. Loaded before each page's own script,
// with the page's sessionStorage key for its token as data-token-key. The token goes out as an
// Authorization header on each fetch, never as a cookie, so no other site can act with it.
"use strict";

const TOKEN_KEY = document.currentScript.dataset.tokenKey;
const $ = (id) => document.getElementById(id);

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function notice(text, ok = false) {
  $("notice").textContent = text;
  $("notice").className = ok ? "ok" : "";
}

// The JSON answer of `method path` (with `body` as JSON, if given); a refusal throws an Error
// whose message is the server's own `error` text (else the HTTP status) and whose `status` is
// the HTTP status.
async function api(method, path, body) {
  const options = { method, headers: { Authorization: "Bearer " + token() } };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let data = null;
  try { data = await response.json(); } catch (_) { /* not JSON */ }
  if (!response.ok) {
    const reason = data && data.error ? data.error : response.statusText;
    const error = new Error(`${response.status}: ${reason}`);
    error.status = response.status;
    throw error;
  }
  return data;
}
