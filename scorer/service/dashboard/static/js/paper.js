"use strict";
// A table of the runs picked on the Runs page, for a paper: the results API's /table renders
// it (scorer/paper_table.py, the text `streameval table` prints); this view only chooses its
// options, shows the text and copies or downloads it.

const TABLE_FORMATS = { markdown: ["md", "text/markdown"], latex: ["tex", "text/x-tex"], csv: ["csv", "text/csv"], json: ["json", "application/json"] };
const TABLE_GROUPINGS = { "": "overall", task_type: "per task type", source_benchmark: "per source benchmark" };

/** The address of the table view with these runs and options (the profile is added by the router). */
function tableHash(runs, options) {
  const query = new URLSearchParams({ runs: runs.join(","), format: options.format });
  if (options.by) query.set("by", options.by);
  if (options.intervals) query.set("intervals", "1");
  if (options.metrics) query.set("metrics", options.metrics);
  return `#/table?${query}`;
}

function tableOptions(params) {
  const format = params.get("format");
  return {
    format: format in TABLE_FORMATS ? format : "markdown",
    by: params.get("by") || "",
    intervals: params.get("intervals") === "1",
    metrics: params.get("metrics") || "",
  };
}

function tableControls(runs, options) {
  const go = (changes) => navigate(tableHash(runs, { ...options, ...changes }));
  const choice = (name, choices, current) =>
    h(
      "select",
      { "data-option": name, onchange: (event) => go({ [name]: event.target.value }) },
      Object.entries(choices).map(([value, label]) => h("option", { value, selected: value === current }, label)),
    );
  const formats = Object.fromEntries(Object.keys(TABLE_FORMATS).map((name) => [name, name]));
  return h(
    "div",
    { class: "toolbar" },
    h("label", {}, "format ", choice("format", formats, options.format)),
    h("label", {}, "rows ", choice("by", TABLE_GROUPINGS, options.by)),
    h("label", {}, h("input", { type: "checkbox", "data-option": "intervals", checked: options.intervals, onchange: (event) => go({ intervals: event.target.checked }) }), " 95% intervals"),
    h("label", {}, "metrics ", h("input", { type: "text", "data-option": "metrics", value: options.metrics, placeholder: "the profile's headlines", onchange: (event) => go({ metrics: event.target.value.trim() }) })),
  );
}

/** The `streameval table` command that prints the same text. */
function tableCommand(runs, options, profile) {
  const words = ["streameval table", ...runs, "--format", options.format, "--profile", profile];
  if (options.by) words.push("--by", options.by);
  if (options.intervals) words.push("--intervals");
  if (options.metrics) words.push("--metrics", options.metrics);
  return words.join(" ");
}

/** Copy and download buttons for the table's text. */
function tableButtons(runs, options, text) {
  const [extension, mime] = TABLE_FORMATS[options.format];
  const status = h("span", { class: "muted", "data-status": "" });
  const copy = async () => {
    await navigator.clipboard.writeText(text);
    status.textContent = "copied";
  };
  const save = () => download(`${fileName("table", ...runs)}.${extension}`, mime, text);
  return h(
    "div",
    { class: "toolbar" },
    h("button", { type: "button", class: "primary", "data-action": "copy-table", onclick: copy }, "Copy"),
    h("button", { type: "button", "data-action": "download-table", onclick: save }, "Download"),
    status,
  );
}

async function paperTablePage(view, params) {
  if (Data.isReport) notInReport("a table of several runs");
  const runs = (params.get("runs") || "").split(",").filter(Boolean);
  if (runs.length === 0) throw new ApiError("no runs picked: pick them on the Runs page, then “Table for a paper”");
  const options = tableOptions(params);
  const profile = currentProfile();
  const query = { runs: runs.join(","), profile, format: options.format, by: options.by || null, intervals: options.intervals, metrics: options.metrics || null };
  // A refused option (an unknown metric) is said under the controls, which stay to correct it.
  const shown = await getJson("/table", query).then(
    (answer) => [tableButtons(runs, options, answer.text), h("pre", { class: "paper-table", "data-table-text": options.format }, answer.text)],
    (error) => errorBox(error),
  );
  setChildren(
    view,
    h("h1", {}, "Table for a paper"),
    h("p", { class: "muted" }, `${plural(runs.length, "run")} under ${profile}, the text this command prints: `, h("code", { "data-command": "" }, tableCommand(runs, options, profile))),
    tableControls(runs, options),
    shown,
  );
}
