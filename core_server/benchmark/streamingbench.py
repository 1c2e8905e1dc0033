"""Import a StreamingBench question file: `questions_real.json`, `questions_omni.json`,
`questions_sqa.json` (a list of lists, one per video) or `questions_proactive.json`.

Each entry holds a video and its questions; every question becomes one record. Multiple-
choice questions become QA records asked at `time_stamp`; "Proactive Output" questions
become proactive records with one point trigger at `ground_truth_time_stamp` whose answer is
`ground_truth_output`. StreamingBench questions carry no id: a question's position in its
file is its identity. docs/benchmarks.md lists the mapping.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from streameval.core.benchmark.importing import (
    EntryError,
    Imported,
    Problem,
    content_version,
    convert,
    duplicate_ids,
    label_options,
    require,
    string_list,
)
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord, Record, Trigger

SOURCE = "streamingbench"
PARTS = ("real", "omni", "sqa", "proactive")
# The omni file's Omni-Source Understanding tasks (StreamingBench paper, section 3.1): they
# ask about what is heard, so their records need the video's sound. The file's contextual
# tasks (Anomaly and Misleading Context Understanding) are about what is seen.
OMNI_SOURCE_TASKS = frozenset(
    {"Emotion Recognition", "Scene Understanding", "Source Discrimination", "Multimodal Alignment"}
)
# StreamingBench's loader reads any colon-separated time as base-60 digits from the right.
_TIME = re.compile(r"^\d+(?::\d+)*:\d+(?:\.\d+)?$")
_CLOCK = re.compile(r"^\d+:[0-5]\d:[0-5]\d(?:\.\d+)?$")  # the usual H:MM:SS form
_LETTER = re.compile(r"^([A-Z])[.)]?$")
# Longer time stamps are refused before they are read: "HH:MM:SS.fff" is 12 characters, and
# a 5,000-digit field would exceed Python's int parser (or a float) instead.
MAX_TIME_CHARS = 32


def looks_like(data: Any) -> bool:
    first = data[0] if isinstance(data, list) and data else None
    if isinstance(first, list):
        first = first[0] if first else None
    return isinstance(first, dict) and "questions" in first


def part_of(path: Path, data: list) -> str:
    """Which of the four files this is: from its name, else from its shape."""
    name = path.name.lower()
    for part in PARTS:
        if part in name:
            return part
    if data and all(isinstance(entry, list) for entry in data):
        return "sqa"
    return path.stem


def seconds(stamp: Any) -> float:
    """A colon-separated time in seconds, read as StreamingBench reads it: base-60 digits
    from the right, whatever their width ("00:06:59" is 419 s, "00:24" is 24 s and
    "00:12450" is 12,450 s)."""
    text = stamp.strip() if isinstance(stamp, str) else None
    if text is not None and len(text) > MAX_TIME_CHARS:
        raise EntryError(f"time of {len(text)} characters; the limit is {MAX_TIME_CHARS}")
    if text is None or _TIME.match(text) is None:
        raise EntryError(f"time {stamp!r} is not a colon-separated time like HH:MM:SS")
    *whole, last = text.split(":")
    total = float(last)
    for position, part in enumerate(reversed(whole), start=1):
        total += int(part) * 60**position
    return total


def _unusual_times(record: Record) -> Iterator[str]:
    """Notes on times not written H:MM:SS, with what they were read as."""
    for key in ("time_stamp", "ground_truth_time_stamp"):
        stamp = record.metadata.get(key)
        if isinstance(stamp, str) and _CLOCK.match(stamp.strip()) is None:
            yield (
                f"{record.record_id}: {key} {stamp!r} read as {seconds(stamp):g} s "
                "(base-60 digits from the right, as StreamingBench reads it)"
            )


def import_streamingbench(path: Path, data: list, video_root: Path | None = None) -> Imported:
    """The records of the StreamingBench file `data` read from `path`; videos are looked up
    under `video_root` (default: the file's directory)."""
    part = part_of(path, data)
    problems: list[Problem] = []
    records: list[Record] = []
    for position, entry in _entries(data):
        where = f"{path.name}[{']['.join(map(str, position))}]"
        questions = convert(where, partial(require, entry, "questions", list), problems)
        for index, question in enumerate(questions or ()):
            build = partial(_record, part, (*position, index), entry, question)
            record = convert(f"{where}.questions[{index}]", build, problems)
            if record is not None:
                records.append(record)
    problems.extend(duplicate_ids(records))
    benchmark = Benchmark(
        name=f"{SOURCE}-{part}",
        version=content_version([path]),
        video_root=str(video_root or path.parent),
        records=records,
    )
    notes = [note for record in records for note in _unusual_times(record)]
    return Imported(SOURCE, benchmark, problems, notes)


def _entries(data: list) -> list[tuple[tuple[int, ...], Any]]:
    """(position, entry): entries of a flat file, or of each per-video list of the sqa file."""
    if data and all(isinstance(entry, list) for entry in data):
        return [((i, j), entry) for i, group in enumerate(data) for j, entry in enumerate(group)]
    return [((i,), entry) for i, entry in enumerate(data)]


def _record(part: str, position: tuple[int, ...], entry: dict, question: Any) -> Record:
    source_id = "/".join([part, *map(str, position)])
    common = {
        "record_id": f"{SOURCE}:{source_id}",
        "source_id": source_id,
        "source_benchmark": SOURCE,
        "task_type": require(question, "task_type", str),
        # "./videos/x.mp4" -> "videos/x.mp4", the form TRACE's release uses for the same files.
        "video_path": require(entry, "video_path", str).removeprefix("./"),
    }
    metadata = {
        "part": part,
        "position": list(position),
        "time": entry.get("time"),
        "video_categories": entry.get("video_categories"),
        "required_ability": question.get("required_ability"),
        "time_stamp": question.get("time_stamp"),
    }
    asked_at = seconds(require(question, "time_stamp", str))
    if "ground_truth_output" in question:
        return _proactive(question, common, metadata, asked_at)
    # StreamingBench annotates no evidence time: the question time is the anchor.
    return QARecord(
        **common,
        question=require(question, "question", str),
        options=label_options(string_list(question, "options")),
        answer=_answer(require(question, "answer", str)),
        question_time_s=asked_at,
        evidence_anchor_s=asked_at,
        metadata=metadata,
        needs_audio=part == "omni" and common["task_type"] in OMNI_SOURCE_TASKS,
    )


def _answer(answer: str) -> str:
    """ "C" (also written "C." or "C)"); anything else is kept for validation to report."""
    match = _LETTER.match(answer.strip())
    return match.group(1) if match else answer


def _proactive(question: dict, common: dict, metadata: dict, asked_at: float) -> ProactiveRecord:
    stamp = require(question, "ground_truth_time_stamp", str)
    trigger = Trigger(
        trigger_type="event_onset",
        answer=require(question, "ground_truth_output", str),
        point_s=seconds(stamp),
    )
    return ProactiveRecord(
        **common,
        instruction=require(question, "question", str),
        instruction_time_s=asked_at,
        triggers=(trigger,),
        metadata={**metadata, "ground_truth_time_stamp": stamp},
    )
