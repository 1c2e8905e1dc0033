"""The scorer's commands, which the one `streameval` command (streameval/cli.py) includes:

    streameval score RUN_ID [--profile P] [--json] [--store URL]
    streameval score --events FILE.jsonl [--allow-partial]
    streameval compare RUN_A RUN_B
    streameval table RUN_OR_SUITE... [--metrics M,...] [--by task_type] [--intervals] [--format F]
    streameval results-api [--host 127.0.0.1] [--port 8800]   (dashboard at /)
    streameval report RUN_ID --html out.html

The store URL comes from --store, else $STREAMEVAL_STORE, else
sqlite:///~/.cache/streameval/streameval.db. A user mistake prints one line and exits 2.
Every command here only reads the store (Store(url, read_only=True)): a store on read-only
media can be scored, and nothing (no migration, no WAL file) is written next to it.
An LLM judge's verdicts go to the verdict cache in the cache directory instead
(scorer/judging/cache.py), so rescoring a run costs no judge calls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from streameval.core.store.locations import resolve_store_url
from streameval.errors import UserError
from streameval.scorer.errors import ScoreError
from streameval.scorer.profiles import (
    SCORING_PROFILES,
    ScoringProfile,
    get_profile,
    scoring_profile_for,
)

# The store, the metrics and the judge client are imported by the commands that use them:
# `streameval --help` builds the command tree without them (streameval/cli.py).
if TYPE_CHECKING:
    from streameval.core.store.store import Store
    from streameval.scorer.judging.judges import LLMJudge

app = typer.Typer(help="Score, compare and serve results.", pretty_exceptions_enable=False)

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store: a SQLite file path, sqlite:///FILE or postgresql+psycopg://USER@HOST/DB "
        "(default: $STREAMEVAL_STORE or ~/.cache/streameval/streameval.db); never created.",
    ),
]
_MATCHING = "trace-paper-v1 for runs of the trace protocols"
ProfileOption = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help=f"Scoring profile: {', '.join(SCORING_PROFILES)} (default: the one matching the "
        f"run's protocol profile, {_MATCHING}).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
ExplainOption = Annotated[
    bool,
    typer.Option(
        "--explain", help="Also say each metric's unit, scale and meaning (docs/metrics.md)."
    ),
]
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


def _run_profile(
    store: Store, run_id: str, name: str | None, tolerance: float | None
) -> ScoringProfile:
    """The named profile, else the one matching the run's protocol profile."""
    if name is None:
        name = scoring_profile_for(store.get_run(run_id).config.get("profile", ""))
    return _profile(name, tolerance)


def _judge(url: str | None, model: str | None) -> LLMJudge | None:
    from streameval.scorer.judging.judges import LLMJudge, LLMJudgeConfig

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
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial",
            help="With --events: score an incomplete export (no end line, or other counts than "
            "its lines) instead of refusing it; the results say it is partial.",
        ),
    ] = False,
    profile: ProfileOption = None,
    as_json: JsonOption = False,
    records: Annotated[
        bool, typer.Option("--records", help="With --json: include per-record results.")
    ] = False,
    explained: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Also say each metric's unit, scale and meaning; without a run, print every "
            "metric's (the glossary).",
        ),
    ] = False,
    tolerance: ToleranceOption = None,
    judge_url: JudgeUrlOption = None,
    judge_model: JudgeModelOption = None,
    store: StoreOption = None,
) -> None:
    """Score a run: TRACE QA and proactive metrics, workload, and the profile's extras."""
    from streameval.core.store.store import Store
    from streameval.scorer.report import explanations_json, score_exported, score_run

    if explained and run_id is None and events is None:
        _print_glossary(as_json)
        return
    if (run_id is None) == (events is None):
        raise _fail("give either a RUN_ID or --events FILE.jsonl (or --explain alone)")
    if allow_partial and events is None:
        raise _fail("--allow-partial applies to --events FILE.jsonl only (a stored run is whole)")
    try:
        judge = _judge(judge_url, judge_model)
        if events is not None:
            name = profile or scoring_profile_for(_exported_protocol(events))
            scores = score_exported(events, _profile(name, tolerance), judge, allow_partial)
        else:
            with Store(resolve_store_url(store, must_exist=True), read_only=True) as opened:
                search = opened.analyses(run_id).get("capacity")
                if search is not None:
                    _print_capacity_search(run_id, search, as_json)
                    return
                chosen = _run_profile(opened, run_id, profile, tolerance)
                scores = score_run(opened, run_id, chosen, judge)
    except UserError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        body = scores.to_json(include_records=records)
        if explained:
            body["explain"] = explanations_json(scores.shown_metrics())
        print(json.dumps(body))
    else:
        scores.render(Console(), explained)


def _print_capacity_search(run_id: str, search: dict, as_json: bool) -> None:
    """A capacity search (docs/capacity.md) has no sessions of its own: its answer and the
    level runs to score instead."""
    levels = [
        {"sessions": p["sessions"], "run_id": p["run_id"], "passed": p["passed"]}
        for p in search["points"]
    ]
    if as_json:
        body = {"capacity": search["capacity"], "levels": levels}
        print(json.dumps({"run_id": run_id, "capacity_search": body}))
        return
    found = search["capacity"]
    answer = "no level of it ran" if found is None else f"{found} sessions at once meet its SLO"
    lines = [f"run {run_id} is a capacity search: {answer}; its levels are runs of their own:"]
    lines += [
        f"  streameval score {level['run_id']}  ({level['sessions']} sessions, "
        f"{'meets' if level['passed'] else 'breaks'} the SLO)"
        for level in levels
    ]
    Console().print("\n".join(lines), highlight=False)


