"use strict";
// A capacity search's curve on its run page (docs/capacity.md): each level's sessions at once
// against its metrics, the SLO's limits as lines, the knee (the largest level meeting every
// term) marked, and the table of levels, each linking to its own run.

const CAPACITY_METRICS = {
  ttft_p50_s: { label: "TTFT p50", unit: "s" },
  ttft_p95_s: { label: "TTFT p95", unit: "s" },
  latency_p95_s: { label: "latency p95", unit: "s" },
  lag_p99_s: { label: "frame lag p99", unit: "s" },
  drop_rate: { label: "dropped frames", unit: "share" },
  failed_rate: { label: "failed sessions", unit: "share" },
  qa_accuracy: { label: "QA accuracy", unit: "0-1" },
  in_window_accuracy: { label: "in-window accuracy", unit: "0-1" },
};

/** null unless the run is a capacity search (`analyses.capacity`). */
function capacitySection(run) {
  const search = run.analyses?.capacity;
  if (!search) return null;
  const points = search.points;
  const slo = search.slo.map((term) => `${term.term} ${term.bound === "max" ? "≤" : "≥"} ${fmt(term.limit)}`).join(", ");
  return [
    h("h2", {}, "Capacity at a latency target"),
    h("p", { class: "capacity-answer", "data-capacity": search.capacity ?? "" }, capacityVerdict(search), ` · SLO ${slo} · endpoint ${search.adapter_url} · speed ${fmt(search.speed)}`),
    h("div", { class: "charts" }, capacityPanels(search).map((metric) => capacityCurve(search, metric))),
    capacityTable(points),
  ];
}

function capacityVerdict(search) {
  if (!search.complete && !search.points.length) return "search not finished: no level ran";
  if (!search.complete) return `search not finished: ${plural(search.capacity, "session")} at once met the SLO so far`;
  if (search.limited_by_max) return `at least ${plural(search.capacity, "session")} at once (the largest level tried, --max, met the SLO)`;
  if (!search.capacity) return `no level met the SLO (${plural(search.first_failing, "session")} at once already break it)`;
  return `${plural(search.capacity, "session")} at once meet the SLO (${search.first_failing} break it)`;
}

/**
 * The metrics drawn: TTFT p95 and lag, every other metric the SLO bounds, and accuracy where
 * measured. Failed sessions (bounded at 0 unless the SLO says otherwise) only once a level
 * had some: a flat line at 0 says nothing the table does not.
 */
function capacityPanels(search) {
  const measured = (metric) => search.points.some((p) => p.metrics[metric] !== null && p.metrics[metric] !== undefined);
  const bounded = search.slo.map((term) => term.metric).filter((metric) => metric !== "failed_rate" || search.points.some((p) => p.metrics.failed > 0));
  const wanted = ["ttft_p95_s", "lag_p99_s", ...bounded, "qa_accuracy", "in_window_accuracy"];
  return [...new Set(wanted)].filter((metric) => measured(metric) || bounded.includes(metric));
}

