"""What the Core's command modules share: the error line, the store option and the options
that choose a benchmark's records (`run` and `capacity` both take them, as a RecordChoice).

A module of its own, below `cli.py`, `audit_cli.py` and `capacity_cli.py`: `cli.py` composes
the other two, so they cannot import these back from it.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from streameval.core.run.exit_codes import EXIT_CANNOT_START

# soft_wrap: an error line stays one line however narrow the terminal (or pipe) is.
console = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_CANNOT_START) -> typer.Exit:
    """The one error line a user mistake gets, and the exit to raise with it."""
    console.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def first_validation_error(exc: ValueError) -> str:
    """The first problem of a validation error, as one line: `field: message`."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg'].removeprefix('Value error, ')}"
    return str(exc)


# Where the one `streameval` command (streameval/cli.py) puts the scoring profiles' names
# for the commands below it (ctx.meta): the Core never imports the scorer, yet
# `run --profile trace-paper-v1` should say that it named a scoring profile.
SCORING_PROFILES_KEY = "streameval.scoring_profiles"


def check_protocol_profile(ctx: typer.Context, name: str) -> None:
    """Fail with one line when `name` is no protocol profile."""
    from streameval.core.config import PROTOCOL_PROFILES, unknown_profile

    if name not in PROTOCOL_PROFILES:
        scoring = ctx.meta.get(SCORING_PROFILES_KEY, ())
        raise fail(unknown_profile("protocol", name, PROTOCOL_PROFILES, scoring))


def cancel_on_sigterm(terminated: list[bool]) -> None:
    """Make SIGTERM (`docker stop`) stop the running task like Ctrl-C, noting it in
    `terminated` so that the command can exit 143 instead of 130."""
    main = asyncio.current_task()
    assert main is not None

    def on_sigterm() -> None:
        terminated.append(True)
        main.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)


StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store: a SQLite file path, sqlite:///FILE or postgresql+psycopg://USER@HOST/DB "
        "(default: $STREAMEVAL_STORE or ~/.cache/streameval/streameval.db).",
    ),
]

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]

# The records of a benchmark a command streams.
BenchmarkOption = Annotated[
    str,
    typer.Option(
        help="'synthetic', a benchmark.json, a TRACE release dir, an OVO-Bench or "
        "StreamingBench JSON."
    ),
]
VideoRootOption = Annotated[
    Path | None, typer.Option(help="Folder the benchmark's video paths are relative to.")
]
AllowOutsideVideoRootOption = Annotated[
    bool,
    typer.Option(
        "--allow-outside-video-root",
        help="Accept video paths that lead outside the video root (absolute paths, '..', "
        "symlinks to elsewhere); without it such a record is refused.",
    ),
]
SubsetOption = Annotated[
    str | None, typer.Option(help="TRACE release subset: tiny, standard, full.")
]
SeedOption = Annotated[int, typer.Option(help="Seed of the synthetic benchmark.")]
TaskOption = Annotated[
    list[str] | None, typer.Option("--task", help="qa or proactive (repeatable; default: both).")
]
TaskTypeOption = Annotated[
    list[str] | None,
    typer.Option("--task-type", help="Only records of this task type (repeatable; default: all)."),
]


@dataclass(frozen=True)
class RecordChoice:
    """The records of a benchmark a command streams, as its options gave them."""

    benchmark: str
    video_root: Path | None
    subset: str | None
    seed: int
    task: list[str] | None
    task_type: list[str] | None
    limit: int | None
    allow_outside_video_root: bool = False

    def config_fields(self) -> dict[str, Any]:
        """The RunConfig fields these options set (unset lists mean every task and type)."""
        return {
            "benchmark": self.benchmark,
            "benchmark_seed": self.seed,
            "video_root": str(self.video_root) if self.video_root else None,
            "subset": self.subset,
            "tasks": self.task or ["qa", "proactive"],
            "task_types": self.task_type or [],
            "limit": self.limit,
            "allow_outside_video_root": self.allow_outside_video_root,
        }


# Protocol, not scoring: `score --profile` takes the other kind.
PROFILE_HELP = "Protocol profile: how the video is streamed (names: streameval profiles)."
