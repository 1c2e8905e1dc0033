"use strict";
// Hand-drawn SVG charts: bars with interval whiskers, scatter plots, sparklines.

const SERIES_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"];

/** Round tick values covering [lo, hi]. */
function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) {
    const pad = Math.abs(lo) > 0 ? Math.abs(lo) * 0.1 : 1;
    return niceTicks(lo - pad, hi + pad, count);
  }
  const raw = (hi - lo) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  const ticks = [];
  for (let t = Math.floor(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push(Number(t.toPrecision(12)));
  }
  if (ticks[ticks.length - 1] < hi) ticks.push(Number((ticks[ticks.length - 1] + step).toPrecision(12)));
  return ticks;
}

function linear(domain, range) {
  const [d0, d1] = domain;
  const [r0, r1] = range;
  return (v) => r0 + ((v - d0) / (d1 - d0 || 1)) * (r1 - r0);
}

/** A titled chart with SVG/PNG downloads; `help` is the title's hover text. */
function chartBlock(name, title, element, help) {
  return h(
    "div",
    { class: "chart", "data-chart": name },
    h("div", { class: "toolbar" }, h("span", { class: "title", title: help || null }, title), figureButtons(element, name)),
    element,
  );
}

/** SVG text with hover text (a <title> child) when `help` is given. */
function svgText(attrs, text, help) {
  return svg("text", attrs, text, help ? svg("title", {}, help) : null);
}

const POINT_LABEL_PX = 10;
let measuring = null;

/** The width of `text` in `size` px of `family`, as the charts and the timeline draw it. */
function textWidth(text, size, family = "sans-serif") {
  measuring ??= document.createElement("canvas").getContext("2d");
  measuring.font = `${size}px ${family}`;
  return measuring.measureText(text).width;
}

function overlaps(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

/**
 * Where a point's label goes: right or left of the point, above or below, the first box
 * inside `area` that overlaps nothing in `taken` (the box is added to it); null when every
 * spot is taken. The box holds the text's ascent and descent, with a pixel to spare.
 */
function placeLabel(text, cx, cy, area, taken) {
  const width = textWidth(text, POINT_LABEL_PX) + 2;
  const height = POINT_LABEL_PX * 1.4;
  const spots = [
    [cx + 7, cy - 4 - height],
    [cx + 7, cy + 4],
    [cx - 7 - width, cy - 4 - height],
    [cx - 7 - width, cy + 4],
  ];
  for (const [x, y] of spots) {
    const box = { x, y, width, height };
    const inside = x >= area.x && y >= area.y && x + width <= area.x + area.width && y + height <= area.y + area.height;
    if (inside && !taken.some((other) => overlaps(box, other))) {
      taken.push(box);
      return { x: x + 1, y: y + POINT_LABEL_PX + 1 }; // where the text's baseline starts
    }
  }
  return null;
}

/** Horizontal bars, one per item ({label, value, ci}), with 95% interval whiskers; `help`
 * explains the metric (the title's hover text). */
function barChart(name, title, items, unit, help) {
  const width = 460;
  const left = 150;
  const right = 60;
  const rowHeight = 26;
  const top = 8;
  const height = top + items.length * rowHeight + 30;
  const values = items.flatMap((i) => [i.value, ...(i.ci || [])]).filter((v) => v !== null && v !== undefined);
  const lo = Math.min(0, ...values);
  const hi = Math.max(0, ...values);
  const ticks = niceTicks(lo, hi > lo ? hi : lo + 1);
  const x = linear([ticks[0], ticks[ticks.length - 1]], [left, width - right]);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, "font-family": "sans-serif", "font-size": 11 });
  for (const tick of ticks) {
    chart.append(
      svg("line", { x1: x(tick), x2: x(tick), y1: top, y2: height - 24, stroke: "#e3e6e9" }),
      svg("text", { x: x(tick), y: height - 10, "text-anchor": "middle", fill: "#555" }, fmt(tick)),
    );
  }
  items.forEach((item, i) => {
    const y = top + i * rowHeight;
    const color = SERIES_COLORS[i % SERIES_COLORS.length];
    chart.append(svg("text", { x: left - 6, y: y + 16, "text-anchor": "end", fill: "#222" }, truncate(item.label, 24)));
    if (item.value === null || item.value === undefined) {
      chart.append(svg("text", { x: left + 4, y: y + 16, fill: "#888" }, "no value"));
      return;
    }
    const x0 = x(Math.min(0, item.value));
    chart.append(
      svg(
        "rect",
        { class: "bar", x: x0, y: y + 4, width: Math.max(1, Math.abs(x(item.value) - x(0))), height: rowHeight - 10, fill: color, "fill-opacity": 0.75, "data-value": item.value },
        svg("title", {}, `${item.label}: ${fmt(item.value)}${unit ? ` ${unit}` : ""} ${fmtCI(item.ci)}`),
      ),
    );
    if (item.ci) {
      const mid = y + rowHeight / 2 - 1;
      chart.append(
        svg("line", { x1: x(item.ci[0]), x2: x(item.ci[1]), y1: mid, y2: mid, stroke: "#222" }),
        svg("line", { x1: x(item.ci[0]), x2: x(item.ci[0]), y1: mid - 5, y2: mid + 5, stroke: "#222" }),
        svg("line", { x1: x(item.ci[1]), x2: x(item.ci[1]), y1: mid - 5, y2: mid + 5, stroke: "#222" }),
      );
    }
    const end = Math.max(x(item.value), item.ci ? x(item.ci[1]) : 0);
    chart.append(svg("text", { x: end + 4, y: y + 16, fill: "#222" }, fmt(item.value)));
  });
  return chartBlock(name, title + (unit ? ` (${unit})` : ""), chart, help);
}

