"""The causal timeline of one session: which frames and tasks go out, in which order.

Pure planning, no I/O: the session driver plays this list under a pacing. Causality is
decided here and only here: nothing is placed after a frame unless its video time is at
or before that frame's, so nothing from the future can reach an adapter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.frames.errors import FramesError
from streameval.core.frames.types import TIME_EPSILON_S, FrameRef, VideoFrames

ItemKind = Literal["frame", "audio", "question", "instruction", "step", "cut"]


@dataclass(frozen=True, slots=True)
class TimelineItem:
    """One thing the Core sends. A frame's `t` is the time stamp it is delivered with (its
    header's `t`), which a perturbation (core_server/streams/perturb.py) may move off its sample's
    own time `frame.t`; a "cut" closes the connection there and resumes the session. An
    "audio" item is the sound chunk `chunk`, whose `t` is its end."""

    kind: ItemKind
    t: float
    frame: FrameRef | None = None
    step: int | None = None
    probe: int | None = None  # a question item that asks the record's probe of this index
    # Set by a perturbation that sends the frame back to back with the next one (a burst's
    # held frames, at the last one's time; a duplicate's first copy, at its own): the video
    # time at which wall-clock pacing sends it, and it is never dropped for the next.
    send_t: float | None = None
    chunk: int | None = None  # an audio item's chunk index

    @property
    def send_at(self) -> float:
        """The video time at which wall-clock pacing sends the item."""
        return self.t if self.send_t is None else self.send_t


@dataclass(frozen=True)
class Timeline:
    record_id: str
    task: Literal["qa", "proactive"]
    items: tuple[TimelineItem, ...]

    @property
    def frame_count(self) -> int:
        return sum(1 for item in self.items if item.kind == "frame")


class TimelineError(FramesError, ValueError):
    """A record whose times cannot be streamed from its video (e.g. past the video's end):
    a `FramesError` of cause `input`, so the session fails at stage `frames`."""


def _require_inside(record_id: str, what: str, t: float, frames: VideoFrames) -> None:
    """A video shorter than its annotation: asking at its last frame would be a task about
    frames the model never saw, so the session fails (stage `frames`) with this reason."""
    if t > frames.duration_s:
        raise TimelineError(
            f"{record_id}: the {what} at {t:g}s lies past the end of the video "
            f"({frames.duration_s:.2f}s)"
        )


def _prefix_start(anchor_s: float, history_s: float) -> float:
    """The first delivered video time: `history_s` before the anchor, 0 = from the start."""
    return 0.0 if history_s == 0 else max(0.0, anchor_s - history_s)


def qa_span_s(record: QARecord, history_s: float) -> float:
    """The video seconds `qa_timeline` streams, known before the video is read."""
    return record.question_time_s - _prefix_start(record.evidence_anchor_s, history_s)


def proactive_span_s(record: ProactiveRecord, lead_s: float, tolerance_s: float) -> float:
    """The video seconds `proactive_timeline` streams, up to the last window end (a video
    shorter than that streams less)."""
    start = _prefix_start(record.instruction_time_s, lead_s)
    return max(0.0, record.last_window_end_s(tolerance_s) - start)


def probe_span_s(record: ProactiveRecord) -> float:
    """The video seconds `probe_timeline` streams."""
    return max(probe.t for probe in record.probes)


def qa_timeline(
    record: QARecord, frames: VideoFrames, history_s: float, with_steps: bool = False
) -> Timeline:
    """Frames from max(0, anchor - history) to t_q, then the question. `with_steps` (the
    frame-level protocol) asks for a decision after every frame before the question."""
    _require_inside(record.record_id, "question", record.question_time_s, frames)
    start = _prefix_start(record.evidence_anchor_s, history_s)
    selected = frames.between(start, record.question_time_s)
    if not selected:
        raise TimelineError(
            f"{record.record_id}: no frame between {start:g}s and the question at "
            f"{record.question_time_s:g}s (video is {frames.duration_s:.1f}s long)"
        )
    items = []
    for step, ref in enumerate(selected):
        items.append(TimelineItem("frame", ref.t, ref))
        if with_steps and step < len(selected) - 1:
            items.append(TimelineItem("step", ref.t, step=step))
    items.append(TimelineItem("question", record.question_time_s))
    return Timeline(record.record_id, "qa", tuple(items))


def probe_timeline(record: ProactiveRecord, frames: VideoFrames) -> Timeline:
    """The prefix from the video's start, each probe asked after the last frame at or
    before its time (OVO-Bench's offline protocol, one session for all the probes)."""
    if not record.probes:
        raise TimelineError(f"{record.record_id}: the profile asks probes; this record has none")
    last = max(probe.t for probe in record.probes)
    _require_inside(record.record_id, "probe", last, frames)
    selected = frames.between(0.0, last)
    if not selected:
        raise TimelineError(f"{record.record_id}: no frame before the probe at {last:g}s")
    order = sorted(range(len(record.probes)), key=lambda k: record.probes[k].t)
    items: list[TimelineItem] = []
    pending = 0
    for position, ref in enumerate(selected):
        items.append(TimelineItem("frame", ref.t, ref))
        following = selected[position + 1].t if position + 1 < len(selected) else None
        while pending < len(order):
            probe_t = record.probes[order[pending]].t
            if following is not None and following <= probe_t:
                break
            items.append(TimelineItem("question", probe_t, probe=order[pending]))
            pending += 1
    return Timeline(record.record_id, "proactive", tuple(items))


def proactive_timeline(
    record: ProactiveRecord,
    frames: VideoFrames,
    lead_s: float,
    tolerance_s: float,
    steps_before_instruction: bool = False,
) -> Timeline:
    """Frames from instruction - lead to the last window end; the instruction goes out after
    the last frame at or before its time, and a step ("decide now") after every later frame
    (after every frame at all with `steps_before_instruction`, the frame-level protocol).
    """
    _require_inside(record.record_id, "instruction", record.instruction_time_s, frames)
    start = _prefix_start(record.instruction_time_s, lead_s)
    # Windows past a short video's end are kept by the scorer (they count as misses).
    end = min(record.last_window_end_s(tolerance_s), frames.duration_s)
    selected = frames.between(start, end)
    if not selected or selected[0].t > record.instruction_time_s:
        raise TimelineError(
            f"{record.record_id}: no frame at or before the instruction at "
            f"{record.instruction_time_s:g}s (video is {frames.duration_s:.1f}s long)"
        )
    items: list[TimelineItem] = []
    instructed = False
    step = 0
    for position, ref in enumerate(selected):
        items.append(TimelineItem("frame", ref.t, ref))
        following = selected[position + 1].t if position + 1 < len(selected) else None
        if not instructed and (following is None or following > record.instruction_time_s):
            items.append(TimelineItem("instruction", record.instruction_time_s))
            instructed = True
        if instructed or steps_before_instruction:
            items.append(TimelineItem("step", ref.t, step=step))
            step += 1
    return Timeline(record.record_id, "proactive", tuple(items))


def with_audio(timeline: Timeline, chunk_s: float) -> Timeline:
    """The timeline with its sound: chunk k covers [k * chunk_s, (k + 1) * chunk_s) and goes
    out just before the first item sent at or after its end, so no chunk leaves before its
    time and every sound up to a frame, question or step precedes it. The chunks start with
    the one holding the first item's time and end with the last one complete by the last
    item's time."""
    items = timeline.items
    if not items:
        return timeline
    chunk = math.floor(items[0].send_at / chunk_s + TIME_EPSILON_S)
    played: list[TimelineItem] = []
    for item in items:
        while (chunk + 1) * chunk_s <= item.send_at + TIME_EPSILON_S:
            played.append(TimelineItem("audio", (chunk + 1) * chunk_s, chunk=chunk))
            chunk += 1
        played.append(item)
    return Timeline(timeline.record_id, timeline.task, tuple(played))
