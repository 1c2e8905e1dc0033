"use strict";
// One run: declared conditions, metrics overall, per task type and per source benchmark
// (with intervals, populations and coverage), and every record's result.

/** A record's score in [0, 1]: QA correct or not; proactive, the windows' mean score;
 * RealStreamEval, its record score / 100. Null when the record has no scored part. */
function recordOutcome(record) {
  if (record.qa) return record.qa.correct ? 1 : 0;
  if (record.proactive) {
    const windows = record.proactive.windows.length;
    return windows ? record.proactive.score_sum / windows : null;
  }
  if (record.realstream && typeof record.realstream.score === "number") return record.realstream.score / 100;
  return null;
}

function outcomeText(record) {
  if (record.status !== "finished") return record.status.replace("_", " ");
  if (record.qa) return record.qa.correct ? "✓ correct" : "✗ wrong";
  if (record.proactive) return `${fmt(record.proactive.score_sum)} / ${plural(record.proactive.windows.length, "window")}`;
  return fmt(recordOutcome(record));
}

function recordRows(records) {
  return records.map((r) => ({
    ...r,
    outcome: recordOutcome(r),
    prediction: r.qa ? r.qa.prediction : null,
    parsed: r.qa ? r.qa.parsed : null,
    gold: r.qa ? r.qa.gold : null,
    ttft_s: r.qa ? r.qa.ttft_s : null,
    latency_s: r.qa ? r.qa.latency_s : null,
    windows: r.proactive ? r.proactive.windows.length : null,
    missed: r.proactive ? r.proactive.windows.filter((w) => w.assignment === "no_output").length : null,
    false_alarms: r.proactive ? r.proactive.false_alarms : null,
    redundant: r.proactive ? r.proactive.redundant : null,
    submitted_images: r.workload ? r.workload.submitted_images : null,
    failure: r.failure_stage ? `${r.failure_stage}: ${r.failure_reason}` : null,
  }));
}

function recordsTable(runId, rows, name) {
  return dataTable({
    name,
    title: plural(rows.length, "record"),
    rows,
    onRow: (row) => navigate(recordHref(runId, row.record_id)),
    columns: [
      { key: "record_id", label: "record", render: (row) => h("a", { href: recordHref(runId, row.record_id) }, row.record_id) },
      { key: "task", label: "task" },
      { key: "task_type", label: "task type" },
      { key: "source_benchmark", label: "source" },
      { key: "status", label: "status" },
      {
        key: "outcome",
        label: "outcome",
        num: true,
        render: (row) => h("span", { class: row.outcome === 1 ? "good" : row.outcome === 0 ? "bad" : "" }, outcomeText(row)),
      },
      { key: "prediction", label: "prediction", render: (row) => truncate(row.prediction ?? "", 40) },
      { key: "gold", label: "gold" },
      { key: "ttft_s", label: "TTFT", num: true, render: (row) => fmtSeconds(row.ttft_s) },
      { key: "latency_s", label: "latency", num: true, render: (row) => fmtSeconds(row.latency_s) },
      { key: "windows", label: "windows", num: true },
      { key: "missed", label: "missed", num: true },
      { key: "false_alarms", label: "false alarms", num: true },
      { key: "redundant", label: "redundant", num: true },
      { key: "submitted_images", label: "images", num: true },
      { key: "events", label: "events", num: true },
      { key: "failure", label: "failure", render: (row) => truncate(row.failure ?? "", 60) },
    ],
  });
}

/** What judged the answers: "exact" means no judge was called (normalised exact match). */
function judgeName(kind) {
  return kind === "exact" ? "none (exact match)" : "LLM";
}

/** The judge and the calls really made to it (retries included; cached verdicts are not calls). */
function judgeCard(judge) {
  const attrs = { "data-metric": "judge" };
  if (judge.kind === "exact") return card("judge", judgeName(judge.kind), `no judge calls · ${plural(judge.unique, "answer")} compared`, attrs);
  const calls = `${plural(judge.calls, "call")} · ${judge.cache_hits} cached`;
  return card("judge", `${judgeName(judge.kind)} ${judge.model}`, judge.incomplete ? `${calls} · ${judge.failures} failed: incomplete` : calls, attrs);
}

function recordHref(runId, recordId) {
  return `#/runs/${enc(runId)}/records/${enc(recordId)}`;
}

