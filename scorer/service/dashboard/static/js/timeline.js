"use strict";
// One record's timeline as SVG, in video time: the frames the model was sent (thumbnails
// when the frame cache is reachable, ticks always), the audio chunks it was sent (hollow
// when the video has no sound) under the sounds the record names, the question or
// instruction, evidence,
// target windows with their assignment, every response episode at its onset, and the
// polled decision steps. Colours are SVG attributes (not CSS) so a downloaded SVG or PNG
// looks the same as the page.

const TIMELINE_WIDTH = 1200;
const THUMB_WIDTH = 64;
const TIMELINE_FONT = '"DejaVu Sans", Arial, sans-serif';

// What a response episode was, for the scorer, and how it is drawn.
const EPISODE_KINDS = {
  "in-window": { color: "#2e7d32", label: "in window, correct" },
  "in-window-wrong": { color: "#ef6c00", label: "in window, wrong content" },
  early: { color: "#8e24aa", label: "before its window (early)" },
  "false-alarm": { color: "#c62828", label: "false alarm" },
  redundant: { color: "#616161", label: "redundant (window already answered)" },
  tail: { color: "#78909c", label: "after the last window (not scored)" },
  silent: { color: "#9e9e9e", label: "empty or silence token", hollow: true },
  correct: { color: "#2e7d32", label: "answer, correct" },
  wrong: { color: "#c62828", label: "answer, wrong" },
  unscored: { color: "#9e9e9e", label: "answer (not the scored one)" },
};

const WINDOW_KINDS = {
  hit: { color: "#2e7d32", label: "window answered in time, correct" },
  wrong: { color: "#ef6c00", label: "window answered in time, wrong content" },
  early: { color: "#8e24aa", label: "window took an earlier response" },
  missed: { color: "#c62828", label: "window missed", dashed: true },
};

// The audio lane: chunks the Core sent, and the sound events the benchmark record names.
const AUDIO_KINDS = {
  heard: { color: "#3949ab", label: "audio chunk sent" },
  silent: { color: "#9e9e9e", label: "audio chunk sent (video without sound: zeros)", dashed: true, hollow: true },
  sound: { color: "#00897b", label: "sound event (ground truth)" },
};

function windowKind(window) {
  if (window.assignment === "in_window") return window.score > 0 ? "hit" : "wrong";
  if (window.assignment === "before_window") return "early";
  return "missed";
}

function episodeKind(episode, timeline) {
  if (!episode.answered) return "silent";
  if (timeline.task === "qa") {
    const qa = timeline.result.qa;
    if (!qa || qa.answer_t === null || episode.onset_t !== qa.answer_t) return "unscored";
    return qa.correct ? "correct" : "wrong";
  }
  if (episode.assignment === "in_window") {
    const window = timeline.windows.find((w) => w.response_id === episode.response_id);
    return window && window.score > 0 ? "in-window" : "in-window-wrong";
  }
  if (episode.assignment === "before_window") return "early";
  if (episode.false_alarm) return "false-alarm";
  if (episode.tail) return "tail";
  return "redundant";
}

/** Every video time the timeline shows, to fix the axis. */
function timelineSpan(timeline, annotation, frameInterval) {
  const times = [
    ...timeline.frames.map((f) => f.t),
    ...timeline.frames.map((f) => f.t + frameInterval),
    ...(timeline.audio || []).flatMap((a) => [a.start_t, a.t]),
    ...(timeline.sound_events || []).flatMap((e) => [e.start_s, e.end_s]),
    ...timeline.windows.flatMap((w) => [w.start, w.end]),
    ...timeline.episodes.map((e) => e.onset_t),
    ...timeline.steps_t,
    timeline.task_t,
    ...(annotation?.evidence_spans || []).flatMap((s) => [s.start_s, s.end_s]),
  ].filter((t) => t !== null && t !== undefined);
  if (times.length === 0) return [0, 1];
  const t0 = Math.floor(Math.min(...times));
  const t1 = Math.ceil(Math.max(...times));
  return [t0, t1 > t0 ? t1 : t0 + 1];
}

/**
 * timeline: the API's RecordTimeline; annotation: the stored benchmark record (or null);
 * frames: the API's FrameIndex; fps: the run's sampling rate; thumbnail(index, width): URL;
 * range: [from, to] seconds to show (default: all of it). Marks outside the range are clipped.
 */
