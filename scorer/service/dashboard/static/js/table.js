"use strict";
// Tables with sortable columns and CSV/JSON export of their raw values.

/**
 * A table of `rows` (plain objects).
 *
 * columns: [{key, label, value?: row => raw value, render?: row => text or node, num?: bool,
 *            noExport?: bool}]
 *   `value` gives what sorting and exports use (default row[key]); `render` what is shown.
 * exportRows: optional () => [{...}] when the export should be a different (long) shape,
 *   e.g. a pivoted table exports one line per (slice, metric).
 * rowKey: optional row => key, set as the row's data-row attribute (for linking to a row).
 */
function dataTable({ name, title, columns, rows, onRow, exportRows, empty, rowKey }) {
  const valueOf = (column, row) => (column.value ? column.value(row) : row[column.key]);
  let order = rows.slice();
  let sortKey = null;
  let ascending = true;

  const body = h("tbody");
  const headers = columns.map((column) =>
    h(
      "th",
      {
        class: column.num ? "num" : null,
        "data-key": column.key,
        title: column.title || null,
        onclick: () => sortBy(column),
      },
      column.label ?? column.key,
    ),
  );

  function fill() {
    body.replaceChildren(
      ...order.map((row) =>
        h(
          "tr",
          {
            class: onRow ? "clickable" : null,
            "data-row": rowKey ? rowKey(row) : null,
            onclick: onRow ? (event) => { if (!event.target.closest("a, button, input")) onRow(row); } : null,
          },
          columns.map((column) =>
            h(
              "td",
              { class: column.num ? "num" : null, "data-key": column.key },
              column.render ? column.render(row) : fmt(valueOf(column, row)),
            ),
          ),
        ),
      ),
    );
    if (order.length === 0) {
      body.append(h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, empty || "nothing to show")));
    }
  }

  function sortBy(column) {
    ascending = sortKey === column.key ? !ascending : true;
    sortKey = column.key;
    const sign = ascending ? 1 : -1;
    order = rows.slice().sort((a, b) => sign * compareValues(valueOf(column, a), valueOf(column, b)));
    headers.forEach((th) => th.classList.remove("sorted-asc", "sorted-desc"));
    headers[columns.indexOf(column)].classList.add(ascending ? "sorted-asc" : "sorted-desc");
    fill();
  }

  function exported() {
    if (exportRows) return exportRows();
    const kept = columns.filter((c) => !c.noExport);
    return order.map((row) => Object.fromEntries(kept.map((c) => [c.key, valueOf(c, row)])));
  }

  function exportCsv() {
    const lines = exported();
    const keys = lines.length ? Object.keys(lines[0]) : columns.filter((c) => !c.noExport).map((c) => c.key);
    download(`${name}.csv`, "text/csv", csvText(keys, lines));
  }

  fill();
  return h(
    "div",
    { class: "table-block", "data-table": name },
    h(
      "div",
      { class: "toolbar" },
      h("span", { class: "title" }, title || ""),
      h("button", { type: "button", "data-export": "csv", onclick: exportCsv }, "CSV"),
      h(
        "button",
        {
          type: "button",
          "data-export": "json",
          onclick: () => download(`${name}.json`, "application/json", JSON.stringify(exported(), null, 1)),
        },
        "JSON",
      ),
    ),
    h("div", { class: "table-wrap" }, h("table", { class: "data" }, h("thead", {}, h("tr", {}, headers)), body)),
  );
}

