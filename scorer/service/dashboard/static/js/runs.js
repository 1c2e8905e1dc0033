"use strict";
// The run list: declared execution conditions and headline metrics of every run, charts
// across runs, and the choice of runs to compare.

const RUNS_PER_PAGE = 25;

// The few numbers that summarise a run, in the order the list shows them.
const HEADLINES = [
  { key: "qa_accuracy", family: "qa", metric: "accuracy", label: "QA accuracy" },
  { key: "in_window_accuracy", family: "proactive", metric: "in_window_accuracy", label: "in-window accuracy" },
  { key: "false_alarm_rate", family: "proactive", metric: "false_alarm_rate", label: "false-alarm rate" },
  { key: "miss_rate", family: "proactive", metric: "miss_rate", label: "miss rate" },
  // Each delay under its own clock: a runtime and a video-time delay never share a column.
  { key: "median_delay_runtime_s", family: "proactive", metric: "median_response_delay_runtime_s", label: "median delay, runtime (s)" },
  { key: "median_delay_video_s", family: "proactive", metric: "median_response_delay_video_s", label: "median delay, video (s)" },
  { key: "realstream_score", family: "realstream", metric: "score", label: "RealStream score" },
  { key: "acc_e", family: "readiness", metric: "acc_e", label: "Acc_E" },
];

function headlineMetric(metrics, family, metric) {
  return metrics?.overall?.[family]?.[metric] ?? null;
}

/** Images submitted to the model per record: the workload axis of the quality chart. */
function imagesPerRecord(metrics) {
  const m = headlineMetric(metrics, "workload", "submitted_images");
  return m && m.value !== null && m.population ? m.value / m.population : null;
}

function adapterConditions(run) {
  const adapters = run.conditions?.adapters || [];
  const join = (pick) => [...new Set(adapters.map(pick).filter((v) => v !== undefined && v !== null))].join(", ");
  return {
    adapter: join((a) => a.adapter),
    model: join((a) => a.conditions?.model_name),
    state: join((a) => a.conditions?.state),
    initiation: join((a) => a.conditions?.initiation),
    boundary: join((a) => a.conditions?.boundary),
    deployment: join((a) => a.conditions?.deployment),
  };
}

function runLabel(run) {
  const { adapter, model } = adapterConditions(run);
  return `${run.run_id} · ${model || adapter || run.benchmark}`;
}

function statusBadge(status) {
  return h("span", { class: `badge ${status}` }, status);
}

/** Quality against workload, and delay, false-alarm and miss rates, across runs. */
function acrossRunCharts(runs, metricsByRun, prefix) {
  const scored = runs.filter((run) => metricsByRun[run.run_id]);
  if (scored.length === 0) return null;
  const quality = [
    ["qa", "accuracy", "QA accuracy"],
    ["proactive", "in_window_accuracy", "proactive in-window accuracy"],
    ["realstream", "score", "RealStream score / 100"],
  ]
    .map(([family, metric, name]) => ({
      name,
      help: metricHelp(family, metric),
      points: scored
        .map((run) => {
          const m = headlineMetric(metricsByRun[run.run_id], family, metric);
          const scale = family === "realstream" ? 100 : 1;
          return {
            label: run.run_id,
            x: imagesPerRecord(metricsByRun[run.run_id]),
            y: m && m.value !== null ? m.value / scale : null,
            yci: m && m.ci95 ? m.ci95.map((v) => v / scale) : null,
          };
        })
        .filter((p) => p.y !== null && p.x !== null),
    }))
    .filter((serie) => serie.points.length);
  const bars = (family, metric) =>
    scored.map((run) => {
      const m = headlineMetric(metricsByRun[run.run_id], family, metric);
      return { label: runLabel(run), value: m ? m.value : null, ci: m ? m.ci95 : null };
    });
  const charts = [];
  if (quality.length) {
    const xAxis = { label: "submitted images per record", help: metricHelp("workload", "submitted_images") };
    const yAxis = { label: "quality (95% CI)", help: quality.map((serie) => serie.help).filter(Boolean).join("\n\n") || null };
    const chart = scatterChart(`${prefix}-quality-vs-workload`, "Quality against workload", xAxis, yAxis, quality);
    const unplotted = scored.filter((run) => imagesPerRecord(metricsByRun[run.run_id]) === null).map((run) => run.run_id);
    if (unplotted.length) chart.append(h("p", { class: "cov" }, `not plotted, no workload reported: ${unplotted.join(", ")}`));
    charts.push(chart);
  }
  for (const [metric, title, unit] of [
    ["median_response_delay_runtime_s", "Median response delay (runtime clock)", "s"],
    ["median_response_delay_video_s", "Median response delay (video time)", "s"],
    ["false_alarm_rate", "False-alarm rate", ""],
    ["miss_rate", "Miss rate", ""],
  ]) {
    const items = bars("proactive", metric);
    if (items.some((item) => item.value !== null)) charts.push(barChart(`${prefix}-${metric}`, title, items, unit, metricHelp("proactive", metric)));
  }
  return charts.length ? h("div", { class: "charts" }, charts) : null;
}

