"use strict";
// One record of one run: what was asked, what the model answered and when, and how the
// scorer read it, around the interactive timeline.

function annotationBox(timeline, annotation) {
  if (!annotation) return null;
  const text = annotation.question || annotation.instruction || "";
  const parts = [h("div", { class: "text" }, h("b", {}, timeline.task === "qa" ? "Question: " : "Instruction: "), text)];
  if (annotation.options && annotation.options.length) {
    parts.push(h("ul", { class: "options" }, annotation.options.map((option) => h("li", {}, option))));
  }
  if (timeline.task === "qa") {
    parts.push(
      h("div", {}, `answer ${annotation.answer} · asked at ${fmt(annotation.question_time_s)} s · evidence anchor ${fmt(annotation.evidence_anchor_s)} s`),
    );
  } else {
    parts.push(
      h("div", {}, `given at ${fmt(annotation.instruction_time_s)} s · ${plural(annotation.triggers.length, "target")}: `,
        annotation.triggers.map((t, i) => `#${i + 1} ${t.answer} @ ${fmt(t.point_s ?? t.interval_start_s)} s`).join(" · ")),
    );
  }
  return h("div", { class: "annotation" }, parts);
}

function resultCards(timeline) {
  const result = timeline.result;
  const cards = [];
  if (result.qa) {
    const qa = result.qa;
    cards.push(
      card("outcome", qa.correct ? "correct" : "wrong", `gold ${qa.gold}`, { "data-metric": "qa-correct" }),
      card("prediction", truncate(qa.prediction ?? "–", 30), `parsed ${qa.parsed ?? "–"}${qa.invalid ? " · invalid" : ""}`),
      card("TTFT", fmtSeconds(qa.ttft_s), "question sent → first token", { "data-metric": "ttft" }),
      card("latency", fmtSeconds(qa.latency_s), "question sent → final answer", { "data-metric": "latency" }),
    );
  }
  if (result.proactive) {
    const p = result.proactive;
    const count = (assignment) => p.windows.filter((w) => w.assignment === assignment).length;
    cards.push(
      card("window score", `${fmt(p.score_sum)} / ${p.windows.length}`, `${count("in_window")} in window · ${count("before_window")} early · ${count("no_output")} missed`, { "data-metric": "window-score" }),
      card("false alarms", String(p.false_alarms), `of ${plural(p.answered_episodes, "answered episode")}`, { "data-metric": "false-alarms" }),
      card("redundant", String(p.redundant), `${p.tail_responses} after the last window`),
    );
  }
  if (result.workload) {
    const w = result.workload;
    cards.push(card("workload", plural(w.submitted_images, "image"), `${plural(w.model_calls, "call")} · ${plural(w.output_tokens, "output token")} · ${fmt(w.dropped_frames)} dropped`));
  }
  return h("div", { class: "cards" }, cards);
}

function windowsTable(name, timeline) {
  return dataTable({
    name,
    title: "target windows",
    rows: timeline.windows,
    rowKey: (w) => `window-${w.trigger}`,
    columns: [
      { key: "trigger", label: "#", num: true, render: (w) => String(w.trigger + 1) },
      { key: "trigger_type", label: "type" },
      { key: "start", label: "start (s)", num: true },
      { key: "end", label: "end (s)", num: true },
      { key: "answer", label: "answer" },
      { key: "assignment", label: "assignment" },
      { key: "response_id", label: "response" },
      { key: "onset_t", label: "onset (s)", num: true },
      { key: "prediction", label: "prediction" },
      { key: "score", label: "score", num: true },
      { key: "delay_runtime_s", label: "delay, runtime (s)", num: true },
      { key: "delay_video_s", label: "delay, video (s)", num: true },
      { key: "answered_inside", label: "responses inside", num: true },
    ],
  });
}

function episodesTable(name, timeline) {
  return dataTable({
    name,
    title: "responses",
    rowKey: (e) => `response-${e.response_id}`,
    rows: timeline.episodes.map((e) => ({
      ...e,
      kind: episodeKind(e, timeline),
      generation_s: e.final_s !== null && e.onset_s !== null ? e.final_s - e.onset_s : null,
    })),
    columns: [
      { key: "response_id", label: "response" },
      { key: "onset_t", label: "onset (video s)", num: true },
      { key: "onset_s", label: "began (runtime s)", num: true },
      { key: "final_s", label: "final (runtime s)", num: true },
      { key: "generation_s", label: "generation", num: true, render: (e) => fmtSeconds(e.generation_s) },
      { key: "text", label: "text", render: (e) => truncate(e.text, 80) },
      { key: "kind", label: "reading", render: (e) => h("span", { style: { color: EPISODE_KINDS[e.kind].color } }, EPISODE_KINDS[e.kind].label) },
      { key: "assignment", label: "assignment" },
      { key: "trigger", label: "window", num: true, render: (e) => (e.trigger === null ? "" : String(e.trigger + 1)) },
      { key: "closed", label: "closed" },
    ],
  });
}

