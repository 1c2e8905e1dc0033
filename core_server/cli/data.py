"""`streameval data validate` and `streameval data stats`: check and count a benchmark;
`streameval data sample`: write a small sample of each format to try them on.

PATH is a TRACE release directory, an OVO-Bench or StreamingBench JSON file, or a
benchmark.json; its format is detected. Exit codes: 0 fine, 1 problems found (validate),
2 the path cannot be read at all. A malformed file is one error line, never a traceback.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from streameval.core.cli.common import AllowOutsideVideoRootOption, JsonOption

# The importers are loaded by the commands: `streameval --help` does without them.
if TYPE_CHECKING:
    from streameval.core.benchmark.importing import Imported
    from streameval.core.benchmark.records import Benchmark, ProactiveRecord
    from streameval.core.benchmark.sample import Written
    from streameval.core.benchmark.validate import Report

data_app = typer.Typer(
    help="Check, count and sample benchmark files (TRACE, OVO-Bench, StreamingBench).",
    no_args_is_help=True,
)

PathArgument = Annotated[
    Path,
    typer.Argument(
        help="A TRACE release directory, an OVO-Bench or StreamingBench JSON file, "
        "or a benchmark.json.",
        show_default=False,
    ),
]
SubsetOption = Annotated[
    str | None, typer.Option("--subset", help="TRACE subset: tiny, standard or full.")
]


def _import(path: Path, video_root: Path | None, subset: str | None, as_json: bool) -> Imported:
    from streameval.core.benchmark.importing import BenchmarkError
    from streameval.core.benchmark.loader import import_path

    try:
        return import_path(path, video_root=video_root, subset=subset)
    except BenchmarkError as exc:
        _fail(str(exc), path, as_json)


def _fail(message: str, path: Path, as_json: bool) -> NoReturn:
    if as_json:
        typer.echo(json.dumps({"path": str(path), "ok": False, "error": message}))
    else:
        typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


# ----------------------------------------------------------------------------- validate


@data_app.command("validate")
def validate_command(
    path: PathArgument,
    video_root: Annotated[
        Path | None,
        typer.Option(
            "--video-root",
            help="Folder the videos are relative to; videos are checked only when given.",
        ),
    ] = None,
    allow_outside_video_root: AllowOutsideVideoRootOption = False,
    subset: SubsetOption = None,
    as_json: JsonOption = False,
) -> None:
    """One line per problem, then a summary; exit 1 when there are problems."""
    from streameval.core.benchmark.validate import validate

    imported = _import(path, video_root, subset, as_json)
    report = validate(imported, video_root, allow_outside_video_root=allow_outside_video_root)
    if as_json:
        typer.echo(json.dumps(_report_json(path, imported, report, video_root)))
    else:
        for note in report.notes:
            typer.echo(f"note: {note}", err=True)
        for warning in report.warnings:
            typer.echo(f"warning: {warning}", err=True)
        for problem in report.problems:
            typer.echo(str(problem))
        typer.echo(_summary(path, imported, report, video_root))
    raise typer.Exit(1 if report.problems else 0)


def _summary(path: Path, imported: Imported, report: Report, video_root: Path | None) -> str:
    found = len(report.problems)
    head = f"{found} problem{'s' if found != 1 else ''}" if found else "no problems"
    videos = (
        f"{report.videos_checked} videos checked"
        if video_root is not None
        else "videos not checked (no --video-root)"
    )
    records = f"{report.records} {imported.format} record{'s' if report.records != 1 else ''}"
    return f"{path}: {head} in {records}; {videos}"


def _report_json(path: Path, imported: Imported, report: Report, video_root: Path | None) -> dict:
    return {
        "path": str(path),
        "format": imported.format,
        "ok": not report.problems,
        "records": report.records,
        "problems": [{"where": p.where, "message": p.message} for p in report.problems],
        "notes": report.notes,
        "warnings": report.warnings,
        "videos_checked": report.videos_checked if video_root is not None else None,
    }


# ----------------------------------------------------------------------------- stats


@data_app.command("stats")
def stats_command(
    path: PathArgument, subset: SubsetOption = None, as_json: JsonOption = False
) -> None:
    """Counts per task type, questions, windows, videos and annotated durations."""
    imported = _import(path, None, subset, as_json)
    stats = {"path": str(path), "format": imported.format, **benchmark_stats(imported.benchmark)}
    stats["problems"] = len(imported.problems)
    if imported.problems:
        typer.echo(
            f"note: {len(imported.problems)} entries could not be imported and are not "
            f"counted; `streameval data validate {path}` lists them",
            err=True,
        )
    typer.echo(json.dumps(stats) if as_json else _stats_text(stats))


def benchmark_stats(benchmark: Benchmark) -> dict:
    """Counts as the sources count them: every QA question, every proactive instruction and
    every offline probe (OVO-Bench forward tasks) is a question; windows are the triggers."""
    from streameval.core.benchmark.records import ProactiveRecord, QARecord

    qa = [r for r in benchmark.records if isinstance(r, QARecord)]
    proactive = [r for r in benchmark.records if isinstance(r, ProactiveRecord)]
    probes = sum(len(r.metadata.get("probes") or ()) for r in proactive)
    windows_by_type: Counter[str] = Counter()
    for record in proactive:
        windows_by_type[record.task_type] += len(record.triggers)
    return {
        "benchmark": f"{benchmark.name}@{benchmark.version}",
        "records": len(benchmark.records),
        "qa": len(qa),
        "proactive": len(proactive),
        "by_task_type": dict(sorted(Counter(r.task_type for r in benchmark.records).items())),
        "questions": len(qa) + len(proactive) + probes,
        "probes": probes,
        "windows": sum(windows_by_type.values()),
        "windows_by_task_type": dict(sorted(windows_by_type.items())),
        "videos": len({r.video_path for r in benchmark.records}),
        "durations": {
            "question_time_s": _spread([r.question_time_s for r in qa]),
            "monitoring_s": _spread([t for r in proactive if (t := _monitoring_s(r)) is not None]),
        },
    }


def _monitoring_s(record: ProactiveRecord) -> float | None:
    """From the instruction to the latest annotated window start or end."""
    from streameval.core.benchmark.validate import trigger_bounds

    times = [t for trigger in record.triggers for t in trigger_bounds(trigger) if t is not None]
    return max(times) - record.instruction_time_s if times else None


def _spread(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"min": min(values), "mean": round(fmean(values), 3), "max": max(values)}


def _stats_text(stats: dict) -> str:
    lines = [
        f"{stats['benchmark']} ({stats['format']}): {stats['records']} records "
        f"({stats['qa']} QA, {stats['proactive']} proactive) on {stats['videos']} videos",
        f"questions {stats['questions']} ({stats['qa']} QA, {stats['proactive']} instructions, "
        f"{stats['probes']} probes); windows {stats['windows']}",
        "task type                                  records  windows",
    ]
    for task_type, count in stats["by_task_type"].items():
        windows = stats["windows_by_task_type"].get(task_type, "")
        lines.append(f"  {task_type:<40} {count:>7}  {windows:>7}")
    for name, spread in stats["durations"].items():
        if spread is not None:
            lines.append(
                f"{name}: min {spread['min']:g}, mean {spread['mean']:g}, max {spread['max']:g}"
            )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- sample

# Where `streameval adapter serve reference` listens by default.
REFERENCE_URL = "ws://127.0.0.1:8765/ws"


@data_app.command("sample")
def sample_command(
    directory: Annotated[
        Path,
        typer.Argument(
            help="Folder to write the sample into (created; files of a sample already "
            "there are replaced).",
            show_default=False,
        ),
    ],
) -> None:
    """Write a few records of each format on generated videos, with the commands to try them.

    TRACE release, OVO-Bench and StreamingBench files, and the commands that validate,
    run (with the reference adapter) and score each.
    """
    from streameval.core.benchmark.sample import write_sample

    if directory.exists() and not directory.is_dir():
        _fail(f"{directory} exists and is not a folder", directory, as_json=False)
    try:
        written = write_sample(directory)
    except OSError as exc:
        _fail(f"cannot write the sample to {directory}: {exc}", directory, as_json=False)
    typer.echo(sample_instructions(written))


def sample_instructions(written: Written) -> str:
    """What was written, and the exact commands to try each format with the reference
    adapter (RUN_ID: the id `streameval run` prints)."""
    root = shlex.quote(str(written.video_root))
    lines = [
        f"Wrote a sample of each format to {written.video_root} "
        f"(its videos: {written.video_root / 'videos'}).",
        "Serve the reference adapter in another terminal:",
        "  streameval adapter serve reference",
        "then try each format (RUN_ID: the id `streameval run` prints):",
    ]
    for title, path, protocol, scoring in written.tries():
        where = shlex.quote(str(path))
        lines += [
            "",
            f"# {title}",
            f"streameval data validate {where} --video-root {root}",
            f"streameval run --benchmark {where} --video-root {root} --profile {protocol} "
            f"--adapter-url {REFERENCE_URL}",
            f"streameval score RUN_ID --profile {scoring}",
        ]
    lines += [
        "",
        "The reference adapter reads shapes, colours and digits from the frames: it answers",
        "every question here except OVO-Bench's REC probes (how often an activity was done),",
        "so with it ovo-offline scores forward 0 and total 66.67.",
    ]
    return "\n".join(lines)