/** Select boxes over the records' task, task type, source and status, plus an id search. */
function recordFilters(rows, onChange) {
  const state = {};
  const choice = (key, label) => {
    const values = [...new Set(rows.map((r) => r[key]))].sort();
    return h(
      "label",
      {},
      `${label} `,
      h(
        "select",
        { "data-filter": key, onchange: (event) => { state[key] = event.target.value || null; onChange(apply()); } },
        h("option", { value: "" }, "all"),
        values.map((v) => h("option", { value: v }, v)),
      ),
    );
  };
  const search = h("input", {
    type: "search",
    placeholder: "record id contains…",
    "data-filter": "search",
    oninput: (event) => { state.search = event.target.value.trim(); onChange(apply()); },
  });
  const notRight = h("label", {}, h("input", { type: "checkbox", "data-filter": "not-right", onchange: (event) => { state.notRight = event.target.checked; onChange(apply()); } }), " not fully right");
  function apply() {
    return rows.filter(
      (r) =>
        ["task", "task_type", "source_benchmark", "status"].every((key) => !state[key] || r[key] === state[key]) &&
        (!state.search || r.record_id.includes(state.search)) &&
        (!state.notRight || r.outcome !== 1),
    );
  }
  return h("div", { class: "toolbar" }, choice("task", "task"), choice("task_type", "type"), choice("source_benchmark", "source"), choice("status", "status"), search, notRight);
}

async function runPage(view, runId) {
  const profile = currentProfile();
  const [run, metrics, records] = await Promise.all([Data.run(runId), Data.metrics(runId, profile), Data.records(runId, profile)]);
  const families = metrics.profile.constants.families || Object.keys(metrics.overall);
  const sessions = metrics.sessions;
  const headline = HEADLINES.map((m) => ({ ...m, value: headlineMetric(metrics, m.family, m.metric) })).filter((m) => m.value);

  const rows = recordRows(records);
  const tableHolder = h("div", {}, recordsTable(runId, rows, `records-${runId}`));
  const filters = recordFilters(rows, (chosen) => setChildren(tableHolder, recordsTable(runId, chosen, `records-${runId}`)));

  const bySlice = (slices, label, prefix) =>
    families
      .filter((family) => Object.values(slices).some((f) => f[family]))
      .map((family) => sliceTable(`${prefix}-${family}-${runId}`, family, slices, family, label));

  setChildren(view, 
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Runs"), " / ", runId),
    h("h1", {}, `Run ${runId} `, statusBadge(run.status), " ", auditBadge(run)),
    h(
      "p",
      { class: "muted" },
      `${run.benchmark} · created ${fmtDate(run.created_at)} · finished ${fmtDate(run.finished_at)} · config ${run.config_hash.slice(0, 12)} · `,
      Data.isReport ? null : h("a", { href: `#/runs/${enc(runId)}/live`, "data-link": "live" }, "live view"),
    ),
    h(
      "div",
      { class: "cards" },
      card("records", String(metrics.records_scored), plural(run.events, "event")),
      card("sessions", `${sessions.finished} finished`, `${sessions.failed} failed · ${sessions.incomplete} incomplete · ${sessions.not_run} not run`),
      headline.map((m) => card(m.label, fmt(m.value.value), `${fmtCI(m.value.ci95)} · n=${counted(m.value.population, m.value.unit)}`, { "data-metric": m.key, title: metricHelp(m.family, m.metric) })),
      judgeCard(metrics.judge),
    ),
    metrics.notes.map((note) => h("p", { class: "note" }, note)),
    h("h2", {}, "Adapter settings"),
    settingsTable(`settings-${runId}`, "the options its adapter was built with", adapterSettings(run)),
    h("h2", {}, "Declared conditions"),
    keyValueTable(`conditions-${runId}`, "as the run and its adapters declared them", run.conditions),
    h("h2", {}, `Metrics · ${metrics.profile.name} v${metrics.profile.version}`),
    h("p", { class: "muted" }, metrics.profile.description),
    metricsTable(`metrics-${runId}-${profile}`, "overall", metrics.overall),
    capacitySection(run),
    robustnessSection(runId, metrics),
    h("h2", {}, "By task type"),
    bySlice(metrics.by_task_type, "task type", "by-task-type"),
    h("h2", {}, "By source benchmark"),
    bySlice(metrics.by_source_benchmark, "source benchmark", "by-source"),
    h("h2", {}, "Records"),
    filters,
    tableHolder,
    h(
      "details",
      {},
      h("summary", {}, "Scoring profile, judge, configuration and versions"),
      keyValueTable(`profile-${profile}`, `profile ${metrics.profile.name}`, { ...metrics.profile.constants, overrides: metrics.profile.overrides }),
      keyValueTable(`judge-${runId}`, "judge", metrics.judge),
      keyValueTable(`derived-${runId}`, "values fixed from the data", metrics.derived),
      keyValueTable(`config-${runId}`, "stored run configuration", run.config),
      keyValueTable(`versions-${runId}`, "library versions", run.versions),
    ),
  );
}
