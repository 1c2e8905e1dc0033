"""Import a TRACE release directory (v1.1.0, schema "osb-canonical-v0").

The release's records already follow the schema of `records.py`, so the mapping is field
for field; the work here is reading the files strictly, choosing a subset, verifying the
manifest's checksums, and turning each window's `trigger_annotations` entry into a
`Trigger`. docs/benchmarks.md lists the mapping.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from streameval.core.benchmark.importing import (
    NUMBER,
    BenchmarkError,
    EntryError,
    Imported,
    Problem,
    content_version,
    convert,
    duplicate_ids,
    file_sha256,
    read_json,
    read_jsonl,
    require,
    string_list,
)
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord, Record, Trigger

SOURCE = "trace"
QA_FILE = "qa.jsonl"
PROACTIVE_FILE = "proactive.jsonl"
MANIFEST = "manifest.json"

# The id lists that select each subset's QA and proactive records; None keeps the whole
# file ("standard" is the 407-record proactive cohort of the paper, with every QA record).
SUBSETS: dict[str, tuple[str | None, str | None]] = {
    "tiny": ("tiny_qa_ids.json", "tiny_proactive_ids.json"),
    "standard": (None, "standard_proactive_ids.json"),
    "full": (None, None),
}


def is_release(directory: Path) -> bool:
    return (directory / QA_FILE).is_file() or (directory / PROACTIVE_FILE).is_file()


def import_release(
    directory: Path, subset: str = "full", video_root: Path | None = None
) -> Imported:
    """The records of one subset of the release in `directory`; videos are looked up
    under `video_root` (default: the release directory)."""
    if subset not in SUBSETS:
        raise BenchmarkError(f"unknown TRACE subset {subset!r}; choose one of {', '.join(SUBSETS)}")
    for name in (QA_FILE, PROACTIVE_FILE):
        if not (directory / name).is_file():
            raise BenchmarkError(f"{directory} is not a TRACE release: it has no {name}")
    problems: list[Problem] = []
    notes: list[str] = []
    qa, qa_lines = _read_records(directory / QA_FILE, _qa_record, problems)
    proactive, proactive_lines = _read_records(
        directory / PROACTIVE_FILE, _proactive_record, problems
    )
    manifest = _manifest(directory, problems, notes)
    if manifest is not None:
        _check_counts(manifest, {"qa": qa_lines, "proactive": proactive_lines}, problems)
    qa_ids, proactive_ids = SUBSETS[subset]
    records: list[Record] = [
        *_select(directory, subset, qa_ids, qa, problems),
        *_select(directory, subset, proactive_ids, proactive, problems),
    ]
    problems.extend(duplicate_ids(records))
    version = (manifest or {}).get("release_id") or content_version(
        directory / name for name in (QA_FILE, PROACTIVE_FILE)
    )
    benchmark = Benchmark(
        name=SOURCE if subset == "full" else f"{SOURCE}-{subset}",
        version=str(version),
        video_root=str(video_root or directory),
        records=records,
    )
    return Imported(SOURCE, benchmark, problems, notes)


# ----------------------------------------------------------------------------- files


def _read_records(
    path: Path, build: Callable[[Any], Record], problems: list[Problem]
) -> tuple[list[Record], int]:
    """The records of one JSONL file, and how many records (lines) the file holds."""
    rows, malformed = read_jsonl(path)
    problems.extend(malformed)
    records = []
    for number, raw in rows:
        label = raw.get("record_id") if isinstance(raw, dict) else None
        where = f"{path.name}:{number}" + (f" ({label})" if label else "")
        record = convert(where, partial(build, raw), problems)
        if record is not None:
            records.append(record)
    return records, len(rows) + len(malformed)


def _manifest(directory: Path, problems: list[Problem], notes: list[str]) -> dict | None:
    """The release's manifest after checking every file it lists that is present."""
    path = directory / MANIFEST
    if not path.is_file():
        notes.append(f"{directory}: no {MANIFEST}, so file checksums are not verified")
        return None
    try:
        manifest = read_json(path)
    except BenchmarkError as exc:
        problems.append(Problem(MANIFEST, str(exc)))
        return None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        problems.append(Problem(MANIFEST, "has no 'files' object of sha256 checksums"))
        return None
    for name, expected in files.items():
        target = directory / name
        if not target.is_file():
            # Audit sidecars are not needed to import; a missing one is worth knowing only.
            notes.append(f"{MANIFEST} lists {name}, which is not in {directory}")
            continue
        actual = file_sha256(target)
        if actual != expected:
            problems.append(
                Problem(name, f"sha256 {actual} does not match {MANIFEST}'s {expected}")
            )
    return manifest


