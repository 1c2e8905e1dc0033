"use strict";
// Two or more runs side by side: their conditions, every metric's paired difference to the
// first run (the baseline) with its interval, which records each run gets right that the
// baseline does not, and charts across the runs.

async function comparePicker(view, chosen) {
  const runs = await Data.allRuns();
  const selected = new Set(chosen);
  const go = h("button", { type: "button", class: "primary", "data-action": "compare", onclick: () => navigate(`#/compare?runs=${[...selected].map(enc).join(",")}`) }, "Compare");
  go.disabled = selected.size < 2;
  const rows = runs.map((run) => ({ ...run, ...adapterConditions(run) }));
  setChildren(view, 
    h("h1", {}, "Compare runs"),
    h("p", { class: "muted" }, "Pick two or more runs; the first one picked is the baseline every other run is compared with."),
    dataTable({
      name: "runs-to-compare",
      rows,
      columns: [
        {
          key: "select",
          label: "",
          noExport: true,
          render: (row) =>
            h("input", {
              type: "checkbox",
              "data-run": row.run_id,
              checked: selected.has(row.run_id),
              onchange: (event) => {
                if (event.target.checked) selected.add(row.run_id);
                else selected.delete(row.run_id);
                go.disabled = selected.size < 2;
              },
            }),
        },
        { key: "run_id", label: "run" },
        { key: "created_at", label: "created", render: (row) => fmtDate(row.created_at) },
        { key: "benchmark", label: "benchmark" },
        { key: "adapter", label: "adapter" },
        { key: "model", label: "model" },
        { key: "pacing", label: "pacing" },
      ],
    }),
    go,
  );
}

/** Declared conditions of every run, one line per condition; differing lines first. */
function conditionsTable(runs) {
  const flat = runs.map((run) => flatten({ run: run.conditions?.run, adapters: run.conditions?.adapters, benchmark: run.benchmark }));
  const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))];
  const rows = keys.map((key) => {
    const row = { condition: key };
    runs.forEach((run, i) => { row[run.run_id] = flat[i][key] ?? null; });
    row.differs = new Set(flat.map((f) => JSON.stringify(f[key] ?? null))).size > 1;
    return row;
  });
  rows.sort((a, b) => b.differs - a.differs);
  return dataTable({
    name: fileName("conditions", ...runs.map((r) => r.run_id)),
    title: "declared conditions (differences first)",
    rows,
    columns: [
      { key: "condition", label: "condition", render: (row) => h("span", { class: row.differs ? "warn" : "" }, row.condition) },
      ...runs.map((run) => ({ key: run.run_id, label: run.run_id, render: (row) => fmt(row[run.run_id]) })),
      { key: "differs", label: "differs" },
    ],
  });
}

/** The adapter settings in which a run differs from the baseline: what may explain its
 *  metrics, so shown before them. */
function settingDifferences(comparison) {
  return dataTable({
    name: fileName("settings", comparison.run_a, comparison.run_b),
    title: `${comparison.run_b} against ${comparison.run_a}`,
    rows: comparison.differing_settings,
    empty: "no adapter setting differs",
    columns: [
      { key: "key", label: "setting" },
      { key: "a", label: comparison.run_a, render: (row) => settingText(row.a) },
      { key: "b", label: comparison.run_b, render: (row) => settingText(row.b) },
    ],
  });
}

function differenceLines(differences, extra) {
  const lines = [];
  for (const [family, metrics] of Object.entries(differences)) {
    for (const [metric, d] of Object.entries(metrics)) {
      lines.push({
        ...extra,
        family,
        metric,
        a: d.a,
        b: d.b,
        diff: d.diff,
        ci_low: d.ci95 ? d.ci95[0] : null,
        ci_high: d.ci95 ? d.ci95[1] : null,
        population_a: d.population_a,
        population_b: d.population_b,
        unit: d.unit,
      });
    }
  }
  return lines;
}

/** An interval that excludes 0 marks a difference the bootstrap supports. */
function supported(line) {
  return line.ci_low !== null && (line.ci_low > 0 || line.ci_high < 0);
}