const CAP_HALF_WIDTH = 6; // wider than a marker, so even an interval of one value shows

/**
 * Points of several series ({name, help, points: [{label, x, y, yci}]}) on shared axes
 * ({label, help}); each series has its own colour and marker, each point its interval as an
 * error bar (none where `yci` is null: too few videos for one), a hover label and, where it
 * fits without covering another label, point or error bar, a label.
 */
function scatterChart(name, title, xAxis, yAxis, series) {
  const width = 600;
  const height = 320;
  const margin = { left: 56, right: 200, top: 14, bottom: 44 };
  const points = series.flatMap((s) => s.points).filter((p) => p.x !== null && p.y !== null);
  const xs = points.map((p) => p.x);
  const ys = points.flatMap((p) => [p.y, ...(p.yci || [])]);
  const xTicks = niceTicks(Math.min(0, ...xs), Math.max(1e-9, ...xs));
  const yTicks = niceTicks(Math.min(0, ...ys), Math.max(1, ...ys));
  const x = linear([xTicks[0], xTicks[xTicks.length - 1]], [margin.left, width - margin.right]);
  const y = linear([yTicks[0], yTicks[yTicks.length - 1]], [height - margin.bottom, margin.top]);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, "font-family": "sans-serif", "font-size": 11 });
  for (const tick of xTicks) {
    chart.append(
      svg("line", { x1: x(tick), x2: x(tick), y1: margin.top, y2: height - margin.bottom, stroke: "#eceef0" }),
      svg("text", { x: x(tick), y: height - margin.bottom + 14, "text-anchor": "middle", fill: "#555" }, fmt(tick)),
    );
  }
  for (const tick of yTicks) {
    chart.append(
      svg("line", { x1: margin.left, x2: width - margin.right, y1: y(tick), y2: y(tick), stroke: "#eceef0" }),
      svg("text", { x: margin.left - 6, y: y(tick) + 4, "text-anchor": "end", fill: "#555" }, fmt(tick)),
    );
  }
  chart.append(
    svgText({ class: "axis-label", x: (margin.left + width - margin.right) / 2, y: height - 8, "text-anchor": "middle", fill: "#222" }, xAxis.label, xAxis.help),
    svgText({ class: "axis-label", x: 12, y: (margin.top + height - margin.bottom) / 2, "text-anchor": "middle", fill: "#222", transform: `rotate(-90 12 ${(margin.top + height - margin.bottom) / 2})` }, yAxis.label, yAxis.help),
  );
  // Labels keep clear of every point and of each other; a point left without one (runs
  // with the same numbers would smear their labels into one) is named by its hover label.
  const area = { x: margin.left, y: margin.top - 8, width: width - margin.right - margin.left, height: height - margin.bottom - margin.top + 8 };
  const taken = points.flatMap((p) => [
    { x: x(p.x) - 6, y: y(p.y) - 6, width: 12, height: 12 },
    ...(p.yci ? [{ x: x(p.x) - CAP_HALF_WIDTH, y: y(p.yci[1]), width: 2 * CAP_HALF_WIDTH, height: y(p.yci[0]) - y(p.yci[1]) }] : []),
  ]);
  let unlabelled = 0;
  series.forEach((serie, s) => {
    const color = SERIES_COLORS[s % SERIES_COLORS.length];
    const legendY = margin.top + 10 + s * 16;
    chart.append(marker(s, width - margin.right + 16, legendY, color), svgText({ class: "legend", x: width - margin.right + 26, y: legendY + 4, fill: "#222" }, serie.name, serie.help));
    for (const point of serie.points) {
      if (point.x === null || point.y === null) continue;
      if (point.yci) chart.append(errorBar(x(point.x), y(point.yci[0]), y(point.yci[1]), color, point, serie.name));
      const dot = marker(s, x(point.x), y(point.y), color);
      dot.setAttribute("class", "point");
      dot.setAttribute("data-label", point.label);
      dot.setAttribute("data-series", serie.name);
      const interval = point.yci ? `95% CI ${fmtCI(point.yci)}` : "no 95% interval";
      dot.append(svg("title", {}, `${point.label} · ${serie.name}: ${fmt(point.x)}, ${fmt(point.y)} · ${interval}`));
      chart.append(dot);
      const text = truncate(point.label, 18);
      const spot = placeLabel(text, x(point.x), y(point.y), area, taken);
      if (spot) chart.append(svg("text", { class: "point-label", x: spot.x, y: spot.y, fill: "#444", "font-size": POINT_LABEL_PX }, text));
      else unlabelled += 1;
    }
  });
  const block = chartBlock(name, title, chart);
  if (unlabelled) {
    const note = `${plural(unlabelled, "point")} without a label (it would cover another): hover a point for its run`;
    block.append(h("p", { class: "cov", "data-unlabelled": unlabelled }, note));
  }
  return block;
}

