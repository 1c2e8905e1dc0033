"""The scorer's commands, which the one `streameval` command (streameval/cli.py) includes:

    streameval score RUN_ID [--profile P] [--json] [--store URL]
    streameval score --events FILE.jsonl
    streameval compare RUN_A RUN_B
    streameval results-api [--host 127.0.0.1] [--port 8800]   (dashboard at /)
    streameval report RUN_ID --html out.html

The store URL comes from --store, else $STREAMEVAL_STORE, else
sqlite:///~/.cache/streameval/streameval.db. A user mistake prints one line and exits 2.
Every command here only reads the store (Store(url, read_only=True)): a store on read-only
media can be scored, and nothing (no migration, no WAL file) is written next to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streameval.core.paths import resolve_store_url
from streameval.core.store.store import Store
from streameval.errors import UserError
from streameval.scorer.errors import ScoreError
from streameval.scorer.judging.judges import LLMJudge, LLMJudgeConfig
from streameval.scorer.profiles import (
    SCORING_PROFILES,
    ScoringProfile,
    get_profile,
    scoring_profile_for,
)

app = typer.Typer(help="Score, compare and serve results.", pretty_exceptions_enable=False)

StoreOption = Annotated[
    str | None,
    typer.Option("--store", help="Store URL (default: $STREAMEVAL_STORE or ~/.cache/streameval)."),
]
ProfileOption = Annotated[
    str, typer.Option("--profile", help=f"Scoring profile: {', '.join(SCORING_PROFILES)}.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
ToleranceOption = Annotated[
    float | None,
    typer.Option("--tolerance", help="Proactive window tolerance in seconds (profile default 5)."),
]
JudgeUrlOption = Annotated[
    str | None,
    typer.Option(
        "--judge-url",
        envvar="STREAMEVAL_JUDGE_URL",
        help="OpenAI-compatible judge endpoint, e.g. http://127.0.0.1:8000/v1 (default: exact "
        "match). The API key is read from $STREAMEVAL_JUDGE_API_KEY.",
    ),
]
JudgeModelOption = Annotated[
    str | None,
    typer.Option("--judge-model", envvar="STREAMEVAL_JUDGE_MODEL", help="Judge model name."),
]

_stderr = Console(stderr=True, soft_wrap=True)  # an error stays one line in any width


def _fail(message: str) -> typer.Exit:
    _stderr.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(2)


def _exported_protocol(path: Path) -> str:
    """The protocol profile named in an export's run line ("" when it cannot be read; then
    scoring the file reports the problem)."""
    try:
        with path.open() as handle:
            return json.loads(handle.readline()).get("config", {}).get("profile", "")
    except (OSError, ValueError, AttributeError):
        return ""


def _profile(name: str, tolerance: float | None) -> ScoringProfile:
    profile = get_profile(name)
    return profile if tolerance is None else profile.with_overrides(tolerance_s=tolerance)


def _judge(url: str | None, model: str | None) -> LLMJudge | None:
    if url is None:
        if model is not None:
            raise ScoreError("--judge-model needs --judge-url (or $STREAMEVAL_JUDGE_URL)")
        return None
    return LLMJudge(LLMJudgeConfig(base_url=url, model=model or ""))


@app.command()
def score(
    run_id: Annotated[str | None, typer.Argument(help="The stored run to score.")] = None,
    events: Annotated[
        Path | None,
        typer.Option("--events", help="Score an exported JSONL event log instead (no store)."),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help=f"Scoring profile: {', '.join(SCORING_PROFILES)} (default: the one matching the "
            "run's protocol profile, trace-paper-v1 for trace runs).",
        ),
    ] = None,
    as_json: JsonOption = False,
    records: Annotated[
        bool, typer.Option("--records", help="With --json: include per-record results.")
    ] = False,
    tolerance: ToleranceOption = None,
    judge_url: JudgeUrlOption = None,
    judge_model: JudgeModelOption = None,
    store: StoreOption = None,
) -> None:
    """Score a run: TRACE QA and proactive metrics, workload, and the profile's extras."""
    from streameval.scorer.report import score_exported, score_run

    if (run_id is None) == (events is None):
        raise _fail("give either a RUN_ID or --events FILE.jsonl")
    try:
        judge = _judge(judge_url, judge_model)
        if events is not None:
            name = profile or scoring_profile_for(_exported_protocol(events))
            scores = score_exported(events, _profile(name, tolerance), judge)
        else:
            with Store(resolve_store_url(store), read_only=True) as opened:
                protocol = opened.get_run(run_id).config.get("profile", "")
                name = profile or scoring_profile_for(protocol)
                scores = score_run(opened, run_id, _profile(name, tolerance), judge)
    except UserError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        print(json.dumps(scores.to_json(include_records=records)))
    else:
        scores.render(Console())


