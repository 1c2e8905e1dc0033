"use strict";
// A run in progress: sessions done, failed and running, stored events and events per second,
// polled once a second until the run ends.

const POLL_MS = 1000;
const RATE_HISTORY = 120; // points in the events-per-second sparkline

function progressBar(progress) {
  const total = Math.max(1, progress.sessions_total);
  const part = (count, kind) => h("div", { class: kind, style: { width: `${(100 * count) / total}%` }, title: `${count} ${kind}` });
  return h(
    "div",
    { class: "progress-bar", "data-progress": `${progress.done}/${progress.sessions_total}` },
    part(progress.sessions.finished, "done"),
    part(progress.sessions.failed, "failed"),
    part(progress.sessions.running, "running"),
  );
}

function sessionsTable(name, title, sessions) {
  return dataTable({
    name,
    title,
    rows: sessions,
    columns: [
      { key: "session_id", label: "session" },
      { key: "attempt", label: "attempt", num: true },
      { key: "endpoint", label: "endpoint" },
      { key: "host", label: "host" },
      { key: "worker_id", label: "worker" },
      { key: "gpu", label: "GPU" },
      { key: "started_at", label: "started", render: (s) => fmtDate(s.started_at) },
      { key: "finished_at", label: "ended", render: (s) => fmtDate(s.finished_at) },
      { key: "failure_stage", label: "failure stage" },
      { key: "failure_reason", label: "failure", render: (s) => truncate(s.failure_reason ?? "", 80) },
    ],
  });
}

function workersTable(progress) {
  return dataTable({
    name: `workers-${progress.run_id}`,
    title: plural(progress.workers.length, "worker"),
    rows: progress.workers,
    columns: [
      { key: "worker_id", label: "worker" },
      { key: "host", label: "host" },
      { key: "sessions", label: "sessions", num: true },
      { key: "running", label: "running", num: true },
      { key: "finished", label: "finished", num: true },
      { key: "failed", label: "failed", num: true },
    ],
  });
}

function renderProgress(holder, progress, rates) {
  const ended = !["created", "running"].includes(progress.status);
  setChildren(holder, 
    h("h1", {}, `Run ${progress.run_id} `, statusBadge(progress.status)),
    h("p", { class: "muted" }, ended ? `ended ${fmtDate(progress.finished_at)}` : `live: refreshed every ${POLL_MS / 1000} s`),
    progressBar(progress),
    h(
      "div",
      { class: "cards" },
      card("sessions done", `${progress.done} / ${progress.sessions_total}`, `${progress.sessions.finished} finished · ${progress.sessions.failed} failed`, { "data-metric": "done" }),
      card("running", String(progress.sessions.running), `${progress.sessions.pending} pending`, { "data-metric": "running" }),
      card("events stored", String(progress.events), "", { "data-metric": "events" }),
      card("events / s", ended ? "–" : fmt(progress.events_per_s), ended ? "run ended" : "over the last polls", { "data-metric": "events-per-s" }),
      card("mean events / s", fmt(progress.mean_events_per_s), `over ${fmt(progress.elapsed_s)} s`, { "data-metric": "mean-events-per-s" }),
    ),
    ended ? null : [h("h3", {}, "events per second"), rates.length > 1 ? sparkline(rates) : h("p", { class: "muted" }, "measuring…")],
    h("h2", {}, "Running sessions"),
    sessionsTable(`running-${progress.run_id}`, `${progress.running.length} running`, progress.running),
    h("h2", {}, "Failed sessions"),
    sessionsTable(`failed-${progress.run_id}`, `${progress.failed.length} failed`, progress.failed),
    h("h2", {}, "Workers"),
    workersTable(progress),
  );
}

async function livePage(view, runId) {
  const holder = h("div");
  const rates = [];
  let timer = null;
  let active = true;
  onLeave(() => {
    active = false;
    clearTimeout(timer);
  });
  setChildren(view, 
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Runs"), " / ", h("a", { href: `#/runs/${enc(runId)}` }, runId), " / live"),
    holder,
  );
  async function poll() {
    const progress = await Data.progress(runId);
    if (!active) return;
    rates.push(progress.events_per_s);
    if (rates.length > RATE_HISTORY) rates.shift();
    renderProgress(holder, progress, rates);
    if (["created", "running"].includes(progress.status)) {
      timer = setTimeout(() => poll().catch((error) => holder.prepend(errorBox(error))), POLL_MS);
    }
  }
  await poll();
}
