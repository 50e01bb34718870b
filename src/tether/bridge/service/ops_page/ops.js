// The tether operator page: the custody store and the pool, live; retry a dead letter, cancel
// a task in flight, read a task's timeline. No framework and no build step; text is only ever
// inserted with textContent. The admin token stays in sessionStorage (this tab only).
"use strict";
// $, token, notice and api come from base.js (loaded first).

const POLL_MS = 1500;
let shownTask = "";
let timer = null;
let failing = true;  // until the first reading: then "connected" once

function age(seconds) {
  if (seconds == null) return "";
  const s = Math.max(0, seconds);
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// a run lost to a crash is no failed attempt: after one, the counter is shown as the run it is
function runWords(e) {
  if (!e.crash_count) return `attempt ${e.attempt}`;
  const crashes = e.crash_count === 1 ? "1 crash, not a failed attempt" : `${e.crash_count} crashes, not failed attempts`;
  return `run ${e.attempt} (${crashes})`;
}

// an overdue one (the store clamps it to 0) is due now, not "in 0.0 s"
function due(seconds) {
  return seconds <= 0 ? "due now" : `due in ${age(seconds)}`;
}

function idButton(id) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "id";
  b.textContent = id;
  b.addEventListener("click", () => showTask(id));
  return b;
}

function moveButton(move, id) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = move;
  b.textContent = move === "retry" ? "Retry" : "Cancel";
  b.addEventListener("click", () => operatorMove(move, id, b));
  return b;
}

// Rows keyed by task id: a row that stays keeps its elements (a button being clicked is not
// replaced under the pointer); only its cells' text changes.
function syncRows(tbody, items, key, cells, action) {
  const keep = new Set();
  items.forEach((item, index) => {
    const k = key(item);
    keep.add(k);
    let row = tbody.querySelector(`tr[data-id="${CSS.escape(k)}"]`);
    const values = cells(item);
    if (!row) {
      row = document.createElement("tr");
      row.dataset.id = k;
      values.forEach((_, i) => {
        const td = document.createElement("td");
        if (i === 0) td.append(idButton(k));
        row.append(td);
      });
      const last = document.createElement("td");
      if (action) last.append(moveButton(action, k));
      row.append(last);
    }
    values.forEach((value, i) => {
      if (i > 0 && row.children[i].textContent !== String(value)) row.children[i].textContent = value;
    });
    if (tbody.children[index] !== row) tbody.insertBefore(row, tbody.children[index] || null);
  });
  for (const row of [...tbody.children]) if (!keep.has(row.dataset.id)) row.remove();
}

function plainRows(tbody, rows) {
  tbody.replaceChildren(...rows.map((values) => {
    const tr = document.createElement("tr");
    for (const value of values) {
      const td = document.createElement("td");
      td.textContent = value == null ? "" : String(value);
      tr.append(td);
    }
    return tr;
  }));
}