def _print_glossary(as_json: bool) -> None:
    from streameval.scorer.report import explanations_json, glossary_metrics, render_explanations

    if as_json:
        print(json.dumps(explanations_json(glossary_metrics())))
    else:
        render_explanations(Console(), glossary_metrics())


@app.command()
def compare(
    run_a: Annotated[str, typer.Argument(help="The baseline run (A).")],
    run_b: Annotated[str, typer.Argument(help="The run compared with it (B).")],
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help=f"Scoring profile: {', '.join(SCORING_PROFILES)} (default: the one matching "
            f"the baseline run's protocol profile, {_MATCHING}).",
        ),
    ] = None,
    as_json: JsonOption = False,
    explained: ExplainOption = False,
    tolerance: ToleranceOption = None,
    judge_url: JudgeUrlOption = None,
    judge_model: JudgeModelOption = None,
    store: StoreOption = None,
) -> None:
    """Compare two runs record by record: B - A with paired bootstrap intervals."""
    from streameval.core.store.store import Store
    from streameval.scorer.compare import compare_runs
    from streameval.scorer.report import explanations_json

    try:
        judge = _judge(judge_url, judge_model)
        with Store(resolve_store_url(store, must_exist=True), read_only=True) as opened:
            chosen = _run_profile(opened, run_a, profile, tolerance)
            comparison = compare_runs(opened, run_a, run_b, chosen, judge)
    except UserError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        body = comparison.model_dump(mode="json")
        if explained:
            body["explain"] = explanations_json({f: list(m) for f, m in comparison.overall.items()})
        print(json.dumps(body))
    else:
        comparison.render(Console(), explained)


@app.command()
def table(
    runs: Annotated[
        list[str],
        typer.Argument(help="The runs (or suites: their runs), in the order of the rows."),
    ],
    metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--metrics",
            help="The columns: metrics named family.metric (or a name one family alone "
            "reports), comma-separated or repeated (default: each family's headline metric).",
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option("--by", help="task_type or source_benchmark: one block of rows per group."),
    ] = None,
    intervals: Annotated[
        bool,
        typer.Option(
            "--intervals", help="Add each value's 95% bootstrap interval (clustered by video)."
        ),
    ] = False,
    fmt: Annotated[
        str, typer.Option("--format", help="markdown, latex, csv or json.")
    ] = "markdown",
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help=f"Scoring profile: {', '.join(SCORING_PROFILES)} (default: the one matching "
            f"the first run's protocol profile, {_MATCHING}).",
        ),
    ] = None,
    tolerance: ToleranceOption = None,
    judge_url: JudgeUrlOption = None,
    judge_model: JudgeModelOption = None,
    store: StoreOption = None,
) -> None:
    """A table of runs for a paper: runs as rows, metrics as columns, the best of each
    column marked."""
    from streameval.core.store.store import Store
    from streameval.scorer.paper_table import FORMATS, paper_table, render_table, table_run_ids

    if fmt not in FORMATS:
        raise _fail(f"--format takes {', '.join(FORMATS)}, not {fmt!r}")
    names = None if metrics is None else [m for item in metrics for m in _listed(item)]
    try:
        judge = _judge(judge_url, judge_model)
        with Store(resolve_store_url(store, must_exist=True), read_only=True) as opened:
            run_ids = table_run_ids(opened, runs)
            chosen = _run_profile(opened, run_ids[0], profile, tolerance)
            made = paper_table(
                opened,
                run_ids,
                metrics=names,
                by=by,
                intervals=intervals,
                scoring_profile=chosen,
                judge=judge,
            )
    except UserError as exc:
        raise _fail(str(exc)) from None
    sys.stdout.write(render_table(made, fmt))


def _listed(item: str) -> list[str]:
    return [name.strip() for name in item.split(",") if name.strip()]


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="The stored run to report.")],
    html: Annotated[
        Path, typer.Option("--html", help="Write the report to this HTML file.", dir_okay=False)
    ],
    profile: ProfileOption = None,
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
    from streameval.core.store.store import Store
    from streameval.scorer.service.html_report import write_report

    try:
        judge = _judge(judge_url, judge_model)
        with Store(resolve_store_url(store, must_exist=True), read_only=True) as opened:
            chosen = _run_profile(opened, run_id, profile, tolerance)
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
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            envvar="STREAMEVAL_ALLOWED_HOSTS",
            help="Also answer requests for this Host name (repeatable; `*`: any). Bound to "
            "loopback it answers localhost, 127.0.0.1 and ::1 alone; bound elsewhere also any "
            "IP address and this machine's names (docs/security.md).",
        ),
    ] = None,
) -> None:
    """Serve the read-only results API (JSON, OpenAPI docs at /docs and /redoc) and the
    dashboard (/)."""
    from streameval.listening import serve_app
    from streameval.scorer.service.api import create_app
    from streameval.web_security import AllowedHosts, split_host_list

    allowed = AllowedHosts.for_bind(host, split_host_list(allowed_host or []))
    try:
        url = resolve_store_url(store, must_exist=True)
        app = create_app(url, _judge(judge_url, judge_model), allowed)
        serve_app(app, host, port, "results API")
    except UserError as exc:  # a store that cannot be opened, a busy port
        raise _fail(str(exc)) from None
