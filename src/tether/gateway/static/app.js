// The tether gateway's chat page: submit a message to a room, watch its reply arrive.
// No framework and no build step. Text is only ever inserted with textContent.
// A message that ends without a reply shows a plain sentence and its id to quote; the reason
// (often an exception's text) stays with the operators: the gateway's log, the API's
// `reason` field, the bridge's store.
// An agent that asks takes turns of its own: each question, then its reply, are items of the
// list placed by time, so the conversation reads message, question, the person's answer (the
// room's next message, which gets no reply of its own), reply.
"use strict";
// $, token, notice and api come from base.js (loaded first).

const WAIT_S = 25;
const watching = new Set();

const PENDING = {
  queued: "waiting for an agent…",
  leased: "an agent is picking it up…",
  acked: "queued for an agent…",
};

function part(item, cls, tag = "div") {
  let el = item.querySelector("." + cls);
  if (!el) {
    el = document.createElement(tag);
    el.className = cls;
    item.append(el);
  }
  return el;
}

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString();
}

function pane() { return document.querySelector("main"); }

function nearNewest() {
  // the person is reading the newest messages (not scrolled up into the history)
  const main = pane();
  return main.scrollHeight - main.scrollTop - main.clientHeight < 80;
}

function showNewest() {
  const main = pane();
  main.scrollTop = main.scrollHeight;
}

function label(...parts) {
  return parts.filter((p) => p).join(" · ");
}