function framesTable(name, timeline) {
  return dataTable({
    name,
    title: "frames sent",
    rows: timeline.frames,
    columns: [
      { key: "index", label: "sample", num: true },
      { key: "t", label: "video t (s)", num: true },
      { key: "at_s", label: "sent at (runtime s)", num: true },
      { key: "lag_ms", label: "lag (ms)", num: true },
      { key: "dropped", label: "dropped" },
    ],
  });
}

/** The timeline with its range inputs and downloads; clicking a window or a response
 * highlights its line in the tables below. */
function timelineSection(runId, recordId, timeline, options) {
  const box = h("div", { class: "timeline-box" });
  const downloads = h("span", { class: "toolbar" });
  const number = (name) => h("input", { type: "number", step: "any", "data-range": name, class: "range" });
  const from = number("from");
  const to = number("to");
  function draw(range) {
    const figure = renderTimeline(timeline, { ...options, range });
    setChildren(box, figure);
    setChildren(downloads, figureButtons(figure, fileName("timeline", runId, recordId)));
    from.value = figure.getAttribute("data-t0");
    to.value = figure.getAttribute("data-t1");
  }
  const show = () => {
    const start = Number(from.value);
    const end = Number(to.value);
    if (Number.isFinite(start) && Number.isFinite(end) && end > start) draw([start, end]);
  };
  box.addEventListener("click", (event) => {
    const mark = event.target.closest("circle.response, rect.window");
    if (!mark) return;
    const key = mark.matches("circle") ? `response-${mark.getAttribute("data-response-id")}` : `window-${mark.getAttribute("data-trigger")}`;
    for (const row of document.querySelectorAll("tr.highlight")) row.classList.remove("highlight");
    const row = document.querySelector(`tr[data-row="${CSS.escape(key)}"]`);
    if (row) {
      row.classList.add("highlight");
      row.scrollIntoView({ block: "center" });
    }
  });
  draw(null);
  return [
    h(
      "div",
      { class: "toolbar", "data-figure": "timeline" },
      h("span", { class: "title" }, "video time · hover for details, click a mark for its line below"),
      h("label", {}, "from ", from, " s"),
      h("label", {}, "to ", to, " s"),
      h("button", { type: "button", "data-action": "zoom", onclick: show }, "show"),
      h("button", { type: "button", "data-action": "zoom-all", onclick: () => draw(null) }, "all"),
      downloads,
    ),
    box,
  ];
}

async function recordPage(view, runId, recordId) {
  const profile = currentProfile();
  const [run, timeline, annotation, frames, records] = await Promise.all([
    Data.run(runId),
    Data.timeline(runId, recordId, profile),
    Data.annotation(runId, recordId).catch(() => null),
    Data.frames(runId, recordId).catch((error) => ({ available: false, reason: error.message, frames: [] })),
    Data.records(runId, profile),
  ]);
  const position = records.findIndex((r) => r.record_id === recordId);
  const neighbour = (step) => records[position + step];
  const navLink = (step, label) => {
    const other = neighbour(step);
    return other ? h("a", { href: recordHref(runId, other.record_id), "data-link": step < 0 ? "previous" : "next" }, label) : h("span", { class: "muted" }, label);
  };
  const figure = timelineSection(runId, recordId, timeline, {
    annotation,
    frames,
    fps: run.config.fps,
    thumbnail: (index, width) => Data.thumbnailUrl(runId, recordId, index, width),
  });
  setChildren(view, 
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Runs"), " / ", h("a", { href: `#/runs/${enc(runId)}` }, runId), " / ", recordId),
    h("h1", {}, `${recordId} `, statusBadge(timeline.status)),
    h(
      "p",
      { class: "muted" },
      `${timeline.task} · ${timeline.task_type} · ${timeline.result.source_benchmark} · ${timeline.result.video_path} · ${timeline.pacing ?? ""} pacing · `,
      navLink(-1, "‹ previous"),
      " · ",
      navLink(1, "next ›"),
    ),
    timeline.failure_stage ? h("p", { class: "error" }, `failed at ${timeline.failure_stage}: ${timeline.failure_reason}`) : null,
    annotationBox(timeline, annotation),
    resultCards(timeline),
    h("h2", {}, "Timeline"),
    frames.available ? null : h("p", { class: "muted", "data-frames": "unavailable" }, `frame ticks only: ${frames.reason}`),
    figure,
    timeline.windows.length ? windowsTable(fileName("windows", runId, recordId), timeline) : null,
    episodesTable(fileName("responses", runId, recordId), timeline),
    h("details", {}, h("summary", {}, `${plural(timeline.frames.length, "frame")}, ${plural(timeline.steps_t.length, "decision step")}`), framesTable(fileName("frames", runId, recordId), timeline)),
  );
}
