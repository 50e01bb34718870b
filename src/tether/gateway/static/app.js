// The tether gateway's chat page: submit a message to a room, watch its reply arrive.
// No framework and no build step. Text is only ever inserted with textContent.
"use strict";

const TOKEN_KEY = "tether-gateway-token";
const WAIT_S = 25;
const $ = (id) => document.getElementById(id);
const watching = new Set();

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function notice(text, ok = false) {
  $("notice").textContent = text;
  $("notice").className = ok ? "ok" : "";
}

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

const PENDING = {
  queued: "waiting for an agent…",
  leased: "an agent is picking it up…",
  acked: "an agent is working on it…",
};

function render(message) {
  let item = document.querySelector(`li[data-id="${CSS.escape(message.id)}"]`);
  if (!item) {
    item = document.createElement("li");
    item.className = "message";
    item.dataset.id = message.id;
    const from = document.createElement("div");
    from.className = "from";
    from.textContent = message.sender;
    const text = document.createElement("div");
    text.className = "text";
    text.textContent = message.text;
    const reply = document.createElement("div");
    reply.className = "reply";
    item.append(from, text, reply);
    $("messages").append(item);
    item.scrollIntoView({ block: "end" });
  }
  const reply = item.querySelector(".reply");
  reply.dataset.status = message.status;
  if (message.status === "answered") {
    reply.textContent = message.reply;
    if (message.worker) reply.title = "answered by " + message.worker;
  } else if (message.status === "closed" && message.reason) {
    reply.textContent = "No reply: " + message.reason;
    reply.dataset.status = "failed";
  } else if (message.status === "closed") {
    reply.textContent = "(closed without a reply)";
  } else {
    reply.textContent = PENDING[message.status] || message.status;
  }
  return message.status === "answered" || message.status === "closed";
}

async function watch(id) {
  if (watching.has(id)) return;
  watching.add(id);
  let pause = 1000;
  try {
    for (;;) {
      try {
        const message = await api("GET", `/v1/messages/${encodeURIComponent(id)}?wait=${WAIT_S}`);
        pause = 1000;
        if (render(message)) return;
      } catch (error) {
        if (error.status && error.status < 500) {
          notice(`cannot follow message ${id}: ${error.message}`);
          return;
        }
        notice(`connection problem, retrying: ${error.message}`);
        await new Promise((resolve) => setTimeout(resolve, pause));
        pause = Math.min(pause * 2, 30000);
      }
    }
  } finally {
    watching.delete(id);
  }
}

async function loadRoom() {
  $("messages").replaceChildren();
  if (!token()) { notice("Paste the gateway token to start."); return; }
  try {
    const room = $("room").value.trim();
    const data = await api("GET", `/v1/messages?room=${encodeURIComponent(room)}&limit=50`);
    for (const message of data.messages) {
      if (!render(message)) watch(message.id);
    }
    notice(`Connected to room ${room}.`, true);
  } catch (error) {
    notice(`Cannot load the room: ${error.message}`);
  }
}

async function send(event) {
  event.preventDefault();
  const text = $("text").value;
  if (!text.trim()) return;
  if (!token()) { notice("Paste the gateway token first."); return; }
  $("send").disabled = true;
  try {
    const body = {
      room: $("room").value.trim(),
      sender: $("sender").value.trim(),
      text,
      priority: $("priority").value,
    };
    const created = await api("POST", "/v1/messages", body);
    render({ id: created.id, sender: body.sender, text, status: created.status });
    $("text").value = "";
    notice("Sent.", true);
    watch(created.id);
  } catch (error) {
    notice(`Not sent: ${error.message}`);
  } finally {
    $("send").disabled = false;
    $("text").focus();
  }
}

function start() {
  // A link may carry the token in its fragment (never sent to the server): keep it, hide it.
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, fragment.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  $("token").value = token();
  $("settings").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    loadRoom();
  });
  $("compose").addEventListener("submit", send);
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("compose").requestSubmit();
    }
  });
  loadRoom();
}

start();