function renderTimeline(timeline, { annotation, frames, fps, thumbnail, range }) {
  const left = 110;
  const right = THUMB_WIDTH + 12;
  const frameInterval = fps > 0 ? 1 / fps : 0;
  const [t0, t1] = range || timelineSpan(timeline, annotation, frameInterval);
  const x = linear([t0, t1], [left, TIMELINE_WIDTH - right]);
  const plotWidth = TIMELINE_WIDTH - left - right;

  const lanes = [];
  let y = 8;
  const lane = (name, height) => {
    const top = y;
    lanes.push({ name, top, height });
    y += height + 6;
    return top;
  };

  const thumbs = frames && frames.available ? thumbnailPlan(timeline, frames, plotWidth, t0, t1) : null;
  const framesTop = lane("frames", (thumbs ? thumbs.height + 4 : 0) + 16);
  const audio = timeline.audio || [];
  const sounds = timeline.sound_events || [];
  // Sound events, when the record names any, above the chunks.
  const audioTop = audio.length || sounds.length ? lane("audio", sounds.length ? 30 : 16) : null;
  // With evidence marks, two rows: the marks above, the question or instruction below them.
  const taskTop = lane(timeline.task === "qa" ? "question" : "instruction", hasEvidence(annotation) ? 40 : 22);
  const windowsTop = timeline.windows.length ? lane("windows", 28) : null;
  const responsesTop = lane("responses", 46);
  const stepsTop = timeline.steps_t.length ? lane("decisions", 12) : null;
  const axisTop = y;
  const legendTop = axisTop + 30;

  const root = svg("svg", {
    class: "timeline",
    width: TIMELINE_WIDTH,
    "font-family": TIMELINE_FONT,
    "font-size": 11,
    "data-t0": t0,
    "data-t1": t1,
    "data-x0": left,
    "data-x1": TIMELINE_WIDTH - right,
  });
  const background = svg("rect", { x: 0, y: 0, width: TIMELINE_WIDTH, fill: "#ffffff" });
  root.append(background);
  for (const { name, top, height } of lanes) {
    root.append(
      svg("rect", { class: "lane", x: left, y: top, width: plotWidth, height, fill: "#f6f8fa", "data-lane": name }),
      svg("text", { x: 8, y: top + height / 2 + 4, fill: "#444" }, name),
    );
  }
  // Marks in video time are clipped to the visible range; a thumbnail shows its frame from
  // its time on, so thumbnails may run into the right margin.
  const plot = clippedLayer(root, "marks", left - 8, plotWidth + 16, axisTop + 10);
  const pictures = clippedLayer(root, "thumbs", left, TIMELINE_WIDTH - left, axisTop);

  // Frames: a tick per frame sent (red when the Core dropped it), thumbnails above.
  const tickTop = framesTop + (thumbs ? thumbs.height + 4 : 0);
  for (const frame of timeline.frames) {
    plot.append(
      svg(
        "line",
        {
          class: `frame-tick${frame.dropped ? " dropped" : ""}`,
          x1: x(frame.t), x2: x(frame.t), y1: tickTop + 2, y2: tickTop + 14,
          stroke: frame.dropped ? "#c62828" : "#5b6b7a",
          "data-t": frame.t,
          "data-index": frame.index,
        },
        svg("title", {}, frameTitle(frame)),
      ),
    );
  }
  if (thumbs) {
    for (const frame of thumbs.frames) {
      pictures.append(
        svg(
          "image",
          {
            class: "frame-thumb",
            href: thumbnail(frame.index, thumbs.requestWidth),
            x: x(frame.t), y: framesTop, width: THUMB_WIDTH, height: thumbs.height,
            preserveAspectRatio: "xMinYMin meet",
            "data-t": frame.t,
            "data-index": frame.index,
          },
          svg("title", {}, frameTitle(frame)),
        ),
      );
    }
  }

  if (audioTop !== null) drawAudio(plot, audio, sounds, x, audioTop);

  // Labels stay inside the plot, whatever the time they mark: none is cut at an edge.
  const bounds = [left, TIMELINE_WIDTH - right];
  drawTask(plot, timeline, annotation, x, taskTop, bounds);
  if (windowsTop !== null) drawWindows(plot, timeline, x, windowsTop);
  drawEpisodes(plot, timeline, x, responsesTop, windowsTop, bounds);
  if (stepsTop !== null) {
    for (const t of timeline.steps_t) {
      plot.append(svg("line", { class: "step-tick", x1: x(t), x2: x(t), y1: stepsTop + 2, y2: stepsTop + 10, stroke: "#90a4ae", "data-t": t }));
    }
  }

  // The moment the question or instruction was sent, across every lane.
  if (timeline.task_t !== null) {
    plot.append(
      svg("line", { class: "task-line", x1: x(timeline.task_t), x2: x(timeline.task_t), y1: 4, y2: axisTop, stroke: "#1f5f99", "stroke-dasharray": "4 3", "data-t": timeline.task_t }),
    );
  }

  drawAxis(root, x, t0, t1, left, TIMELINE_WIDTH - right, axisTop);
  const height = drawLegend(root, timeline, left, legendTop) + 8;
  root.setAttribute("viewBox", `0 0 ${TIMELINE_WIDTH} ${height}`);
  root.setAttribute("height", height);
  background.setAttribute("height", height);
  return root;
}