async function runsPage(view, params) {
  const profile = currentProfile();
  const offset = Math.max(0, Number(params.get("offset") || 0));
  const page = await Data.runsPage(offset, RUNS_PER_PAGE);
  const status = h("p", { class: "muted" }, `scoring ${plural(page.items.length, "run")} under ${profile}…`);
  setChildren(view, h("h1", {}, "Runs"), status);
  const metrics = await mapLimit(page.items, 3, (run) => Data.metrics(run.run_id, profile).catch(() => null));
  const metricsByRun = Object.fromEntries(page.items.map((run, i) => [run.run_id, metrics[i]]));
  const selected = new Set();
  const compareButton = h(
    "button",
    { type: "button", class: "primary server-only", disabled: true, "data-action": "compare", onclick: () => navigate(`#/compare?runs=${[...selected].map(enc).join(",")}`) },
    "Compare selected",
  );
  const tableButton = h(
    "button",
    { type: "button", class: "server-only", disabled: true, "data-action": "paper-table", onclick: () => navigate(tableHash([...selected], { format: "markdown" })) },
    "Table for a paper",
  );
  const select = (run) =>
    h("input", {
      type: "checkbox",
      "data-run": run.run_id,
      onchange: (event) => {
        if (event.target.checked) selected.add(run.run_id);
        else selected.delete(run.run_id);
        compareButton.disabled = selected.size < 2;
        tableButton.disabled = selected.size < 1;
      },
    });
  const rows = page.items.map((run) => ({
    ...run,
    ...adapterConditions(run),
    speed: run.conditions?.run?.speed ?? null,
    fps: run.conditions?.run?.fps ?? null,
    // Beside each run's numbers, how many records they stand on (2 or 2,000).
    records: metricsByRun[run.run_id]?.records_scored ?? null,
    ...Object.fromEntries(HEADLINES.map((m) => [m.key, headlineMetric(metricsByRun[run.run_id], m.family, m.metric)?.value ?? null])),
    images_per_record: imagesPerRecord(metricsByRun[run.run_id]),
  }));
  const shown = HEADLINES.filter((m) => rows.some((row) => row[m.key] !== null));
  const exportKeys = ["run_id", "created_at", "finished_at", "status", "records", "benchmark", "config_hash", "adapter", "model", "state", "initiation", "boundary", "deployment", "profile", "pacing", "speed", "fps", ...shown.map((m) => m.key), "images_per_record"];
  const table = dataTable({
    name: "runs",
    title: `${plural(page.total, "run")} · metrics under ${profile}`,
    rows,
    onRow: (row) => navigate(`#/runs/${enc(row.run_id)}`),
    exportRows: () => rows.map((row) => Object.fromEntries(exportKeys.map((key) => [key, row[key] ?? null]))),
    columns: [
      { key: "select", label: "", noExport: true, value: () => null, render: (row) => (Data.isReport ? "" : select(row)) },
      {
        key: "run_id",
        label: "run",
        value: (row) => row.created_at,
        render: (row) => [
          h("a", { href: `#/runs/${enc(row.run_id)}` }, row.run_id),
          h("span", { class: "cov nowrap" }, row.benchmark),
          h("span", { class: "cov nowrap" }, fmtDate(row.created_at)),
        ],
      },
      { key: "status", label: "status", render: (row) => statusBadge(row.status) },
      { key: "records", label: "records", num: true, title: "records scored under this profile" },
      { key: "adapter", label: "adapter (model)", render: (row) => `${row.adapter}${row.model ? ` (${row.model})` : ""}` },
      {
        key: "conditions",
        label: "state · initiation / boundary · deployment",
        value: (row) => [row.state, row.initiation, row.boundary, row.deployment].join(" · "),
        render: (row) => [`${row.state} · ${row.initiation}`, h("span", { class: "cov" }, `${row.boundary} · ${row.deployment}`)],
      },
      {
        key: "delivery",
        label: "protocol · pacing · fps",
        value: (row) => `${row.profile ?? "–"} · ${row.pacing === "wall_clock" ? `wall clock ×${fmt(row.speed)}` : row.pacing ?? "–"} · ${fmt(row.fps)} fps`,
      },
      ...shown.map((m) => ({ key: m.key, label: m.label, num: true, title: metricHelp(m.family, m.metric) })),
      { key: "images_per_record", label: "images / record", num: true, title: metricHelp("workload", "submitted_images") },
    ],
  });
  const pager = h(
    "div",
    { class: "pager" },
    h("button", { type: "button", disabled: offset === 0, onclick: () => navigate(`#/?offset=${Math.max(0, offset - RUNS_PER_PAGE)}`) }, "‹ newer"),
    h("span", { class: "muted" }, `${page.total ? offset + 1 : 0}–${offset + page.items.length} of ${page.total}`),
    h("button", { type: "button", disabled: offset + RUNS_PER_PAGE >= page.total, onclick: () => navigate(`#/?offset=${offset + RUNS_PER_PAGE}`) }, "older ›"),
  );
  const charts = acrossRunCharts(page.items, metricsByRun, "runs");
  setChildren(view, 
    h("h1", {}, "Runs"),
    h("div", { class: "toolbar" }, pager, compareButton, tableButton),
    table,
    charts ? [h("h2", {}, "Across runs"), charts] : null,
  );
}
