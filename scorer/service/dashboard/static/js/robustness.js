"use strict";
// Robustness (docs/robustness.md): the run's variants with their parameters and seed (its
// robustness condition), every metric per variant next to clean with the difference to
// clean, and the false alarms per hour on negative streams. Null for a run without variants.

function robustnessSection(runId, metrics) {
  const byVariant = metrics.by_variant;
  if (!byVariant) return null;
  const condition = metrics.conditions?.declared?.robustness;
  return h(
    "section",
    { "data-section": "robustness" },
    h("h2", {}, "Robustness"),
    condition ? variantConditionsTable(runId, condition) : null,
    metrics.negative_streams ? negativeStreamsCards(metrics.negative_streams) : null,
    variantMetricsTable(runId, byVariant),
  );
}

/** The run's robustness conditions: one line per variant, with the run's seed. */
function variantConditionsTable(runId, condition) {
  const rows = condition.variants.map((variant) => ({
    variant: variant.label,
    kind: variant.kind,
    params: Object.entries(variant.params).map(([key, value]) => `${key}=${value}`).join(", "),
    seed: condition.seed,
  }));
  const preset = condition.preset ? ` · preset ${condition.preset}` : "";
  return dataTable({
    name: `robustness-conditions-${runId}`,
    title: `stream variants (seed ${condition.seed}${preset}); each record is also streamed clean`,
    columns: [
      { key: "variant", label: "variant" },
      { key: "kind", label: "kind" },
      { key: "params", label: "parameters" },
      { key: "seed", label: "seed", num: true },
    ],
    rows,
  });
}

function negativeStreamsCards(negative) {
  const help = (name) => metricHelp("negative_streams", name);
  return h(
    "div",
    { class: "cards" },
    card(
      "false alarms per hour",
      fmt(negative.false_alarms_per_hour),
      `${fmtCI(negative.ci95)} · negative streams (no event)`,
      { "data-metric": "negative_streams.false_alarms_per_hour", title: help("false_alarms_per_hour") },
    ),
    card("false alarms", String(negative.false_alarms), `${fmt(negative.hours)} h watched`, { title: help("false_alarms") }),
    card("negative sessions", String(negative.sessions), `of ${plural(negative.records, "record")}`, { title: help("sessions") }),
  );
}

/** Metrics down, variants across: clean's value, then each variant's with its difference. */
function variantMetricsTable(runId, byVariant) {
  const labels = Object.keys(byVariant);
  const clean = byVariant.clean || {};
  const rows = [];
  for (const [family, metrics] of Object.entries(clean)) {
    for (const metric of Object.keys(metrics)) {
      const row = { family, metric };
      for (const label of labels) row[label] = byVariant[label][family]?.[metric] ?? null;
      rows.push(row);
    }
  }
  const difference = (row, label) => {
    const value = row[label]?.value;
    const base = row.clean?.value;
    return value === null || value === undefined || base === null || base === undefined ? null : value - base;
  };
  const signed = (d) => (d === null ? "" : ` (${d >= 0 ? "+" : ""}${fmt(d)})`);
  const columns = [
    { key: "family", label: "family" },
    { key: "metric", label: "metric", render: (row) => metricName(row.family, row.metric) },
    ...labels.map((label) => ({
      key: label,
      label,
      num: true,
      title: label === "clean" ? "the unperturbed streams" : `value under ${label} (difference to clean)`,
      value: (row) => row[label]?.value ?? null,
      render: (row) => (label === "clean" ? fmt(row[label]?.value) : `${fmt(row[label]?.value)}${signed(difference(row, label))}`),
    })),
  ];
  return dataTable({
    name: `robustness-${runId}`,
    title: "every metric per variant, with its difference to clean",
    columns,
    rows,
    exportRows: () =>
      labels.flatMap((label) =>
        metricLines(byVariant[label], { variant: label }).map((line) => ({
          ...line,
          diff_to_clean: difference({ clean: clean[line.family]?.[line.metric], [label]: line }, label),
        })),
      ),
  });
}