/** A group whose drawing is cut to a rectangle (ids are unique: one timeline per page). */
function clippedLayer(root, name, x, width, height) {
  const id = `timeline-clip-${name}`;
  root.append(svg("clipPath", { id }, svg("rect", { x, y: 0, width, height })));
  const layer = svg("g", { "clip-path": `url(#${id})` });
  root.append(layer);
  return layer;
}

/** Sound events (a row, when any) above the chunks: one bar per chunk over its span. */
function drawAudio(layer, audio, sounds, x, top) {
  for (const event of sounds) {
    const style = AUDIO_KINDS.sound;
    layer.append(
      svg(
        "rect",
        { class: "sound-event", x: x(event.start_s), y: top + 2, width: Math.max(1, x(event.end_s) - x(event.start_s)), height: 10, fill: style.color, "fill-opacity": 0.5, stroke: style.color, "data-start": event.start_s, "data-end": event.end_s },
        svg("title", {}, `${event.label}: ${fmt(event.start_s)}–${fmt(event.end_s)} s of video`),
      ),
    );
  }
  const chunksTop = top + (sounds.length ? 16 : 2);
  for (const chunk of audio) {
    const kind = chunk.silent ? "silent" : "heard";
    const style = AUDIO_KINDS[kind];
    // A hair narrower than its span, so neighbouring chunks stay apart.
    const x0 = x(chunk.start_t);
    const width = Math.max(1, x(chunk.t) - x0 - 1);
    layer.append(
      svg(
        "rect",
        {
          class: `audio-chunk ${kind}`,
          x: x0, y: chunksTop, width, height: 12,
          fill: style.hollow ? "#ffffff" : style.color,
          "fill-opacity": style.hollow ? 1 : 0.55,
          stroke: style.color,
          "stroke-dasharray": style.dashed ? "3 2" : null,
          "data-start": chunk.start_t,
          "data-end": chunk.t,
          "data-index": chunk.index,
          "data-silent": String(chunk.silent),
        },
        svg("title", {}, audioTitle(chunk)),
      ),
    );
  }
}

function audioTitle(chunk) {
  const lag = chunk.lag_ms === null ? "" : `, lag ${fmt(chunk.lag_ms)} ms`;
  const what = chunk.silent ? " (no sound in the video: zeros)" : "";
  return `audio chunk ${chunk.index}, ${fmt(chunk.start_t)}–${fmt(chunk.t)} s${what}: sent at ${fmt(chunk.at_s)} s${lag}`;
}

function frameTitle(frame) {
  const lag = frame.lag_ms === null ? "" : `, lag ${fmt(frame.lag_ms)} ms`;
  const what = frame.dropped ? "dropped" : "sent";
  return `frame ${frame.index} at ${fmt(frame.t)} s: ${what} at ${fmt(frame.at_s)} s${lag}`;
}

/** Which frames get a thumbnail: as many as fit side by side, evenly spread over the range. */
function thumbnailPlan(timeline, frames, plotWidth, t0, t1) {
  const sent = timeline.frames.filter((f) => !f.dropped && frames.frames[f.index] && f.t >= t0 && f.t < t1);
  if (sent.length === 0) return null;
  const first = frames.frames[sent[0].index];
  const height = Math.min(48, Math.round((THUMB_WIDTH * first.height) / first.width));
  const fit = Math.max(1, Math.floor(plotWidth / (THUMB_WIDTH + 2)));
  const stride = Math.ceil(sent.length / fit);
  return {
    height,
    requestWidth: THUMB_WIDTH * 2, // sharp on high-density screens
    frames: sent.filter((_, i) => i % stride === 0),
  };
}

/** `text` cut (with an ellipsis) to at most `width` px at `size` px in the timeline's font. */
function fitText(text, size, width) {
  let fitted = text;
  while (fitted.length > 1 && textWidth(fitted, size, TIMELINE_FONT) > width) fitted = truncate(fitted, fitted.length - 1);
  return fitted;
}