/** Sessions at once (x) against one metric (y): passing levels filled, failing ones hollow. */
function capacityCurve(search, metric) {
  const { label, unit } = CAPACITY_METRICS[metric];
  const width = 420;
  const height = 240;
  const margin = { left: 56, right: 16, top: 14, bottom: 40 };
  const points = search.points.filter((p) => p.metrics[metric] !== null && p.metrics[metric] !== undefined);
  const terms = search.slo.filter((term) => term.metric === metric);
  const xs = search.points.map((p) => p.sessions);
  const ys = [...points.map((p) => p.metrics[metric]), ...terms.map((term) => term.limit)];
  const xTicks = niceTicks(0, Math.max(1, ...xs));
  const yTicks = niceTicks(0, Math.max(1e-3, ...ys));
  const x = linear([xTicks[0], xTicks[xTicks.length - 1]], [margin.left, width - margin.right]);
  const y = linear([yTicks[0], yTicks[yTicks.length - 1]], [height - margin.bottom, margin.top]);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, "font-family": "sans-serif", "font-size": 11 });
  for (const tick of xTicks) {
    chart.append(svg("text", { x: x(tick), y: height - margin.bottom + 14, "text-anchor": "middle", fill: "#555" }, fmt(tick)));
  }
  for (const tick of yTicks) {
    chart.append(
      svg("line", { x1: margin.left, x2: width - margin.right, y1: y(tick), y2: y(tick), stroke: "#eceef0" }),
      svg("text", { x: margin.left - 6, y: y(tick) + 4, "text-anchor": "end", fill: "#555" }, fmt(tick)),
    );
  }
  chart.append(svgText({ class: "axis-label", x: (margin.left + width - margin.right) / 2, y: height - 6, "text-anchor": "middle", fill: "#222" }, "sessions at once"));
  for (const term of terms) {
    chart.append(
      svg("line", { class: "slo-line", "data-limit": term.limit, x1: margin.left, x2: width - margin.right, y1: y(term.limit), y2: y(term.limit), stroke: "#d62728", "stroke-dasharray": "6 4" }),
      svgText({ x: width - margin.right - 2, y: y(term.limit) - 4, "text-anchor": "end", fill: "#d62728" }, `SLO ${term.bound === "max" ? "≤" : "≥"} ${fmt(term.limit)}`),
    );
  }
  if (search.capacity) {
    const at = x(search.capacity);
    chart.append(
      svg("line", { class: "knee", "data-sessions": search.capacity, x1: at, x2: at, y1: margin.top, y2: height - margin.bottom, stroke: "#2ca02c", "stroke-dasharray": "3 3" }),
      svgText({ x: at + 4, y: margin.top + 10, fill: "#2ca02c" }, `capacity ${search.capacity}`),
    );
  }
  const line = points.map((p, i) => `${i ? "L" : "M"}${x(p.sessions).toFixed(1)},${y(p.metrics[metric]).toFixed(1)}`).join("");
  chart.append(svg("path", { d: line, fill: "none", stroke: SERIES_COLORS[0], "stroke-width": 1.5 }));
  for (const point of points) {
    const dot = marker(0, x(point.sessions), y(point.metrics[metric]), point.passed ? SERIES_COLORS[0] : "#fff");
    dot.setAttribute("stroke", SERIES_COLORS[0]);
    dot.setAttribute("class", "point");
    dot.setAttribute("data-sessions", point.sessions);
    dot.setAttribute("data-passed", point.passed);
    dot.append(svg("title", {}, `${plural(point.sessions, "session")} · ${label}: ${fmt(point.metrics[metric])} · ${point.passed ? "meets the SLO" : point.broken.join("; ")}`));
    chart.append(dot);
  }
  return chartBlock(`capacity-${metric}`, `${label} (${unit}) by sessions at once`, chart);
}

/** One row per level; accuracy and the server's columns only where measured. */
function capacityTable(points) {
  const metric = (key, label) => ({ key, label, num: true, value: (row) => row.metrics[key] });
  const server = points.some((p) => p.server)
    ? [
        { key: "server_requests", label: "server requests", num: true, value: (row) => row.server?.requests ?? null },
        { key: "server_ttft", label: "server TTFT mean (s)", num: true, value: (row) => row.server?.ttft_mean_s ?? null },
      ]
    : [];
  const accuracy = [metric("qa_accuracy", "QA accuracy"), metric("in_window_accuracy", "in-window accuracy")].filter((column) =>
    points.some((p) => p.metrics[column.key] !== null),
  );
  return dataTable({
    name: "capacity-levels",
    title: "levels, each a run of its own (hollow points: the level broke the SLO)",
    rows: points,
    rowKey: (row) => row.sessions,
    columns: [
      { key: "sessions", label: "sessions", num: true },
      { key: "run_id", label: "level run", render: (row) => h("a", { href: `#/runs/${enc(row.run_id)}` }, row.run_id) },
      metric("ttft_p50_s", "TTFT p50 (s)"),
      metric("ttft_p95_s", "TTFT p95 (s)"),
      metric("lag_p99_s", "lag p99 (s)"),
      metric("drop_rate", "dropped"),
      metric("failed", "failed"),
      ...accuracy,
      ...server,
      {
        key: "passed",
        label: "SLO",
        render: (row) => (row.passed ? "meets" : `breaks: ${row.broken.join("; ")}`) + (row.server?.error ? ` · server metrics: ${row.server.error}` : ""),
      },
    ],
  });
}
