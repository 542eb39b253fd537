// fleet's dashboard: keeps the page rendered by the daemon current without a reload.
// `/`: polls /api/overview and re-renders its tables. `/runs/ID`: polls /api/runs/ID and
// appends what the log grew by (/api/runs/ID/log?offset=N) until the run has ended.
// Everything from the server is inserted as text, never as HTML.
"use strict";

const POLL_MS = 1000;

function el(tag, attrs, children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children || []) e.append(c);
  return e;
}

function text(v) {
  return v === null || v === undefined ? "" : String(v);
}

function clock(v) {
  const s = text(v);
  return s.length >= 19 ? s.slice(11, 19) : s;
}

function between(from, to) {
  if (!from || !to) return "";
  let s = Math.floor((Date.parse(to) - Date.parse(from)) / 1000);
  if (!(s >= 0)) return "";
  const parts = [];
  for (const [unit, n] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= n) { parts.push(Math.floor(s / n) + unit); s %= n; }
  }
  if (s > 0 || parts.length === 0) parts.push(s + "s");
  return parts.join(" ");
}

function exit(r) {
  if (r.exit_code !== null && r.exit_code !== undefined) return String(r.exit_code);
  if (r.signal !== null && r.signal !== undefined) return "sig " + r.signal;
  return "";
}

function fill(id, rows, empty) {
  const table = document.getElementById(id);
  if (!table) return;
  const body = table.tBodies[0];
  const cols = table.tHead.rows[0].cells.length;
  if (rows.length === 0) {
    rows = [el("tr", { class: "empty" }, [el("td", { colspan: cols }, [empty])])];
  }
  body.replaceChildren(...rows);
}

function runRow(r, cells) {
  const link = el("a", { href: "/runs/" + r.id }, [String(r.id)]);
  return el("tr", { "data-run-id": r.id, "data-status": r.status },
    [el("td", {}, [link]), ...cells.map((c) => el("td", {}, [text(c)]))]);
}

function renderIndex(v) {
  const now = v.now;
  const health = document.getElementById("health");
  health.className = v.daemon.healthy ? "ok" : "stuck";
  health.textContent = v.daemon.health;
  document.getElementById("updated").textContent = "at " + clock(now);
  const global = document.querySelector("h2 small");
  if (global) global.textContent = "global " + v.global.active + " / " + v.global.max_concurrency;
  fill("namespaces", Object.entries(v.namespaces).map(([name, ns]) => {
    const cap = ns.max_concurrency === null ? "global" : String(ns.max_concurrency);
    const attrs = { "data-namespace": name };
    if (ns.max_concurrency !== null && ns.active >= ns.max_concurrency) attrs.class = "full";
    return el("tr", attrs, [el("td", {}, [name]),
      el("td", { class: "occupancy" }, [ns.active + " / " + cap]),
      el("td", {}, [String(ns.queued)]), el("td", {}, [between(ns.oldest_queued_at, now)])]);
  }), "no namespace");
  fill("active", v.active.map((r) => runRow(r, [r.project, r.namespace, r.status, between(r.started_at, now)])), "nothing running");
  fill("queued", v.queued.map((r) => runRow(r, [r.project, r.namespace, r.trigger, between(r.enqueued_at, now)])), "nothing queued");
  fill("recent", v.recent.map((r) => runRow(r, [r.project, r.status, r.trigger, exit(r),
    between(r.started_at, r.finished_at), clock(r.finished_at)])), "no runs yet");
  fill("projects", v.projects.map((p) => el("tr", { "data-project": p.project },
    [p.project, p.namespace, p.schedule, p.next_occurrence, p.last_status, p.last_finished_at]
      .map((c) => el("td", {}, [text(c)])))), "no projects");
}

async function pollIndex() {
  try {
    const res = await fetch("/api/overview", { cache: "no-store" });
    if (res.ok) renderIndex(await res.json());
  } catch (e) {
    document.getElementById("updated").textContent = "daemon unreachable";
  }
  setTimeout(pollIndex, POLL_MS);
}

const ENDED = ["succeeded", "failed", "timed_out", "cancelled", "lost"];

async function pollRun() {
  const log = document.getElementById("log");
  const id = log.dataset.runId;
  let ended = false;
  try {
    const res = await fetch("/api/runs/" + id, { cache: "no-store" });
    if (res.ok) {
      const r = await res.json();
      document.getElementById("run").dataset.status = r.status;
      for (const td of document.querySelectorAll("#run td[data-field]")) {
        td.textContent = text(r[td.dataset.field]);
      }
      ended = ENDED.includes(r.status);
    }
    // Read until the log has nothing more: an ended run's last lines are read too.
    for (;;) {
      const more = await fetch("/api/runs/" + id + "/log?offset=" + log.dataset.offset, { cache: "no-store" });
      const note = document.getElementById("log-note");
      if (!more.ok) {
        // Another host's log that cannot be read from here: say why, and try again later.
        note.textContent = (await more.text()).trim();
        note.dataset.error = "yes";
        break;
      }
      if (note.dataset.error) {
        note.textContent = "";
        delete note.dataset.error;
      }
      // Another host's run that ended with a longer log than the database keeps, and whose
      // host cannot be asked: what comes now is the kept end, in positions of its own. Start
      // over with it rather than append it at a position it does not have.
      if (more.headers.get("X-Log-Source") === "tail-cut" && log.dataset.source !== "tail-cut") {
        log.dataset.source = "tail-cut";
        log.dataset.offset = "0";
        log.textContent = "";
        note.textContent = "the end of the log, as the database kept it";
        continue;
      }
      // The server cuts chunks on character boundaries, so each decodes on its own.
      const chunk = await more.text();
      log.dataset.offset = more.headers.get("X-Log-Next-Offset");
      if (chunk.length === 0) break;
      const follow = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.append(chunk);
      if (follow) log.scrollTop = log.scrollHeight;
    }
  } catch (e) {
    ended = false;
  }
  if (ended) {
    log.dataset.following = "done";
  } else {
    log.dataset.following = "yes";
    setTimeout(pollRun, POLL_MS / 2);
  }
}

if (document.body.dataset.page === "index") pollIndex();
if (document.body.dataset.page === "run") pollRun();