/** Where a label `width` px wide starts: at `wanted`, moved inside [lo, hi]. */
function labelStart(wanted, width, [lo, hi]) {
  return Math.max(lo, Math.min(wanted, hi - width));
}

function hasEvidence(annotation) {
  return Boolean(annotation?.evidence_spans?.length) || typeof annotation?.evidence_anchor_s === "number";
}

function drawTask(layer, timeline, annotation, x, top, bounds) {
  for (const span of annotation?.evidence_spans || []) {
    layer.append(
      svg(
        "rect",
        { class: "evidence", x: x(span.start_s), y: top + 4, width: Math.max(1, x(span.end_s) - x(span.start_s)), height: 14, fill: "#fff3cd", stroke: "#e0b400", "data-start": span.start_s, "data-end": span.end_s },
        svg("title", {}, `evidence ${fmt(span.start_s)}–${fmt(span.end_s)} s ${span.description || ""}`),
      ),
    );
  }
  if (typeof annotation?.evidence_anchor_s === "number") {
    const ax = x(annotation.evidence_anchor_s);
    layer.append(svg("path", { class: "anchor", d: `M${ax},${top + 3}l5,8l-5,8l-5,-8z`, fill: "#e0b400" }, svg("title", {}, `evidence anchor ${fmt(annotation.evidence_anchor_s)} s`)));
  }
  if (timeline.task_t !== null) {
    const text = annotation ? annotation.question || annotation.instruction || "" : "";
    const full = `${timeline.task === "qa" ? "question" : "instruction"} @ ${fmt(timeline.task_t)} s${text ? `: ${text}` : ""}`;
    const label = fitText(full, 11, bounds[1] - bounds[0]);
    const width = textWidth(label, 11, TIMELINE_FONT);
    // Right of the moment it was sent, or ending there when there is no room on the right;
    // below the evidence row, so it never covers the evidence or its anchor.
    const tx = x(timeline.task_t);
    const wanted = tx + 4 + width <= bounds[1] ? tx + 4 : tx - 4 - width;
    layer.append(svg("text", { class: "task-label", x: labelStart(wanted, width, bounds), y: top + (hasEvidence(annotation) ? 33 : 15), fill: "#1f5f99" }, label, label === full ? null : svg("title", {}, full)));
  }
}

function drawWindows(layer, timeline, x, top) {
  for (const window of timeline.windows) {
    const kind = windowKind(window);
    const style = WINDOW_KINDS[kind];
    const x0 = x(window.start);
    const width = Math.max(1, x(window.end) - x0);
    const label = `#${window.trigger + 1} ${window.answer}`;
    layer.append(
      svg(
        "rect",
        {
          class: `window ${kind}`,
          x: x0, y: top + 2, width, height: 24,
          fill: style.color, "fill-opacity": 0.18, stroke: style.color,
          "stroke-dasharray": style.dashed ? "4 2" : null,
          "data-start": window.start,
          "data-end": window.end,
          "data-trigger": window.trigger,
          "data-assignment": window.assignment,
        },
        svg(
          "title",
          {},
          `window #${window.trigger + 1} (${window.trigger_type}) ${fmt(window.start)}–${fmt(window.end)} s, answer ${window.answer}\n` +
            `${window.assignment}${window.response_id ? ` by ${window.response_id} at ${fmt(window.onset_t)} s: "${window.prediction}"` : ""}` +
            `, score ${fmt(window.score)}${delayText(window)}`,
        ),
      ),
    );
    if (width > 6 * label.length * 0.7) {
      layer.append(svg("text", { x: x0 + 3, y: top + 18, fill: "#222", "font-size": 10 }, truncate(label, Math.floor(width / 6))));
    }
  }
}

function drawEpisodes(layer, timeline, x, top, windowsTop, bounds) {
  const cy = top + 12;
  let labelEnd = -Infinity;
  for (const episode of timeline.episodes) {
    if (episode.onset_t === null) continue;
    const kind = episodeKind(episode, timeline);
    const style = EPISODE_KINDS[kind];
    const cx = x(episode.onset_t);
    if (windowsTop !== null && (kind === "in-window" || kind === "in-window-wrong" || kind === "early")) {
      // Tie the response to the window it was assigned to.
      layer.append(svg("line", { x1: cx, x2: cx, y1: windowsTop + 26, y2: cy - 6, stroke: style.color, "stroke-width": 1 }));
    }
    layer.append(
      svg(
        "circle",
        {
          class: `response ${kind}`,
          cx, cy, r: 6,
          fill: style.hollow ? "#ffffff" : style.color,
          stroke: style.color,
          "stroke-width": 2,
          "data-onset": episode.onset_t,
          "data-response-id": episode.response_id,
          "data-kind": kind,
        },
        svg("title", {}, episodeTitle(episode, kind, timeline)),
      ),
    );
    const label = episodeLabel(episode, timeline);
    const width = textWidth(label, 10, TIMELINE_FONT);
    const start = labelStart(cx - width / 2, width, bounds);
    if (start > labelEnd + 4) {
      layer.append(svg("text", { class: "response-label", x: start, y: top + 34, fill: style.color, "font-size": 10 }, label));
      labelEnd = start + width;
    }
  }
}

