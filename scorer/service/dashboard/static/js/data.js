"use strict";
// Where the views get their data: the results API, or, in a static report, the JSON that
// `streameval report --html` inlined into the page (same shapes, one run, one profile).

const REPORT = (() => {
  const element = document.getElementById("streameval-report");
  return element ? JSON.parse(element.textContent) : null;
})();

// The API sits one level above the dashboard (/ui/ -> /), wherever the app is mounted.
const API_BASE = new URL("../", window.location.href);

class ApiError extends Error {}

async function getJson(path, params) {
  const url = new URL(path.replace(/^\//, ""), API_BASE);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined) url.searchParams.set(key, value);
  }
  const response = await fetch(url);
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (typeof body.detail === "string") detail = body.detail;
    } catch (_) {
      // keep the status line
    }
    throw new ApiError(`${url.pathname}: ${detail}`);
  }
  return response.json();
}

/** Every item of a paginated endpoint. */
async function allPages(path, params) {
  const items = [];
  for (;;) {
    const page = await getJson(path, { ...params, offset: items.length, limit: 1000 });
    items.push(...page.items);
    if (page.items.length === 0 || items.length >= page.total) return items;
  }
}

function notInReport(what) {
  throw new ApiError(`${what} is not part of this static report; open it with streameval results-api`);
}

const enc = encodeURIComponent;

const Data = {
  isReport: REPORT !== null,
  defaultProfile: REPORT ? REPORT.profile : "trace-paper-v1",

  async profiles() {
    return REPORT ? REPORT.profiles : getJson("/profiles");
  },
  async metricHelp() {
    // A report written before the glossary existed has none: its metrics go without hover text.
    return REPORT ? REPORT.metric_help || [] : getJson("/metrics/help");
  },
  async runsPage(offset, limit) {
    return getJson("/runs", { offset, limit });
  },
  async allRuns() {
    return REPORT ? [REPORT.run] : allPages("/runs", {});
  },
  async run(runId) {
    if (REPORT) return REPORT.run.run_id === runId ? REPORT.run : notInReport(`run ${runId}`);
    return getJson(`/runs/${enc(runId)}`);
  },
  async metrics(runId, profile) {
    if (REPORT) return REPORT.run.run_id === runId ? REPORT.metrics : notInReport(`run ${runId}`);
    return getJson(`/runs/${enc(runId)}/metrics`, { profile });
  },
  async records(runId, profile) {
    if (REPORT) return REPORT.records;
    return allPages(`/runs/${enc(runId)}/records`, { profile });
  },
  async timeline(runId, recordId, profile) {
    if (REPORT) return REPORT.timelines[recordId] || notInReport(`the timeline of ${recordId}`);
    return getJson(`/runs/${enc(runId)}/records/${enc(recordId)}/timeline`, { profile });
  },
  async annotation(runId, recordId) {
    if (REPORT) return REPORT.annotations[recordId] || notInReport(`the annotation of ${recordId}`);
    return getJson(`/runs/${enc(runId)}/records/${enc(recordId)}/annotation`);
  },
  async frames(runId, recordId) {
    if (REPORT) {
      const video = REPORT.videos[REPORT.annotations[recordId]?.video_path];
      if (video) return video.frames;
      return { available: false, reason: "this report was written without --thumbnails", frames: [] };
    }
    return getJson(`/runs/${enc(runId)}/records/${enc(recordId)}/frames`);
  },
  thumbnailUrl(runId, recordId, index, width) {
    if (REPORT) return REPORT.videos[REPORT.annotations[recordId].video_path].images[index];
    const path = `runs/${enc(runId)}/records/${enc(recordId)}/frames/${index}?width=${width}`;
    return new URL(path, API_BASE).href;
  },
  async compare(runA, runB, profile) {
    if (REPORT) notInReport("run comparison");
    return getJson("/compare", { run_a: runA, run_b: runB, profile });
  },
  async progress(runId) {
    if (REPORT) notInReport("live progress");
    return getJson(`/runs/${enc(runId)}/progress`);
  },
};