function elapsed(since) {
  const s = Math.max(0, Math.round(Date.now() / 1000 - since));
  return s < 120 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

function showLife(life, message) {
  // the message's life line: working since when, and the agent's latest status text
  if (message.working_since == null) {
    delete life.dataset.since;
    life.textContent = "";
    life.hidden = true;
    return;
  }
  life.hidden = false;
  life.dataset.since = String(message.working_since);
  life.dataset.progress = message.progress || "";
  tickLife(life);
}

function tickLife(life) {
  const since = Number(life.dataset.since);
  const status = life.dataset.progress ? ` · ${life.dataset.progress}` : "";
  const attempt = life.dataset.attempt > 1 ? ` (attempt ${life.dataset.attempt})` : "";
  life.textContent = `working since ${clock(since)} (${elapsed(since)})${attempt}${status}`;
}

// The item that shows a message's reply: the message's own, or, once its agent asked, an item
// of its own placed after the person's answers (its parts move there).
function replyBox(item, message) {
  if (!(message.messages || []).length && !item.dataset.asked) return item;
  item.dataset.asked = "1";
  let box = document.querySelector(`li[data-reply-of="${CSS.escape(message.id)}"]`);
  if (!box) {
    box = document.createElement("li");
    box.className = "message agent";
    box.dataset.replyOf = message.id;
    for (const cls of ["life", "stall", "reply", "meta"]) box.append(part(item, cls));
    $("messages").append(box);
  }
  box.dataset.at = String(message.answered_at ?? Infinity);  // pending: after everything
  return box;
}

function showQuestions(message) {
  for (const m of message.messages || []) {
    const key = `${message.id}~${m.seq}`;
    if (document.querySelector(`li[data-question-of="${CSS.escape(key)}"]`)) continue;
    const li = document.createElement("li");
    li.className = "message agent";
    li.dataset.questionOf = key;
    li.dataset.asker = message.id;
    li.dataset.at = String(m.at);
    const question = document.createElement("div");
    question.className = "question";
    question.textContent = m.body;  // the person answers with their next message
    li.append(question);
    $("messages").append(li);
  }
}

// Put the items in time order, then say what each asking agent waits for: a question the room's
// next message has not answered yet waits for the person; that message is the answer, and
// shows no reply of its own (its close is the agent taking it, not a failure).
function arrange() {
  const list = $("messages");
  const items = [...list.children];
  const sorted = [...items].sort((a, b) => Number(a.dataset.at) - Number(b.dataset.at));
  if (sorted.some((li, i) => li !== items[i])) list.replaceChildren(...sorted);
  const waiting = new Set();
  let asked = null;
  for (const li of sorted) {
    if (li.dataset.questionOf) {
      asked = li.dataset.asker;
      waiting.add(asked);
    } else if (!li.dataset.replyOf) {
      li.classList.toggle("answer", asked !== null && li.dataset.plainClose === "1");
      if (asked !== null) waiting.delete(asked);
      asked = null;
    }
  }
  for (const box of list.querySelectorAll("li[data-reply-of]")) {
    const reply = part(box, "reply");
    if (!(reply.dataset.status in PENDING)) continue;  // working, streaming or done: as shown
    reply.textContent = waiting.has(box.dataset.replyOf)
      ? "waiting for your answer to the question above…"
      : "your answer is with the agent…";
  }
}

function render(message) {
  let item = document.querySelector(`li[data-id="${CSS.escape(message.id)}"]`);
  const follow = !item || nearNewest();
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
    const life = document.createElement("div");
    life.className = "life";
    life.hidden = true;
    const stall = document.createElement("div");
    stall.className = "stall";
    stall.hidden = true;
    const reply = document.createElement("div");
    reply.className = "reply";
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.hidden = true;
    item.append(from, text, life, stall, reply, meta);
    item.dataset.at = String(Date.now() / 1000);  // until the gateway's time is known
    $("messages").append(item);
  }
  if (message.created_at != null) {
    part(item, "from").textContent = label(message.sender, clock(message.created_at));
    item.dataset.at = String(message.created_at);
  }
  if (message.text != null) part(item, "text").textContent = message.text;
  // a room's history cuts long messages; the whole one is a click away
  const whole = part(item, "whole", "button");
  whole.type = "button";
  whole.textContent = "Show the whole message";
  whole.hidden = !message.truncated;
  whole.onclick = () => showWhole(message.id);
  const done = message.status === "answered" || message.status === "closed";
  const plain = message.status === "closed" && !message.reason && message.reply == null;
  item.dataset.plainClose = plain ? "1" : "";
  showQuestions(message);
  const box = replyBox(item, message);
  const life = part(box, "life");
  const stall = part(box, "stall");
  const reply = part(box, "reply");
  const meta = part(box, "meta");
  life.dataset.attempt = String(message.attempt || 1);
  showLife(life, done ? {} : message);
  if (!done && message.stalled_s != null) {
    stall.hidden = false;
    stall.textContent =
      `Taking longer than usual: ${Math.round(message.stalled_s)} s in the bridge's hands` +
      (message.stalled_at ? ` at ${clock(message.stalled_at)}` : "") + ".";
  } else {
    stall.hidden = true;
    stall.textContent = "";
  }
  reply.dataset.status = message.status;
  const when = message.answered_at != null ? clock(message.answered_at) : "";
  const agent = message.status === "answered" ? message.worker || "an agent" : "";
  meta.textContent = done ? label(agent, when) : "";  // who answered, and when
  meta.hidden = !meta.textContent;
  if (message.status === "answered") {
    reply.textContent = message.reply;
  } else if (message.status === "closed" && message.reason) {
    reply.textContent =
      `No reply: something went wrong and this message was not answered (reference ${message.id}).`;
    reply.dataset.status = "failed";
  } else if (message.status === "closed") {
    reply.textContent = "(closed without a reply)";
  } else if (message.partial) {
    reply.textContent = message.partial;  // the reply as it is being written
    reply.dataset.status = "streaming";
  } else if (message.working_since != null) {
    reply.textContent = "an agent is working on it…";
    reply.dataset.status = "working";
  } else {
    reply.textContent = PENDING[message.status] || message.status;
  }
  arrange();
  if (follow) showNewest();
  return done;
}

async function showWhole(id) {
  try {
    render(await api("GET", `/v1/messages/${encodeURIComponent(id)}`));
  } catch (error) {
    notice(`Cannot show message ${id}: ${error.message}`);
  }
}

async function watch(id, rev = "-") {
  // one long poll at a time: it answers when anything shown changes (seen=rev; "-" matches
  // no view, so the first answer is at once), or at WAIT_S
  if (watching.has(id)) return;
  watching.add(id);
  let pause = 1000;
  try {
    for (;;) {
      try {
        const seen = `&seen=${encodeURIComponent(rev)}`;
        const message = await api(
          "GET", `/v1/messages/${encodeURIComponent(id)}?wait=${WAIT_S}${seen}`);
        pause = 1000;
        rev = message.rev;
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
      if (!render(message)) watch(message.id, message.rev);
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
    const tenant = $("tenant").value.trim();
    if (tenant) body.tenant = tenant;  // whose message: the store serves tenants in turn
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
  // ?tenant=acme prefills the tenant (a demo opens one tab per tenant)
  const tenant = new URLSearchParams(location.search).get("tenant");
  if (tenant) $("tenant").value = tenant;
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
  setInterval(() => document.querySelectorAll(".life[data-since]").forEach(tickLife), 1000);
}

start();