@app.command()
def compare(
    run_a: Annotated[str, typer.Argument(help="The baseline run (A).")],
    run_b: Annotated[str, typer.Argument(help="The run compared with it (B).")],
    profile: ProfileOption = "trace-paper-v1",
    as_json: JsonOption = False,
    tolerance: ToleranceOption = None,
    judge_url: JudgeUrlOption = None,
    judge_model: JudgeModelOption = None,
    store: StoreOption = None,
) -> None:
    """Compare two runs record by record: B - A with paired bootstrap intervals."""
    from streameval.scorer.compare import compare_runs

    try:
        chosen = _profile(profile, tolerance)
        judge = _judge(judge_url, judge_model)
        with Store(resolve_store_url(store), read_only=True) as opened:
            comparison = compare_runs(opened, run_a, run_b, chosen, judge)
    except UserError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        print(json.dumps(comparison.model_dump(mode="json")))
    else:
        comparison.render(Console())


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="The stored run to report.")],
    html: Annotated[
        Path, typer.Option("--html", help="Write the report to this HTML file.", dir_okay=False)
    ],
    profile: ProfileOption = "trace-paper-v1",
    tolerance: ToleranceOption = None,
    max_timelines: Annotated[
        int,
        typer.Option(
            "--max-timelines", min=0, help="Embed the timelines of at most this many records."
        ),
    ] = 1000,
    thumbnails: Annotated[
        bool,
        typer.Option(
            "--thumbnails", help="Embed the frames the timelines show (needs the frame cache)."
        ),
    ] = False,
    judge_url: JudgeUrlOption = None,
    judge_model: JudgeModelOption = None,
    store: StoreOption = None,
) -> None:
    """Write a run's static HTML report (metrics, records, timelines) that opens without a
    server."""
    from streameval.scorer.service.html_report import write_report

    try:
        chosen = _profile(profile, tolerance)
        judge = _judge(judge_url, judge_model)
        with Store(resolve_store_url(store), read_only=True) as opened:
            written = write_report(opened, run_id, html, chosen, judge, max_timelines, thumbnails)
    except UserError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write {html}: {exc.strerror or exc}") from None
    _stderr.print(
        f"wrote {written.path}: {written.records} records, {written.timelines} timelines, "
        f"frames of {written.videos_with_frames} videos, {written.size_bytes / 1e6:.1f} MB",
        highlight=False,
    )


@app.command("results-api")
def results_api(
    host: Annotated[str, typer.Option(help="Bind address (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8800,
    judge_url: JudgeUrlOption = None,
    judge_model: JudgeModelOption = None,
    store: StoreOption = None,
) -> None:
    """Serve the read-only results API (JSON, OpenAPI docs at /docs) and the dashboard (/)."""
    import uvicorn

    from streameval.scorer.service.api import create_app

    try:
        app = create_app(resolve_store_url(store), _judge(judge_url, judge_model))
    except UserError as exc:
        raise _fail(str(exc)) from None
    uvicorn.run(app, host=host, port=port, log_level="warning")