function episodeLabel(episode, timeline) {
  const text = truncate(episode.text || "∅", 18);
  const qa = timeline.result.qa;
  if (timeline.task === "qa" && qa && episode.onset_t === qa.answer_t) {
    return `${text} · TTFT ${fmtSeconds(qa.ttft_s)} · latency ${fmtSeconds(qa.latency_s)}`;
  }
  return text;
}

function episodeTitle(episode, kind, timeline) {
  const lines = [
    `${episode.response_id}: "${episode.text}"`,
    `${EPISODE_KINDS[kind].label}; onset ${fmt(episode.onset_t)} s of video`,
    `runtime: began ${fmt(episode.onset_s)} s, final ${fmt(episode.final_s)} s after session start`,
  ];
  const window = timeline.windows.find((w) => w.response_id === episode.response_id);
  if (window) lines.push(`window #${window.trigger + 1}: score ${fmt(window.score)}${delayText(window)}`);
  return lines.join("\n");
}

// A window's delays, each named by its clock (runtime: processing or real-time lag).
function delayText(window) {
  const parts = [];
  if (window.delay_runtime_s !== null) parts.push(`runtime delay ${fmt(window.delay_runtime_s)} s`);
  if (window.delay_video_s !== null) parts.push(`video delay ${fmt(window.delay_video_s)} s`);
  return parts.length ? `, ${parts.join(", ")}` : "";
}

function drawAxis(root, x, t0, t1, x0, x1, top) {
  root.append(svg("line", { x1: x0, x2: x1, y1: top + 2, y2: top + 2, stroke: "#333" }));
  const ticks = niceTicks(t0, t1, Math.min(16, Math.max(4, Math.round((x1 - x0) / 70)))).filter((t) => t >= t0 && t <= t1);
  for (const t of ticks) {
    root.append(
      svg("line", { class: "axis-tick", x1: x(t), x2: x(t), y1: top + 2, y2: top + 7, stroke: "#333", "data-t": t }),
      svg("text", { x: x(t), y: top + 19, "text-anchor": "middle", fill: "#333" }, `${fmt(t)}s`),
    );
  }
  root.append(svg("text", { x: 8, y: top + 19, fill: "#444" }, "video time"));
}

/** The kinds of windows and responses drawn, wrapped over lines; returns the bottom. */
function drawLegend(root, timeline, left, top) {
  const kinds = new Set(timeline.episodes.filter((e) => e.onset_t !== null).map((e) => episodeKind(e, timeline)));
  const audioKinds = new Set((timeline.audio || []).map((a) => (a.silent ? "silent" : "heard")));
  if ((timeline.sound_events || []).length) audioKinds.add("sound");
  const entries = [
    ...[...kinds].map((kind) => ({ ...EPISODE_KINDS[kind], circle: true })),
    ...[...new Set(timeline.windows.map(windowKind))].map((kind) => WINDOW_KINDS[kind]),
    ...["heard", "silent", "sound"].filter((kind) => audioKinds.has(kind)).map((kind) => AUDIO_KINDS[kind]),
  ];
  let lx = left;
  for (const entry of entries) {
    const width = 24 + entry.label.length * 6.2;
    if (lx > left && lx + width > TIMELINE_WIDTH) {
      lx = left;
      top += 18;
    }
    root.append(
      entry.circle
        ? svg("circle", { cx: lx + 6, cy: top + 6, r: 5, fill: entry.hollow ? "#fff" : entry.color, stroke: entry.color, "stroke-width": 2 })
        : svg("rect", { x: lx, y: top, width: 12, height: 12, fill: entry.hollow ? "#fff" : entry.color, "fill-opacity": entry.hollow ? 1 : 0.2, stroke: entry.color, "stroke-dasharray": entry.dashed ? "3 2" : null }),
      svg("text", { x: lx + 16, y: top + 10, fill: "#333" }, entry.label),
    );
    lx += width;
  }
  return top + 14;
}