function drawStore(view) {
  const status = view.status;
  plainRows($("counts"), Object.entries(status.counts).map(([state, count]) => {
    const oldest = view.oldest[state];
    return [state, count, oldest ? oldest.id : "", oldest ? age(oldest.age_s) : ""];
  }));
  $("retries").textContent = status.waiting_retries
    ? `${status.waiting_retries} pending task(s) wait out a retry backoff; the next is ${due(status.next_retry_in_s)}`
    : "";
  const told = status.dead_unreported ? `, ${status.dead_unreported} not yet reported to the gateway` : "";
  $("dead-count").textContent = `${status.counts.dead || 0} in the store${told}; newest first`;
  syncRows($("dead-rows"), status.dead_letters, (e) => e.id,
    (e) => [e.id, `${age(e.age_s)} ago`, runWords(e), e.reason || ""], "retry");
  syncRows($("suspect-rows"), status.suspect_tasks, (e) => e.id,
    (e) => [e.id, e.state, `${e.crash_count} (${e.crashes_alone} alone)`, runWords(e)], "cancel");
  // issue 37: quarantine deaths, when the status carries them
  const deaths = status.quarantine_deaths;
  $("quarantine").hidden = !Array.isArray(deaths);
  if (Array.isArray(deaths)) {
    syncRows($("quarantine-rows"), deaths, (e) => e.id,
      (e) => [e.id, age(e.age_s), e.attempt, e.reason || ""], "retry");
  }
  syncRows($("waiting-rows"), view.waiting, (e) => e.id,
    (e) => [e.id, e.room || "", e.waits_for || "", e.due_in_s == null ? "" : due(e.due_in_s)], "cancel");
  const flight = status.oldest_in_flight.filter((e) => e.state !== "result");
  syncRows($("flight-rows"), flight, (e) => e.id,
    (e) => [e.id, e.state, e.owner || "", age(e.age_s), runWords(e)], "cancel");
  drawLimits(view.limits || []);
  drawTenants(view.tenants || []);
  drawSchedules(view.schedules || [], view.events || []);
  drawVersions(view.versions);
  plainRows($("member-rows"), view.members.map((m) => [
    m.name, m.role, m.capacity, `${age(m.beat_age_s)} ago`, age(m.up_s),
  ]));
}

// issue 38: a key's rate, cap, permits held, runs waiting for one, and its pause
function drawLimits(limits) {
  const limited = (l) => l.rate_per_s != null;
  plainRows($("limit-rows"), limits.map((l) => [
    l.key,
    limited(l) ? `${+l.rate_per_s.toPrecision(3)}/s` : "-",
    limited(l) ? l.burst : "-",
    l.tokens == null ? "-" : l.tokens.toFixed(1),
    l.concurrency == null ? "-" : l.concurrency,
    l.in_flight,
    l.waiters,
    l.paused_for_s != null && l.paused_for_s > 0 ? `for ${age(l.paused_for_s)}` : "-",
  ]));
}

// issue 39: a tenant's weight, and its share of the turns while it and others have work pending
function drawTenants(tenants) {
  const busy = tenants.filter((t) => t.pending > 0).reduce((sum, t) => sum + t.weight, 0);
  plainRows($("tenant-rows"), tenants.map((t) => [
    t.tenant,
    t.weight,
    t.pending > 0 && busy > 0 ? `${Math.round((100 * t.weight) / busy)}%` : "-",
    t.pending,
  ]));
}

// issue 52: each schedule's next due time and last firing; the events kept for later waits
// issue 53: tasks in custody by the version their runs began under (drained: gone)
function drawVersions(versions) {
  $("versions").hidden = !Array.isArray(versions) || versions.length === 0;
  plainRows($("version-rows"), (versions || []).map((v) =>
    [v.version == null ? "none (unversioned, or nothing recorded)" : v.version, v.tasks]));
}

function drawSchedules(schedules, events) {
  plainRows($("schedule-rows"), schedules.map((s) => [
    s.name,
    s.when,
    s.room,
    s.paused ? "paused" : due(s.due_in_s),
    s.last_s == null ? "-" : `${age(s.last_s)} ago`,
    s.fired,
  ]));
  const rows = $("event-rows");
  plainRows(rows, events.map((e) => [e.id, e.key, `${age(e.age_s)} ago`, age(e.kept_s)]));
  events.forEach((e, i) => {  // an operator may drop a kept event: later waits do not take it
    const b = document.createElement("button");
    b.type = "button";
    b.className = "drop";
    b.textContent = "Drop";
    b.addEventListener("click", () => dropEvent(e.id, b));
    const td = document.createElement("td");
    td.append(b);
    rows.children[i].append(td);
  });
}

async function dropEvent(id, button) {
  if (!window.confirm(`Drop event ${id}? Runs that wait for its key later will not take it.`)) return;
  button.disabled = true;
  try {
    const done = await api("POST", `/ops/api/events/${encodeURIComponent(id)}/drop`, {});
    notice(done.detail, true);
  } catch (error) {
    notice(error.message);
  } finally {
    button.disabled = false;
  }
  refresh();
}