function differenceTable(comparison) {
  const name = fileName("compare", comparison.run_a, comparison.run_b, comparison.profile.name);
  const rows = differenceLines(comparison.overall);
  return dataTable({
    name,
    title: `${comparison.run_b} − ${comparison.run_a} over ${plural(comparison.paired_records, "paired record")}`,
    rows,
    exportRows: () => rows,
    columns: [
      { key: "family", label: "family" },
      { key: "metric", label: "metric", render: (row) => metricName(row.family, row.metric) },
      { key: "a", label: `A ${comparison.run_a}`, num: true },
      { key: "b", label: `B ${comparison.run_b}`, num: true },
      { key: "diff", label: "B − A", num: true, title: "bold: the 95% interval excludes 0", render: (row) => h("span", { class: supported(row) ? "supported" : "" }, fmt(row.diff)) },
      { key: "ci", label: "95% CI", num: true, title: columnHelp("95% CI"), value: (row) => row.ci_low, render: (row) => fmtCI(row.ci_low === null ? null : [row.ci_low, row.ci_high]) },
      { key: "population", label: "population", num: true, value: (row) => row.population_a, render: (row) => `${row.population_a} / ${counted(row.population_b, row.unit)}` },
    ],
  });
}

function byTaskTypeDifferences(comparison) {
  const rows = Object.entries(comparison.by_task_type).flatMap(([taskType, differences]) => differenceLines(differences, { task_type: taskType }));
  return dataTable({
    name: fileName("compare-by-task-type", comparison.run_a, comparison.run_b, comparison.profile.name),
    title: `${comparison.run_b} − ${comparison.run_a} per task type`,
    rows,
    columns: [
      { key: "task_type", label: "task type" },
      { key: "family", label: "family" },
      { key: "metric", label: "metric", render: (row) => metricName(row.family, row.metric) },
      { key: "a", label: "A", num: true },
      { key: "b", label: "B", num: true },
      { key: "diff", label: "B − A", num: true },
      { key: "ci_low", label: "CI low", num: true },
      { key: "ci_high", label: "CI high", num: true },
      { key: "population_a", label: "population", num: true },
    ],
  });
}

/** How a run's record outcomes stand against the baseline's, record by record. */
function pairCounts(baseRecords, otherRecords) {
  const other = new Map(otherRecords.map((r) => [r.record_id, recordOutcome(r)]));
  const counts = { both_right: 0, both_wrong: 0, a_better: 0, b_better: 0, tied_partial: 0, unpaired: 0 };
  for (const record of baseRecords) {
    const a = recordOutcome(record);
    const b = other.get(record.record_id);
    if (a === null || b === null || b === undefined) counts.unpaired += 1;
    else if (a === 1 && b === 1) counts.both_right += 1;
    else if (a === 0 && b === 0) counts.both_wrong += 1;
    else if (a > b) counts.a_better += 1;
    else if (b > a) counts.b_better += 1;
    else counts.tied_partial += 1;
  }
  return counts;
}

function pairCards(baseId, otherId, counts) {
  return h(
    "div",
    { class: "cards", "data-pair": otherId },
    card("both right", String(counts.both_right), "", { "data-count": "both_right" }),
    card(`only ${baseId} better`, String(counts.a_better), "QA: right only in the baseline", { "data-count": "a_better" }),
    card(`only ${otherId} better`, String(counts.b_better), `QA: right only in ${otherId}`, { "data-count": "b_better" }),
    card("both wrong", String(counts.both_wrong), "", { "data-count": "both_wrong" }),
    counts.tied_partial ? card("equal partial", String(counts.tied_partial), "proactive, same score", { "data-count": "tied_partial" }) : null,
    counts.unpaired ? card("not paired", String(counts.unpaired), "missing or unscored in one run", { "data-count": "unpaired" }) : null,
  );
}

