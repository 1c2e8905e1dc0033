"""Negative streams: a proactive record's instruction over a stretch of its video with no event.

A robustness run's `negative` variant (docs/robustness.md) asks each proactive task again
where nothing it asks about happens, so that every response counts as a false alarm. The
stretch comes from the same video, outside every event of every record of that video:

    >>> # one record of v.mp4: instruction at 4 s, events at 8 s and 12 s
    >>> [(negative, base_id)] = negative_records([record], tolerance_s=2.0, seed=7)
    >>> negative.instruction_time_s, negative.stream_end_s, negative.triggers
    (0.0, 6.0, ())

What counts as an event: each target of each proactive record of the video, from the
earliest of its start and its annotated evidence to the latest of its streamed window end
(`Trigger.streamed_end_s`) and its evidence end, widened by `tolerance_s` on both sides.

The stretch lies inside the part of the video the records annotate (up to the latest
window end or question time of the video's records): the video's real length is not read
here, and an annotation proves the video runs at least that far. It is as long as the
record's own stream (`lead_s` of lead-in, then instruction to last window end) where a gap
between events allows; else the longest gap's, lead-in first. A record whose video has no
gap that holds the lead-in and `MIN_WATCHED_S` after the instruction gets no negative
stream.

The negative record keeps the instruction, task type and video; its id is
`variant_record_id(base, "negative", seed)`, opaque on the wire. It has no triggers and no
probes (their answers belong to the original times); `stream_end_s` tells the Core where to
stop. The position is drawn from a generator seeded by (seed, record id): the same seed
gives the same stretches, whatever other records are passed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from streameval.core.benchmark.records import ProactiveRecord, QARecord, Trigger
from streameval.variants import variant_record_id

NEGATIVE = "negative"  # the variant label of negative streams (streameval/variants.py)
# A shorter stretch after the instruction measures next to nothing (and may hold no frame).
MIN_WATCHED_S = 1.0

Span = tuple[float, float]


def negative_records(
    records: Iterable[QARecord | ProactiveRecord],
    *,
    avoiding: Iterable[QARecord | ProactiveRecord] | None = None,
    tolerance_s: float,
    seed: int,
    lead_s: float = 0.0,
) -> list[tuple[ProactiveRecord, str]]:
    """(negative record, base record id) for each proactive record whose video has room.

    The events avoided are those of `avoiding` (every record of the benchmark; by default
    `records` themselves), so that a selection leaving a record out cannot put a negative
    stream on its event. `lead_s` is the run's `proactive_lead_s`: the video before the
    instruction that the Core also streams, which must be free of events too."""
    records = list(records)
    by_video: dict[str, list[QARecord | ProactiveRecord]] = {}
    for record in records if avoiding is None else avoiding:
        by_video.setdefault(record.video_path, []).append(record)
    gaps = {video: free_spans(group, tolerance_s) for video, group in by_video.items()}
    negatives = []
    for record in records:
        if not isinstance(record, ProactiveRecord) or record.stream_end_s is not None:
            continue
        rng = random.Random(f"{seed}\n{record.record_id}")
        placed = place(record, gaps[record.video_path], tolerance_s, lead_s, rng)
        if placed is not None:
            instruction_s, end_s = placed
            negative = record.model_copy(
                update={
                    "record_id": variant_record_id(record.record_id, NEGATIVE, seed),
                    "instruction_time_s": instruction_s,
                    "triggers": (),
                    "probes": (),
                    "stream_end_s": end_s,
                }
            )
            negatives.append((negative, record.record_id))
    return negatives


def event_span(trigger: Trigger, tolerance_s: float) -> Span:
    """The stretch of video where this target's event can be seen, with the margin."""
    start = trigger.start_s
    end = trigger.streamed_end_s(tolerance_s)
    if trigger.evidence_start_s is not None:
        start = min(start, trigger.evidence_start_s)
    if trigger.evidence_end_s is not None:
        end = max(end, trigger.evidence_end_s)
    return start - tolerance_s, end + tolerance_s


def free_spans(records: Sequence[QARecord | ProactiveRecord], tolerance_s: float) -> list[Span]:
    """The gaps between the events of one video's records, inside its annotated part."""
    extent = 0.0
    events: list[Span] = []
    for record in records:
        if isinstance(record, ProactiveRecord):
            if record.triggers:
                extent = max(extent, record.last_window_end_s(tolerance_s))
            events += [event_span(trigger, tolerance_s) for trigger in record.triggers]
        else:
            extent = max(extent, record.question_time_s)
    gaps = []
    cursor = 0.0
    for start, end in sorted(events):
        if start > cursor:
            gaps.append((cursor, min(start, extent)))
        cursor = max(cursor, end)
    if cursor < extent:
        gaps.append((cursor, extent))
    return [(start, end) for start, end in gaps if end > start]


def place(
    record: ProactiveRecord,
    gaps: Sequence[Span],
    tolerance_s: float,
    lead_s: float,
    rng: random.Random,
) -> Span | None:
    """(instruction time, stream end) of the record's negative stream, or None.

    The Core streams from max(0, instruction - lead) to the stream end; both must lie in
    one gap. A gap that starts at the video's start needs no lead-in (the Core clips it)."""
    watched = record.last_window_end_s(tolerance_s) - record.instruction_time_s
    ranges = []  # (earliest, latest) instruction time, per gap that holds the whole stream
    shorter = []  # (instruction, gap end), per gap that holds a shorter one
    for start, end in gaps:
        earliest = start if start == 0.0 else start + lead_s
        if end - earliest >= watched:
            ranges.append((earliest, end - watched))
        elif end - earliest >= MIN_WATCHED_S:
            shorter.append((earliest, end))
    if ranges:
        # Uniform over every admissible instruction time, across the gaps that fit.
        widths = [high - low for low, high in ranges]
        low, high = rng.choices(ranges, weights=widths)[0] if sum(widths) > 0 else ranges[0]
        # To the millisecond, as annotations are: readable times in the stored record.
        instruction = min(high, max(low, round(rng.uniform(low, high), 3)))
        return instruction, instruction + watched
    # The longest shorter stream (the earliest of equals).
    return max(shorter, key=lambda span: span[1] - span[0], default=None)