function drawStatus(status) {
  const health = status.health;
  $("health").textContent = health.ok ? "healthy" : `${health.status}: ${health.problems.join("; ")}`;
  $("health").className = health.ok ? "badge ok" : "badge bad";
  const pool = status.pool;
  if (!pool) { $("pool-summary").textContent = "this process keeps no pool"; return; }
  const role = pool.lead == null ? "no lead candidate here"
    : pool.leading ? `leads since ${pool.leading_since}` : "stands by";
  const leader = pool.leader == null ? "none alive (workers claim directly)"
    : `${pool.leader} (beating since ${pool.leader_beating_since})`;
  $("pool-summary").textContent =
    `this process: ${pool.stem}, ${pool.workers.length} worker(s), ${role}. Leader: ${leader}. ` +
    `Live workers in the pool: ${pool.workers_seen.join(", ") || "none"}.` + sweepTimes(status);
}

// issue 56: where the lead spends its time (this process's sweeps, when it has led)
function sweepTimes(status) {
  const sweep = (status.timings || []).find((t) => t.name === "lead_sweep");
  if (!sweep || !sweep.count) return "";
  const ms = (s) => `${(s * 1000).toFixed(1)} ms`;
  return ` Lead sweeps here: p50 ${ms(sweep.p50_s)}, p99 ${ms(sweep.p99_s)} (${sweep.count} sweeps).`;
}

function drawTask(doc) {
  const r = doc.record;
  const lines = [`${r.task.id}: ${r.state}, ${runWords(r)}`];
  if (r.owner) lines.push(`owner ${r.owner}`);
  if (r.reason) lines.push(`reason ${r.reason}`);
  lines.push(`room ${r.task.room || "-"}, ingested ${age(doc.now - r.created_at)} ago`);
  lines.push(`message ${r.task.body.slice(0, 400)}`);
  $("task-summary").textContent = lines.join("\n");
  plainRows($("journal-rows"), doc.journal.map((e) => [
    `${age(doc.now - e.at)} ago`,
    `${e.src == null ? "ingested" : e.src} → ${e.dst}`,
    e.attempt,
    // the worker a move concerns is its actor only for a worker's own move (as `tether store show`)
    !e.worker ? e.actor : e.actor === "worker" ? `worker ${e.worker}` : `${e.actor} (worker ${e.worker})`,
    e.reason || "",
  ]));
  // the steps and asks of its runs (as `tether store show` lists them; values stay in its --json)
  const parts = [
    ["steps", "step-rows", doc.steps, (s) =>
      `${s.name} · attempt ${s.attempt}${s.version == null ? "" : ` · version ${s.version}`} · ` +
      `${s.size} bytes · recorded ${age(doc.now - s.at)} ago`],
    ["asks", "ask-rows", doc.asks, (a) => `${a.name}: ${a.question.slice(0, 200)} · ${askOutcome(a)}`],
    // issue 51: its parent and its children (a parent waiting on children shows them live)
    ["tree", "tree-rows", doc.tree, (n) =>
      `${"\u2003".repeat(n.depth)}${n.id} · ${n.name} · ${n.state == null ? "no longer in the store" : n.state}`],
  ];
  for (const [part, list, rows, line] of parts) {
    $(part).hidden = !Array.isArray(rows) || rows.length === 0;
    $(list).replaceChildren(...(Array.isArray(rows) ? rows : []).map((row) => {
      const li = document.createElement("li");
      li.textContent = line(row);
      return li;
    }));
  }
  // issue 53: rewind a dead run to a step, or fork any run there ("regenerate from here")
  (Array.isArray(doc.steps) ? doc.steps : []).forEach((s, i) => {
    const li = $("step-rows").children[i];
    if (r.state === "dead") li.append(" ", stepButton("rewind", r.task.id, s.name));
    if (!r.task.headers || !r.task.headers.parent) li.append(" ", stepButton("fork", r.task.id, s.name));
  });
}

