"use strict";
// Helpers shared by every view: building DOM and SVG, formatting numbers, downloading files.
// The dashboard is plain scripts loaded in order (no build step); top-level names are shared.

const SVG_NS = "http://www.w3.org/2000/svg";

function appendChildren(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

function setAttributes(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "class") {
      el.setAttribute("class", value);
    } else if (key === "style") {
      // Properties through the CSSOM ({width: "40%"}): the page's Content-Security-Policy
      // refuses inline style attributes, not styles set from its own scripts.
      Object.assign(el.style, value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  return el;
}

/** Replace an element's children (arrays flattened, null skipped, as in h()). */
function setChildren(el, ...children) {
  el.replaceChildren();
  return appendChildren(el, children);
}

/** An HTML element: h("a", {href: "#/"}, "text", child, [more children]). */
function h(tag, attrs, ...children) {
  return appendChildren(setAttributes(document.createElement(tag), attrs), children);
}

/** An SVG element, same calling convention as h(). */
function svg(tag, attrs, ...children) {
  return appendChildren(setAttributes(document.createElementNS(SVG_NS, tag), attrs), children);
}

/** Numbers to 4 significant digits (like the CLI's tables); "–" for a missing value;
 * booleans as yes / no. */
function fmt(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  return String(Number(value.toPrecision(4)));
}

/** `n noun`, the noun singular for exactly one ("1 worker", "2 workers"); `many` is the
 * plural where it is not noun + "s". */
function plural(n, noun, many = `${noun}s`) {
  return `${fmt(n)} ${n === 1 ? noun : many}`;
}

/** A count in a unit the API names in the plural ("records", "answered episodes"). */
function counted(n, unit) {
  return unit ? plural(n, unit.replace(/s$/, ""), unit) : fmt(n);
}

function fmtCI(ci) {
  return ci ? `[${fmt(ci[0])}, ${fmt(ci[1])}]` : "–";
}

/** Seconds as ms below one second: TTFT and latencies read better that way. */
function fmtSeconds(value) {
  if (value === null || value === undefined) return "–";
  return Math.abs(value) < 1 ? `${fmt(value * 1000)} ms` : `${fmt(value)} s`;
}

function fmtDate(text) {
  if (!text) return "–";
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? text : date.toISOString().replace("T", " ").slice(0, 19);
}

function truncate(text, length) {
  const value = String(text ?? "");
  return value.length > length ? `${value.slice(0, length - 1)}…` : value;
}

/** A name safe for downloaded files. */
function fileName(...parts) {
  return parts.join("-").replace(/[^\w.-]+/g, "_");
}

function download(name, mime, content) {
  const blob = content instanceof Blob ? content : new Blob([content], { type: mime });
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function csvCell(value) {
  if (value === null || value === undefined) return "";
  const text = typeof value === "object" ? JSON.stringify(value) : String(value);
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** CSV text: a header of column keys, then one line per row of raw (unformatted) values. */
function csvText(keys, rows) {
  const lines = [keys.map(csvCell).join(",")];
  for (const row of rows) lines.push(keys.map((key) => csvCell(row[key])).join(","));
  return `${lines.join("\r\n")}\r\n`;
}

/** Nested objects as dotted keys: {run: {fps: 1}} -> {"run.fps": 1}; arrays of objects by index. */
function flatten(value, prefix = "", out = {}) {
  if (value !== null && typeof value === "object" && !(Array.isArray(value) && value.every(isScalar))) {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    for (const [key, inner] of entries) flatten(inner, prefix ? `${prefix}.${key}` : key, out);
  } else {
    out[prefix] = Array.isArray(value) ? value.join(", ") : value;
  }
  return out;
}

function isScalar(value) {
  return value === null || typeof value !== "object";
}

// The metric glossary ({family, name, unit, scale, meaning}), loaded once at start, by
// "family.name" (one name can mean different things in two families) or, for the columns
// every metric table shows (95% CI, coverage), by name.
let metricGlossary = new Map();

function setGlossary(entries) {
  metricGlossary = new Map(entries.map((e) => [e.family ? `${e.family}.${e.name}` : e.name, e]));
}

function helpText(entry) {
  if (!entry) return null;
  return `${entry.name}: ${entry.meaning}\nunit: ${entry.unit || "none"} · scale: ${entry.scale}`;
}

/** A metric's meaning, unit and scale as hover text; null for a metric the glossary lacks. */
function metricHelp(family, metric) {
  return helpText(metricGlossary.get(`${family}.${metric}`));
}

/** The hover text of a metric table's column ("95% CI", "coverage"). */
function columnHelp(column) {
  return helpText(metricGlossary.get(column));
}

function errorBox(error) {
  return h("p", { class: "error" }, String(error && error.message ? error.message : error));
}

function card(label, value, sub, attrs) {
  return h(
    "div",
    { class: "card", ...attrs },
    h("div", { class: "label" }, label),
    h("div", { class: "value" }, value),
    sub ? h("div", { class: "sub" }, sub) : null,
  );
}

/** Run `task` over `items`, at most `limit` at a time, results in the items' order. */
async function mapLimit(items, limit, task) {
  const results = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const index = next++;
      results[index] = await task(items[index], index);
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

// ------------------------------------------------------------------ SVG and PNG export

async function asDataUrl(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const blob = await response.blob();
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}

/** The SVG as a standalone file: images inlined, since a saved SVG cannot reach the server. */
async function standaloneSvg(element) {
  const copy = element.cloneNode(true);
  copy.setAttribute("xmlns", SVG_NS);
  for (const image of copy.querySelectorAll("image")) {
    const href = image.getAttribute("href");
    if (href && !href.startsWith("data:")) image.setAttribute("href", await asDataUrl(href));
  }
  return new XMLSerializer().serializeToString(copy);
}

async function downloadSvg(element, name) {
  download(`${name}.svg`, "image/svg+xml", await standaloneSvg(element));
}

async function downloadPng(element, name, scale = 2) {
  const text = await standaloneSvg(element);
  const box = element.viewBox.baseVal;
  const url = URL.createObjectURL(new Blob([text], { type: "image/svg+xml" }));
  try {
    const image = new Image();
    await new Promise((resolve, reject) => {
      image.onload = resolve;
      image.onerror = () => reject(new Error("the SVG could not be drawn"));
      image.src = url;
    });
    const canvas = h("canvas", { width: box.width * scale, height: box.height * scale });
    const context = canvas.getContext("2d");
    context.fillStyle = "#ffffff";
    context.fillRect(0, 0, canvas.width, canvas.height);
    context.drawImage(image, 0, 0, canvas.width, canvas.height);
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
    download(`${name}.png`, "image/png", blob);
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** SVG and PNG download buttons for a drawn figure. */
function figureButtons(element, name) {
  return [
    h("button", { type: "button", "data-export": "svg", onclick: () => downloadSvg(element, name) }, "SVG"),
    h("button", { type: "button", "data-export": "png", onclick: () => downloadPng(element, name) }, "PNG"),
  ];
}