/** A vertical interval from `yLow` to `yHigh` (pixels) with caps, at `cx`. */
function errorBar(cx, yLow, yHigh, color, point, series) {
  const cap = (cy) => svg("line", { x1: cx - CAP_HALF_WIDTH, x2: cx + CAP_HALF_WIDTH, y1: cy, y2: cy });
  return svg(
    "g",
    { class: "error-bar", stroke: color, "stroke-width": 1.5, "data-label": point.label, "data-series": series, "data-low": point.yci[0], "data-high": point.yci[1] },
    svg("line", { x1: cx, x2: cx, y1: yLow, y2: yHigh }),
    cap(yLow),
    cap(yHigh),
  );
}

/** Circles for the first series, squares, then diamonds, so series differ without colour. */
function marker(series, cx, cy, color) {
  const shape = series % 3;
  if (shape === 0) return svg("circle", { cx, cy, r: 5, fill: color });
  if (shape === 1) return svg("rect", { x: cx - 4.5, y: cy - 4.5, width: 9, height: 9, fill: color });
  return svg("path", { d: `M${cx},${cy - 6}L${cx + 6},${cy}L${cx},${cy + 6}L${cx - 6},${cy}Z`, fill: color });
}

/** A small line of recent values (events per second in the live view). */
function sparkline(values, width = 320, height = 60) {
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "sparkline" });
  const finite = values.filter((v) => v !== null);
  if (finite.length < 2) return chart;
  const top = Math.max(...finite, 1e-9);
  const x = linear([0, values.length - 1], [2, width - 2]);
  const y = linear([0, top], [height - 4, 4]);
  // Polls without a rate (the first one) leave a gap rather than a false zero.
  let path = "";
  values.forEach((v, i) => {
    if (v === null) return;
    path += `${path && values[i - 1] !== null ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
  });
  chart.append(svg("path", { d: path, fill: "none", stroke: "#1f77b4", "stroke-width": 1.5 }));
  chart.append(svg("text", { x: 4, y: 12, "font-size": 10, fill: "#555", "font-family": "sans-serif" }, `max ${fmt(top)}`));
  return chart;
}