function stepButton(move, id, step) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = move;
  b.textContent = move === "rewind" ? "Rewind here" : "Fork here";
  b.title = move === "rewind"
    ? `Re-drive ${id} with its records from ${step} on dropped: ${step} and what follows run again`
    : `A new task with ${id}'s message and its records before ${step}: ${step} and what follows run anew`;
  b.addEventListener("click", () => stepMove(move, id, step, b));
  return b;
}

async function stepMove(move, id, step, button) {
  const question = move === "rewind"
    ? `Rewind task ${id} to step ${step}? Its records from ${step} on are dropped and it runs again from there.`
    : `Fork task ${id} at step ${step}? A new task runs its message again from there; its reply goes to the room.`;
  if (!window.confirm(question)) return;
  button.disabled = true;
  try {
    const done = await api("POST", `/ops/api/tasks/${encodeURIComponent(id)}/${move}`, { step });
    notice(done.detail, true);
  } catch (error) {
    notice(error.message);
  } finally {
    button.disabled = false;
  }
  refresh();
}

function askOutcome(a) {
  if (a.status === "answered") return `answered by ${a.answer_id}: ${(a.answer || "").slice(0, 200)}`;
  if (a.status !== "open") return a.status;
  const who = a.answer_from == null ? "anyone" : a.answer_from.join(" or ");
  return `open (${a.posted ? "shown" : "not yet shown"}), from ${who}`;
}

// One reading at a time: a refresh asked for while one is out runs right after it, so a
// click never starts a second polling chain beside the timer's.
let reading = false;
let readAgain = false;

async function refresh() {
  if (reading) { readAgain = true; return; }
  reading = true;
  clearTimeout(timer);
  let next = POLL_MS;
  try {
    if (!token()) { notice("Paste the admin token to start."); return; }
    const [status, view] = await Promise.all([api("GET", "/status"), api("GET", "/ops/api/store")]);
    drawStatus(status);
    drawStore(view);
    if (shownTask) drawTask(await api("GET", `/ops/api/tasks/${encodeURIComponent(shownTask)}`));
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (failing) notice("Connected.", true);
    failing = false;
  } catch (error) {
    failing = true;
    notice(`Cannot read the bridge: ${error.message}`);
    if (error.status === 401) next = null;  // a wrong token: wait for a new one, do not hammer
  } finally {
    reading = false;
  }
  if (!token() || next === null) return;
  if (readAgain) { readAgain = false; next = 0; }
  timer = setTimeout(refresh, next);
}

const CANCEL_QUESTION = "It becomes a dead letter at once: a run in progress is stopped and the " +
  "person is told no reply is coming. Retry on its dead letter brings it back.";

async function operatorMove(move, id, button) {
  // a cancel ends someone's message: ask first (a retry only brings one back)
  if (move === "cancel" && !window.confirm(`Cancel task ${id}? ${CANCEL_QUESTION}`)) return;
  button.disabled = true;
  try {
    const done = await api("POST", `/ops/api/tasks/${encodeURIComponent(id)}/${move}`, {});
    notice(done.detail, true);
  } catch (error) {
    notice(error.message);  // e.g. already moved: the store refused and changed nothing
  } finally {
    button.disabled = false;
  }
  refresh();
}

async function showTask(id) {
  shownTask = id;
  $("task-id").value = id;
  try {
    drawTask(await api("GET", `/ops/api/tasks/${encodeURIComponent(id)}`));
    $("timeline").scrollIntoView();
  } catch (error) {
    notice(`Cannot show task ${id}: ${error.message}`);
    shownTask = "";
  }
}

function start() {
  // A link may carry the token in its fragment (never sent to the server): keep it, hide it.
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, fragment.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  $("settings").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    notice("Token kept for this tab.", true);
    refresh();
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    clearTimeout(timer);
    notice("Token forgotten.");
  });
  $("show").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("task-id").value.trim();
    if (id) showTask(id);
  });
  refresh();
}

start();