/** Missing values sort last; numbers numerically; anything else as text. */
function compareValues(a, b) {
  const missingA = a === null || a === undefined;
  const missingB = b === null || b === undefined;
  if (missingA || missingB) return missingA - missingB;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

/** Key/value pairs of an object (nested keys dotted) as an exportable table. */
function keyValueTable(name, title, object) {
  const rows = Object.entries(flatten(object)).map(([key, value]) => ({ key, value }));
  return dataTable({
    name,
    title,
    columns: [
      { key: "key", label: "key" },
      { key: "value", label: "value", render: (row) => fmt(row.value) },
    ],
    rows,
  });
}

/** An adapter's settings, one per line ("(absent)" for one the adapter did not declare). */
function settingsTable(name, title, settings) {
  const rows = Object.entries(settings).map(([key, value]) => ({ key, value }));
  return dataTable({
    name,
    title,
    rows,
    empty: "none declared",
    columns: [
      { key: "key", label: "setting" },
      { key: "value", label: "value", render: (row) => settingText(row.value) },
    ],
  });
}

function settingText(value) {
  return value === null || value === undefined ? "(absent)" : typeof value === "string" ? value : String(value);
}

// ------------------------------------------------------------------ metric tables

/** One metric per line: the shape every metric table exports. */
function metricLines(families, extra) {
  const lines = [];
  for (const [family, metrics] of Object.entries(families || {})) {
    for (const [metric, m] of Object.entries(metrics)) {
      lines.push({
        ...extra,
        family,
        metric,
        value: m.value,
        ci_low: m.ci95 ? m.ci95[0] : null,
        ci_high: m.ci95 ? m.ci95[1] : null,
        population: m.population,
        observed: m.observed,
        coverage: m.coverage,
        unit: m.unit,
      });
    }
  }
  return lines;
}

function metricsTable(name, title, families) {
  return dataTable({
    name,
    title,
    columns: [
      { key: "family", label: "family" },
      { key: "metric", label: "metric", render: (r) => metricName(r.family, r.metric) },
      { key: "value", label: "value", num: true },
      { key: "ci95", label: "95% CI", num: true, title: columnHelp("95% CI"), value: (r) => r.ci_low, render: (r) => fmtCI(r.ci_low === null ? null : [r.ci_low, r.ci_high]) },
      { key: "population", label: "population", num: true, render: (r) => counted(r.population, r.unit) },
      { key: "observed", label: "observed", num: true },
      { key: "coverage", label: "coverage", num: true, title: columnHelp("coverage") },
    ],
    rows: metricLines(families),
    exportRows: () => metricLines(families),
  });
}

/** Slices (task types, sources) down, the metrics of one family across; each cell shows the
 * value, its interval and its population with coverage. A metric no slice has a population
 * for (a count the adapters never report) gets no column, as in `compare`; the export still
 * has its lines. Exports one line per cell. */
function sliceTable(name, title, slices, family, sliceLabel) {
  const names = [];
  for (const families of Object.values(slices)) {
    for (const [metric, m] of Object.entries(families[family] || {})) {
      if (m?.population > 0 && !names.includes(metric)) names.push(metric);
    }
  }
  const rows = Object.entries(slices)
    .filter(([, families]) => families[family])
    .map(([slice, families]) => ({ slice, metrics: families[family] }));
  const columns = [
    { key: "slice", label: sliceLabel },
    ...names.map((metric) => ({
      key: metric,
      label: breakable(metric),
      title: metricHelp(family, metric),
      num: true,
      value: (row) => row.metrics[metric]?.value ?? null,
      render: (row) => metricCell(row.metrics[metric]),
    })),
  ];
  return dataTable({
    name,
    title,
    columns,
    rows,
    exportRows: () =>
      rows.flatMap((row) => metricLines({ [family]: row.metrics }, { [sliceLabel.replace(/ /g, "_")]: row.slice })),
  });
}

/** A snake_case name that may wrap after its underscores (a header of a wide table). */
function breakable(name) {
  return name.split("_").flatMap((part, i, parts) => (i < parts.length - 1 ? [`${part}_`, h("wbr")] : [part]));
}

/** A metric's name with its meaning, unit and scale as hover text. */
function metricName(family, metric) {
  return h("span", { class: "metric-name", title: metricHelp(family, metric) }, metric);
}

function metricCell(m) {
  if (!m) return "";
  return [
    h("span", { class: "v" }, fmt(m.value)),
    h("span", { class: "ci" }, fmtCI(m.ci95)),
    h("span", { class: "cov" }, `n=${m.population} · cov ${fmt(m.coverage)}`),
  ];
}
