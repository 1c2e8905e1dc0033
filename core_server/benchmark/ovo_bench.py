"""Import OVO-Bench (`ovo_bench_new.json`, one JSON list): all twelve task types.

Backward tracing (EPM, ASI, HLD) and real-time visual perception (OCR, ACR, ATR, STU, FPD,
OJR) are multiple-choice questions asked at `realtime`: QA records. Forward active
responding (REC, SSR, CRR) is asked by OVO-Bench offline, as a list of probes (`test_info`);
here each becomes a proactive record whose triggers are built from its annotations, and the
raw probes stay in `metadata["probes"]` so that an offline profile can ask them one by one.
docs/benchmarks.md lists the mapping and the construction of the triggers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from streameval.core.benchmark.importing import (
    NUMBER,
    EntryError,
    Imported,
    Problem,
    content_version,
    convert,
    duplicate_ids,
    label_options,
    option_letter,
    require,
    string_list,
)
from streameval.core.benchmark.records import (
    Benchmark,
    ProactiveRecord,
    Probe,
    QARecord,
    Record,
    Trigger,
)

SOURCE = "ovo_bench"
CATEGORIES: dict[str, tuple[str, ...]] = {
    "backward": ("EPM", "ASI", "HLD"),
    "realtime": ("OCR", "ACR", "ATR", "STU", "FPD", "OJR"),
    "forward": ("REC", "SSR", "CRR"),
}
CATEGORY_OF = {task: category for category, tasks in CATEGORIES.items() for task in tasks}
# Source fields the record itself holds; every other field of an entry goes to metadata.
_HELD = ("id", "task", "video", "test_info")


def looks_like(data: Any) -> bool:
    first = data[0] if isinstance(data, list) and data else None
    return isinstance(first, dict) and "task" in first and "video" in first


def import_ovo_bench(path: Path, data: list, video_root: Path | None = None) -> Imported:
    """The records of the OVO-Bench list `data` read from `path`; videos are looked up under
    `video_root` (default: the file's directory)."""
    problems: list[Problem] = []
    records: list[Record] = []
    for index, raw in enumerate(data):
        ident = raw.get("id") if isinstance(raw, dict) else None
        where = f"{path.name}[{index}]" + (f" (id {ident})" if ident is not None else "")
        record = convert(where, partial(_record, raw), problems)
        if record is not None:
            records.append(record)
    problems.extend(duplicate_ids(records))
    benchmark = Benchmark(
        name=SOURCE,
        version=content_version([path]),
        video_root=str(video_root or path.parent),
        records=records,
    )
    return Imported(SOURCE, benchmark, problems)


def _record(raw: Any) -> Record:
    task = require(raw, "task", str)
    category = CATEGORY_OF.get(task)
    if category is None:
        raise EntryError(f"unknown task {task!r}; OVO-Bench has {', '.join(CATEGORY_OF)}")
    ident = require(raw, "id", (int, str))
    common = {
        "record_id": f"{SOURCE}:{ident}",
        "source_id": str(ident),
        "source_benchmark": SOURCE,
        "task_type": task,
        "video_path": require(raw, "video", str),
    }
    if category == "forward":
        return _FORWARD[task](raw, common)
    return _qa(raw, common, category)


def _qa(raw: dict, common: dict, category: str) -> QARecord:
    gt = require(raw, "gt", int)
    options = label_options(string_list(raw, "options"))
    # Checked against the options, not just for sign: a huge gt would overflow `chr`.
    if not 0 <= gt < len(options):
        raise EntryError(f"gt {gt} is not an option index (0..{len(options) - 1})")
    # OVO-Bench annotates no evidence time: the question time is the anchor.
    realtime = require(raw, "realtime", NUMBER)
    return QARecord(
        **common,
        question=require(raw, "question", str),
        options=options,
        answer=option_letter(gt),
        question_time_s=realtime,
        evidence_anchor_s=realtime,
        metadata={"category": category, "gt": gt, "answer_text": raw.get("answer")},
    )


# ----------------------------------------------------------------------------- forward


def _forward(
    raw: dict,
    common: dict,
    instruction: str,
    at: float,
    triggers: list[Trigger],
    probes: list[Probe],
):
    if not triggers:
        raise EntryError("its annotations give no moment to respond at")
    metadata = {"category": "forward", "probes": _probes(raw)}
    metadata.update({name: value for name, value in raw.items() if name not in _HELD})
    return ProactiveRecord(
        **common,
        instruction=instruction,
        instruction_time_s=at,
        triggers=tuple(triggers),
        probes=tuple(sorted(probes, key=lambda probe: probe.t)),
        metadata=metadata,
    )


def _yes_no(probe: dict) -> str:
    return "Yes" if probe.get("type") == 1 else "No"


def _probes(raw: dict) -> list[dict]:
    probes = require(raw, "test_info", list)
    for index, probe in enumerate(probes):
        try:
            require(probe, "realtime", NUMBER)
        except EntryError as exc:
            raise EntryError(f"test_info[{index}]: {exc}") from None
    return probes


def _rec(raw: dict, common: dict) -> ProactiveRecord:
    """A trigger at every probe whose count exceeds the counts before it, answering the
    new count; its evidence spans the repetitions it adds, when start/end times are given."""
    activity = require(raw, "activity", str)
    starts, ends = raw.get("start_times"), raw.get("end_times")
    if not (isinstance(starts, list) and isinstance(ends, list)):
        starts, ends = [], []
    triggers = []
    done = 0
    for probe in sorted(_probes(raw), key=lambda probe: probe["realtime"]):
        count = require(probe, "count", int)
        if count <= done:
            continue
        spanned = len(starts) >= count and len(ends) >= count
        triggers.append(
            Trigger(
                trigger_type="event_completion",
                answer=str(count),
                point_s=probe["realtime"],
                evidence_start_s=starts[done] if spanned else None,
                evidence_end_s=ends[count - 1] if spanned else None,
            )
        )
        done = count
    instruction = (
        f'Each time someone completes "{activity}" once more, say how many times it has '
        "been done so far."
    )
    probes = [
        Probe(
            t=probe["realtime"],
            question=f'How many times has "{activity}" been done so far? Answer with a number.',
            answer=str(probe["count"]),
        )
        for probe in _probes(raw)
    ]
    return _forward(raw, common, instruction, 0.0, triggers, probes)


def _ssr(raw: dict, common: dict) -> ProactiveRecord:
    """A state interval [start, end) per step, answered by the step's name."""
    steps = string_list(raw, "all_steps")
    starts = require(raw, "start_time", list)
    ends = require(raw, "end_time", list)
    if not len(steps) == len(starts) == len(ends):
        raise EntryError(
            f"{len(steps)} steps but {len(starts)} start times and {len(ends)} end times"
        )
    triggers = [
        Trigger(trigger_type="state_interval", answer=step, interval_start_s=s, interval_end_s=e)
        for step, s, e in zip(steps, starts, ends, strict=True)
    ]
    tutorial = _words(require(raw, "tutorial", str))
    instruction = (
        f'Whenever the person in the video moves on to a new step of "{tutorial}", say which '
        "step it is."
    )
    probes = [
        Probe(
            t=probe["realtime"],
            question=f'Is the person doing the step "{probe.get("step", "")}" of "{tutorial}" '
            "right now? Answer Yes or No.",
            answer=_yes_no(probe),
        )
        for probe in _probes(raw)
    ]
    return _forward(raw, common, instruction, 0.0, triggers, probes)


def _crr(raw: dict, common: dict) -> ProactiveRecord:
    """The question, asked at ask_time, becomes answerable at clue_time: one point trigger."""
    trigger = Trigger(
        trigger_type="clue_sufficient",
        answer=require(raw, "answer", str),
        point_s=require(raw, "clue_time", NUMBER),
    )
    question = require(raw, "question", str)
    probes = [
        Probe(
            t=probe["realtime"],
            question=f"{question} Can this be answered from what has been shown so far? "
            "Answer Yes or No.",
            answer=_yes_no(probe),
        )
        for probe in _probes(raw)
    ]
    ask_time = require(raw, "ask_time", NUMBER)
    return _forward(raw, common, question, ask_time, [trigger], probes)


_FORWARD: dict[str, Callable[[dict, dict], ProactiveRecord]] = {
    "REC": _rec,
    "SSR": _ssr,
    "CRR": _crr,
}


def _words(camel: str) -> str:
    """COIN's task names are CamelCase ("MakeCandle"): "make candle"."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", camel).lower()
