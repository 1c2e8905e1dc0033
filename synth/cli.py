"""`streameval synth`: build an EvoStreaming trajectory dataset with a served model.

    streameval synth --videos clips/ --model-url http://127.0.0.1:8000/v1 \\
        --model Qwen/Qwen2.5-VL-7B-Instruct --out synth-out/

Everything but the options' defaults (synth/models.py, pydantic only) is imported inside
the command: building the command tree stays light (tests/test_cli_startup.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streameval.synth.models import MAX_SILENT_SHARE, MIN_SILENT_SHARE

if TYPE_CHECKING:
    from streameval.synth.summary import Summary

# What `--videos DIR` takes from the folder (by name; unreadable ones are skipped later).
VIDEO_SUFFIXES = frozenset({".mp4", ".mkv", ".webm", ".mov", ".avi", ".m4v", ".mpg", ".ts"})
# The audit refused the dataset (Silent share out of bounds): beside `streameval run`'s
# codes (core/run/exit_codes.py), none of which means "ran, but wrote no dataset".
EXIT_DATASET_REFUSED = 5


def synth(
    videos: Annotated[
        Path | None, typer.Option("--videos", help="A folder: every video file in it.")
    ] = None,
    benchmark: Annotated[
        str | None,
        typer.Option(help="Or a benchmark's videos: 'synthetic' or a benchmark file."),
    ] = None,
    model_url: Annotated[
        str | None,
        typer.Option("--model-url", help="The served model, http://host:port/v1 (OpenAI API)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="The model's name on that server.")] = None,
    out: Annotated[Path | None, typer.Option(help="Output folder.")] = None,
    segment_s: Annotated[float, typer.Option("--segment-s", help="Segment length, s.")] = 2.0,
    fps: Annotated[float, typer.Option(help="Frames sampled per second.")] = 0.5,
    questions: Annotated[int, typer.Option(help="Questions per video (K).")] = 3,
    seed: Annotated[int, typer.Option(help="Model sampling seed and roll-out tie-breaks.")] = 0,
    max_width: Annotated[int, typer.Option(help="Frame width cap.")] = 960,
    max_images: Annotated[
        int, typer.Option(help="Images per call: whole-video and roll-out calls.")
    ] = 16,
    retries: Annotated[int, typer.Option(help="Further attempts of a failed call.")] = 2,
    limit: Annotated[int | None, typer.Option(help="At most this many videos.")] = None,
    min_silent_share: Annotated[
        float,
        typer.Option("--min-silent-share", help="Refuse a dataset whose Silent share is lower."),
    ] = MIN_SILENT_SHARE,
    max_silent_share: Annotated[
        float,
        typer.Option("--max-silent-share", help="Refuse a dataset whose Silent share is higher."),
    ] = MAX_SILENT_SHARE,
    time_labels: Annotated[
        bool,
        typer.Option("--time-labels", help="'Frame at {t:g}s:' before each frame in the rows."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Synthesise Silent/respond streaming trajectories with a served VideoLLM and write
    them as an ms-swift dataset (docs/synth.md)."""
    import asyncio
    import json
    from dataclasses import asdict
    from urllib.parse import urlsplit

    from rich.markup import escape

    from streameval.core.cli.common import console, fail
    from streameval.core.run.exit_codes import EXIT_ALL_FAILED, EXIT_FINISHED, EXIT_SOME_FAILED
    from streameval.errors import UserError
    from streameval.synth.client import ModelSettings
    from streameval.synth.pipeline import SynthOptions, synthesise

    if (videos is None) == (benchmark is None):
        raise fail("give the videos: either --videos DIR or --benchmark FILE")
    if model_url is None or urlsplit(model_url).scheme not in ("http", "https"):
        raise fail("--model-url: give the served model's URL, e.g. http://127.0.0.1:8000/v1")
    if not urlsplit(model_url).netloc:
        raise fail(f"--model-url: no host in {model_url!r}")
    if not model:
        raise fail("--model: give the model's name on the server")
    if out is None:
        raise fail("--out: give the output folder")
    if out.exists() and not out.is_dir():
        raise fail(f"--out: {out} is a file, not a folder")
    for name, value in (("--segment-s", segment_s), ("--fps", fps)):
        if not value > 0:
            raise fail(f"{name} must be positive, got {value:g}")
    if segment_s * fps < 1 - 1e-9:
        raise fail(
            f"--segment-s {segment_s:g} holds no frame at --fps {fps:g}: "
            f"give at least {1 / fps:g} s"
        )
    for name, value, least in (
        ("--questions", questions, 1),
        ("--max-width", max_width, 1),
        ("--max-images", max_images, 1),
        ("--retries", retries, 0),
        ("--limit", limit, 1),
    ):
        if value is not None and value < least:
            raise fail(f"{name} must be at least {least}, got {value}")
    for name, share in (
        ("--min-silent-share", min_silent_share),
        ("--max-silent-share", max_silent_share),
    ):
        if not 0 <= share <= 1:
            raise fail(f"{name} is a share of the steps, from 0 to 1, got {share:g}")
    if min_silent_share > max_silent_share:
        raise fail(
            f"--min-silent-share {min_silent_share:g} is above "
            f"--max-silent-share {max_silent_share:g}"
        )

    try:
        pool = _video_pool(videos, benchmark)
    except UserError as exc:
        raise fail(str(exc)) from None
    pool = pool[:limit] if limit is not None else pool
    settings = ModelSettings(base_url=model_url, model=model, seed=seed, retries=retries)
    options = SynthOptions(
        segment_s=segment_s,
        fps=fps,
        questions=questions,
        seed=seed,
        max_width=max_width,
        max_images=max_images,
        min_silent_share=min_silent_share,
        max_silent_share=max_silent_share,
        time_labels=time_labels,
    )

    def error_line(message: str) -> None:
        # Escaped: the message may quote a model's reply, which may hold [markup].
        console.print(f"[red]error:[/red] {escape(message)}", highlight=False)

    try:
        result = asyncio.run(synthesise(pool, settings, options, out.resolve(), error_line))
    except UserError as exc:  # the frame cache cannot be written, the output folder...
        raise fail(str(exc)) from None
    summary = result.summary
    assert summary is not None
    if as_json:
        shown = {
            "out": str(out.resolve()),
            "videos": result.videos,
            "trajectories": len(result.trajectories),
            "skipped": [asdict(skip) for skip in result.skipped],
            "summary": summary.model_dump(mode="json"),
        }
        print(json.dumps(shown))
    else:
        print(
            f"{result.videos} videos: {len(result.trajectories)} trajectories, "
            f"{len(result.skipped)} skipped\n"
            f"{_dataset_line(summary)} ({summary.videos.dropped} videos dropped by the "
            f"audit)\nreport {out.resolve() / 'report.html'}"
        )
    if summary.refused is not None:
        error_line(f"dataset refused: {summary.refused}; train.jsonl not written")
        raise typer.Exit(EXIT_DATASET_REFUSED)
    if result.skipped:
        all_failed = len(result.skipped) == result.videos
        raise typer.Exit(EXIT_ALL_FAILED if all_failed else EXIT_SOME_FAILED)
    raise typer.Exit(EXIT_FINISHED)


def _dataset_line(summary: Summary) -> str:
    if summary.dataset is None:
        return f"dataset refused: Silent share {summary.actions.silent_share:.1%}"
    dataset = summary.dataset
    return f"dataset {dataset.path}: {dataset.rows} conversations, {dataset.steps} steps"


def _video_pool(folder: Path | None, benchmark: str | None) -> list[Path]:
    """The videos to synthesise from, in order; UserError when there are none."""
    from streameval.core.benchmark.loader import load_benchmark
    from streameval.core.store.locations import default_cache_dir
    from streameval.errors import UserError

    if folder is not None:
        if not folder.is_dir():
            raise UserError(f"--videos: {folder} is not a folder")
        found = sorted(p for p in folder.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES)
        if not found:
            shown = ", ".join(sorted(VIDEO_SUFFIXES))
            raise UserError(f"--videos: no video file ({shown}) in {folder}")
        return found
    assert benchmark is not None
    loaded = load_benchmark(benchmark, default_cache_dir())
    root = Path(loaded.video_root)
    # Records share videos: each video once, in the order of its first record.
    return list(dict.fromkeys(root / record.video_path for record in loaded.records))