function pairedRecordsTable(runs, recordsByRun) {
  const ids = runs.map((r) => r.run_id);
  const byRun = ids.map((id) => new Map(recordsByRun[id].map((r) => [r.record_id, r])));
  const allIds = [...new Set(ids.flatMap((id) => recordsByRun[id].map((r) => r.record_id)))].sort();
  const rows = allIds.map((recordId) => {
    const first = byRun.map((m) => m.get(recordId)).find(Boolean);
    const row = { record_id: recordId, task: first.task, task_type: first.task_type };
    ids.forEach((id, i) => { row[id] = byRun[i].has(recordId) ? recordOutcome(byRun[i].get(recordId)) : null; });
    row.differs = new Set(ids.map((id) => row[id])).size > 1;
    return row;
  });
  const holder = h("div");
  const render = (onlyDiffering) =>
    setChildren(holder, 
      dataTable({
        name: fileName("paired-records", ...ids),
        title: `${plural(rows.length, "record")} (outcome 1 = right; proactive: mean window score)`,
        rows: onlyDiffering ? rows.filter((r) => r.differs) : rows,
        columns: [
          { key: "record_id", label: "record" },
          { key: "task", label: "task" },
          { key: "task_type", label: "task type" },
          ...ids.map((id) => ({
            key: id,
            label: id,
            num: true,
            render: (row) =>
              row[id] === null ? "–" : h("a", { href: recordHref(id, row.record_id), class: row[id] === 1 ? "good" : row[id] === 0 ? "bad" : "" }, fmt(row[id])),
          })),
          { key: "differs", label: "differs" },
        ],
      }),
    );
  render(false);
  return [
    h("label", {}, h("input", { type: "checkbox", "data-filter": "differs", onchange: (event) => render(event.target.checked) }), " only records where the runs differ"),
    holder,
  ];
}

async function comparePage(view, params) {
  const ids = (params.get("runs") || "").split(",").map(decodeURIComponent).filter(Boolean);
  if (ids.length < 2) return comparePicker(view, ids);
  const profile = currentProfile();
  const base = ids[0];
  setChildren(view, h("h1", {}, "Comparison"), h("p", { class: "muted" }, `scoring ${plural(ids.length, "run")} under ${profile}…`));
  const [runs, metrics, records, comparisons] = await Promise.all([
    Promise.all(ids.map((id) => Data.run(id))),
    mapLimit(ids, 3, (id) => Data.metrics(id, profile)),
    mapLimit(ids, 3, (id) => Data.records(id, profile)),
    mapLimit(ids.slice(1), 2, (id) => Data.compare(base, id, profile)),
  ]);
  const metricsByRun = Object.fromEntries(ids.map((id, i) => [id, metrics[i]]));
  const recordsByRun = Object.fromEntries(ids.map((id, i) => [id, records[i]]));
  const baselinePicker = h(
    "select",
    { "data-action": "baseline", onchange: (event) => navigate(`#/compare?runs=${[event.target.value, ...ids.filter((id) => id !== event.target.value)].map(enc).join(",")}`) },
    ids.map((id) => h("option", { value: id, selected: id === base }, runLabel(runs[ids.indexOf(id)]))),
  );
  const charts = acrossRunCharts(runs, metricsByRun, "compare");
  setChildren(view, 
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Runs"), " / comparison"),
    h("h1", {}, `Comparison of ${plural(ids.length, "run")}`),
    h("div", { class: "toolbar" }, h("label", {}, "baseline (A) ", baselinePicker), h("a", { href: "#/compare" }, "choose other runs")),
    h("h2", {}, "Adapter settings that differ"),
    comparisons.map(settingDifferences),
    h("h2", {}, "Declared conditions"),
    conditionsTable(runs),
    h("h2", {}, "Metric differences (paired by record, 95% bootstrap intervals)"),
    comparisons.map((comparison) => [
      h("p", { class: "muted" }, `${plural(comparison.paired_records, "paired record")}; ${comparison.only_in_a} only in ${comparison.run_a}, ${comparison.only_in_b} only in ${comparison.run_b}; judges ${judgeName(comparison.judge_a)} / ${judgeName(comparison.judge_b)}`),
      comparison.notes.map((note) => h("p", { class: "note" }, note)),
      differenceTable(comparison),
      h("details", {}, h("summary", {}, "per task type"), byTaskTypeDifferences(comparison)),
    ]),
    h("h2", {}, "Records, paired"),
    ids.slice(1).map((id) => [h("h3", {}, `${id} against ${base}`), pairCards(base, id, pairCounts(recordsByRun[base], recordsByRun[id]))]),
    pairedRecordsTable(runs, recordsByRun),
    charts ? [h("h2", {}, "Across these runs"), charts] : null,
  );
}
