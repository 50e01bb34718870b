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
    ? `${status.waiting_retries} pending task(s) wait out a retry backoff; the next is due in ${age(status.next_retry_in_s)}`
    : "";
  const told = status.dead_unreported ? `, ${status.dead_unreported} not yet reported to the gateway` : "";
  $("dead-count").textContent = `${status.counts.dead || 0} in the store${told}; newest first`;
  syncRows($("dead-rows"), status.dead_letters, (e) => e.id,
    (e) => [e.id, `${age(e.age_s)} ago`, e.attempt, e.reason || ""], "retry");
  syncRows($("suspect-rows"), status.suspect_tasks, (e) => e.id,
    (e) => [e.id, e.state, `${e.crash_count} (${e.crashes_alone} alone)`, e.attempt], "cancel");
  // issue 37: quarantine deaths, when the status carries them
  const deaths = status.quarantine_deaths;
  $("quarantine").hidden = !Array.isArray(deaths);
  if (Array.isArray(deaths)) {
    syncRows($("quarantine-rows"), deaths, (e) => e.id,
      (e) => [e.id, age(e.age_s), e.attempt, e.reason || ""], "retry");
  }
  syncRows($("waiting-rows"), view.waiting, (e) => e.id,
    (e) => [e.id, e.room || "", e.waits_for || "", e.due_in_s == null ? "" : `in ${age(e.due_in_s)}`], "cancel");
  const flight = status.oldest_in_flight.filter((e) => e.state !== "result");
  syncRows($("flight-rows"), flight, (e) => e.id,
    (e) => [e.id, e.state, e.owner || "", age(e.age_s), e.attempt], "cancel");
  // issue 38: limits, when the view carries them
  $("limits").hidden = !Array.isArray(view.limits);
  if (Array.isArray(view.limits)) {
    plainRows($("limit-rows"), view.limits.map((l) => [l.key, JSON.stringify(l)]));
  }
  plainRows($("member-rows"), view.members.map((m) => [
    m.name, m.role, m.capacity, `${age(m.beat_age_s)} ago`, age(m.up_s),
  ]));
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
  const lines = [`${r.task.id}: ${r.state}, attempt ${r.attempt}`];
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
  // issues 35 and 36: steps and turns, when the document carries them
  for (const [part, rows] of [["steps", doc.steps], ["turns", doc.turns]]) {
    $(part).hidden = !Array.isArray(rows);
    if (!Array.isArray(rows)) continue;
    $(part === "steps" ? "step-rows" : "turn-rows").replaceChildren(...rows.map((row) => {
      const li = document.createElement("li");
      li.textContent = JSON.stringify(row);
      return li;
    }));
  }
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

async function operatorMove(move, id, button) {
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