def _check_counts(manifest: dict, lines: dict[str, int], problems: list[Problem]) -> None:
    counts = manifest.get("counts") or {}
    if not isinstance(counts, dict):
        problems.append(Problem(MANIFEST, "'counts' is not an object"))
        return
    for task, file in (("qa", QA_FILE), ("proactive", PROACTIVE_FILE)):
        if task in counts and counts[task] != lines[task]:
            problems.append(
                Problem(file, f"holds {lines[task]} records, {MANIFEST} says {counts[task]}")
            )


def _select(
    directory: Path,
    subset: str,
    ids_file: str | None,
    records: list[Record],
    problems: list[Problem],
) -> list[Record]:
    """The records listed in `ids_file`, in file order (all of them when it is None)."""
    if ids_file is None:
        return records
    path = directory / ids_file
    if not path.is_file():
        raise BenchmarkError(f"the {subset} subset needs {ids_file}, which {directory} lacks")
    ids = read_json(path)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BenchmarkError(f"{path}: expected a JSON list of record ids")
    present = {record.record_id for record in records}
    problems.extend(
        Problem(ids_file, f"lists {record_id}, which no record has")
        for record_id in ids
        if record_id not in present
    )
    wanted = set(ids)
    return [record for record in records if record.record_id in wanted]


# ----------------------------------------------------------------------------- records


def _expect_task(raw: Any, task: str) -> None:
    found = require(raw, "task", str)
    if found != task:
        raise EntryError(f"task is {found!r}, this file holds {task!r} records")


def _metadata(raw: dict, unmapped: tuple[str, ...]) -> dict:
    """The source's metadata, plus the top-level source fields no record field holds."""
    metadata = dict(require(raw, "metadata", dict))
    metadata.update({name: raw[name] for name in unmapped if name in raw})
    return metadata


def _qa_record(raw: Any) -> QARecord:
    _expect_task(raw, "qa")
    metadata = _metadata(raw, ("memory_length",))
    return QARecord(
        record_id=require(raw, "record_id", str),
        source_id=require(raw, "source_id", str),
        source_benchmark=SOURCE,
        task_type=require(raw, "task_type", str),
        video_path=require(raw, "video_path", str),
        question=require(raw, "question", str),
        options=tuple(string_list(raw, "options")),
        answer=require(raw, "answer", str),
        question_time_s=require(raw, "question_time_s", NUMBER),
        evidence_anchor_s=require(raw, "evidence_anchor_s", NUMBER),
        evidence_spans=metadata.get("evidence_spans") or (),
        metadata=metadata,
    )


def _proactive_record(raw: Any) -> ProactiveRecord:
    _expect_task(raw, "proactive")
    # deadline_s is legacy and never used; it is kept only so nothing of the source is lost.
    metadata = _metadata(raw, ("memory_length", "deadline_s"))
    windows = require(raw, "windows", list)
    annotations = metadata.get("trigger_annotations")
    if not isinstance(annotations, list):
        raise EntryError("metadata has no 'trigger_annotations' list")
    if len(windows) != len(annotations):
        raise EntryError(f"{len(windows)} windows but {len(annotations)} trigger_annotations")
    return ProactiveRecord(
        record_id=require(raw, "record_id", str),
        source_id=require(raw, "source_id", str),
        source_benchmark=SOURCE,
        task_type=require(raw, "task_type", str),
        video_path=require(raw, "video_path", str),
        instruction=require(raw, "instruction", str),
        instruction_time_s=require(raw, "instruction_time_s", NUMBER),
        triggers=tuple(
            _trigger(index, window, annotation)
            for index, (window, annotation) in enumerate(zip(windows, annotations, strict=True))
        ),
        metadata=metadata,
    )


def _trigger(index: int, window: Any, annotation: Any) -> Trigger:
    """The trigger of `trigger_annotations[index]`, whose response window must be the
    record's `windows[index]` (the release writes both; a disagreement is an error)."""
    try:
        kind = require(annotation, "trigger_type", str)
        if kind == "state_interval":
            require(annotation, "interval_start_s", NUMBER)
            require(annotation, "interval_end_s", NUMBER)
        else:
            require(annotation, "point_trigger_s", NUMBER)
        bounds = (require(window, "start_s", NUMBER), require(window, "end_s", NUMBER))
        annotated = (
            annotation.get("response_window_start_s"),
            annotation.get("response_window_end_s"),
        )
    except EntryError as exc:
        raise EntryError(f"window {index}: {exc}") from None
    if bounds != annotated:
        raise EntryError(
            f"windows[{index}] {list(bounds)} differs from trigger_annotations[{index}]'s "
            f"response window {list(annotated)}"
        )
    return Trigger(
        trigger_type=kind,
        answer=require(annotation, "answer", str),
        point_s=annotation.get("point_trigger_s"),
        interval_start_s=annotation.get("interval_start_s"),
        interval_end_s=annotation.get("interval_end_s"),
        window_end_s=annotation.get("response_window_end_s"),
        accepted_facts=annotation.get("accepted_facts") or (),
        evidence_start_s=annotation.get("evidence_start_s"),
        evidence_end_s=annotation.get("evidence_end_s"),
    )
