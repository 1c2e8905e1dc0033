"""Consistency checks of imported records and, given a video root, of their videos.

Every problem is one `Problem` naming a record (or a video) and what is wrong with it.
Videos are probed (`frames.probe`), never decoded in full: the duration comes from the
container's metadata and one decoded frame tells a readable file from a broken one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streameval.core.benchmark.importing import Imported, Problem, option_letter
from streameval.core.benchmark.records import ProactiveRecord, QARecord, Record, Trigger
from streameval.core.benchmark.video_paths import outside_video_root
from streameval.core.errors import CoreError
from streameval.core.frames.audio_track import has_sound
from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.probing import probe

# Annotated times and container durations are both rounded decimals; this is their noise.
EPSILON_S = 1e-3


class VideoProblem(CoreError):
    """A video that is missing or cannot be read; the message names the file."""


@dataclass
class Report:
    records: int
    problems: list[Problem]
    notes: list[str] = field(default_factory=list)
    # Suspect but usable annotations: a run goes on (and fails just the records concerned).
    warnings: list[str] = field(default_factory=list)
    videos_checked: int = 0


def validate(
    imported: Imported, video_root: Path | None, *, allow_outside_video_root: bool = False
) -> Report:
    """The importer's problems, the records', their video paths' (confined to the video
    root unless allowed) and, when `video_root` is given, the videos'."""
    records = imported.benchmark.records
    report = Report(len(records), [*imported.problems, *check_records(records)])
    if not allow_outside_video_root:
        root = Path(imported.benchmark.video_root)
        report.problems.extend(outside_video_root(records, root))
    report.notes.extend(imported.notes)
    if video_root is not None:
        report.videos_checked = check_videos(records, video_root, report)
    return report


# ----------------------------------------------------------------------------- records


def check_records(records: Sequence[Record]) -> list[Problem]:
    problems = []
    for record in records:
        messages = _qa(record) if isinstance(record, QARecord) else _proactive(record)
        problems.extend(Problem(record.record_id, message) for message in messages)
    return problems


def _qa(record: QARecord) -> Iterator[str]:
    letters = [option_letter(index) for index in range(len(record.options))]
    if len(letters) < 2:
        yield f"{len(letters)} options; a multiple-choice question needs at least 2"
    for letter, option in zip(letters, record.options, strict=True):
        if not option.startswith(f"{letter}."):
            yield f"option {letter} is not labelled '{letter}.': {option[:40]!r}"
    if record.answer not in letters:
        choices = f"{letters[0]}-{letters[-1]}" if letters else "none"
        yield f"unknown answer letter {record.answer!r} (options {choices})"
    if record.question_time_s < 0:
        yield f"question time {record.question_time_s:g}s is negative"
    if record.evidence_anchor_s < 0:
        yield f"evidence anchor {record.evidence_anchor_s:g}s is negative"
    if record.evidence_anchor_s > record.question_time_s:
        yield (
            f"evidence anchor {record.evidence_anchor_s:g}s is after the question at "
            f"{record.question_time_s:g}s"
        )
    for number, span in enumerate(record.evidence_spans, start=1):
        if span.end_s < span.start_s:
            yield f"evidence span {number} [{span.start_s:g}s, {span.end_s:g}s] is reversed"
        if min(span.start_s, span.end_s) < 0:
            yield f"evidence span {number} [{span.start_s:g}s, {span.end_s:g}s] is negative"


def trigger_bounds(trigger: Trigger) -> tuple[float | None, float | None]:
    """(start, end) the source gives a trigger's window; None where it gives none (the
    scorer applies its own tolerance to point triggers)."""
    if trigger.is_state:
        return trigger.interval_start_s, trigger.interval_end_s
    return trigger.point_s, trigger.window_end_s


def _proactive(record: ProactiveRecord) -> Iterator[str]:
    asked = record.instruction_time_s
    if asked < 0:
        yield f"instruction time {asked:g}s is negative"
    if not record.triggers:
        yield "no triggers: nothing to respond to"
    previous: float | None = None
    for number, trigger in enumerate(record.triggers, start=1):
        start, end = trigger_bounds(trigger)
        if start is None:
            yield f"window {number} ({trigger.trigger_type}) has no start time"
            continue
        if start < asked:
            yield f"window {number} starts at {start:g}s, before the instruction at {asked:g}s"
        if end is not None and (end < start or (trigger.is_state and end == start)):
            yield f"window {number} [{start:g}s, {end:g}s) is empty or reversed"
        if previous is not None and start < previous:
            yield (
                f"window {number} starts at {start:g}s, before window {number - 1} at "
                f"{previous:g}s (windows out of order)"
            )
        previous = start
        yield from _trigger_evidence(number, trigger)
    for number, asked_probe in enumerate(record.probes, start=1):
        if asked_probe.t < 0:
            yield f"probe {number} at {asked_probe.t:g}s is negative"


def _trigger_evidence(number: int, trigger: Trigger) -> Iterator[str]:
    start, end = trigger.evidence_start_s, trigger.evidence_end_s
    if start is not None and end is not None and end < start:
        yield f"window {number}: evidence [{start:g}s, {end:g}s] is reversed"
    for side, t in (("start", start), ("end", end)):
        if t is not None and t < 0:
            yield f"window {number}: evidence {side} {t:g}s is negative"


# ----------------------------------------------------------------------------- videos


def check_videos(records: Sequence[Record], video_root: Path, report: Report) -> int:
    """Probe each video once; returns how many videos were checked."""
    users: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        users[record.video_path].append(record)
    for video, needing in users.items():
        try:
            duration = video_duration_s(video_root / video)
        except VideoProblem as exc:
            records = f"{len(needing)} record{'s' if len(needing) != 1 else ''}"
            report.problems.append(Problem(video, f"{exc} (needed by {records})"))
            continue
        if any(record.needs_audio for record in needing) and not has_sound(video_root / video):
            hearing = [record.record_id for record in needing if record.needs_audio]
            report.warnings.append(
                f"{hearing[0]}{f' and {len(hearing) - 1} more' if len(hearing) > 1 else ''}: "
                f"needs sound, and its video {video} has none (a run streams silence)"
            )
        for record in needing:
            label, latest = _latest_time(record)
            # A warning, not a problem: the file is well formed, and a run fails just
            # this record's session (stage frames) while the others go on.
            if latest > duration + EPSILON_S:
                report.warnings.append(
                    f"{record.record_id}: {label} at {latest:g}s is past the end "
                    f"of its video ({duration:.2f}s, {video}); a run fails this record"
                )
    return len(users)


def _latest_time(record: Record) -> tuple[str, float]:
    """The latest annotated time of a record, with what it is."""
    if isinstance(record, QARecord):
        return "question", record.question_time_s
    times = [("instruction", record.instruction_time_s)]
    for number, trigger in enumerate(record.triggers, start=1):
        for side, t in zip(("start", "end"), trigger_bounds(trigger), strict=True):
            if t is not None:
                times.append((f"window {number} {side}", t))
    return max(times, key=lambda item: item[1])


def video_duration_s(path: Path) -> float:
    """The video's duration as `frames.probe` reads it (from the metadata, without a full
    decode), after checking that the file exists and its first frame decodes."""
    try:
        path.stat()
    except FileNotFoundError:
        raise VideoProblem(f"missing video: {path} does not exist") from None
    except OSError as exc:  # a symlink loop (ELOOP), a folder without permission
        raise VideoProblem(f"unreadable video: {path}: {exc.strerror}") from None
    try:
        return probe(path).duration_s
    except VideoDecodeError as exc:
        raise VideoProblem(f"undecodable video: {exc}") from None
