"""`streameval capacity`: concurrent live streams one endpoint holds at a latency target
(docs/capacity.md; the search is core_server/analyses/capacity_search.py, the command's
options core_server/cli/capacity_options.py): run the search, report its curve."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from streameval.core.cli.capacity_options import (
    AdapterUrlOption,
    CapacityOptions,
    LevelLimitOption,
    MostOption,
    ServerMetricsOption,
    SessionsPerLevelOption,
    SloOption,
    StartOption,
    WallClockProfileOption,
)
from streameval.core.cli.common import (
    BenchmarkOption,
    JsonOption,
    RecordChoice,
    SeedOption,
    StoreOption,
    SubsetOption,
    TaskOption,
    TaskTypeOption,
    VideoRootOption,
    cancel_on_sigterm,
    console,
    fail,
)
from streameval.core.cli.run_options import (
    CacheDirOption,
    ResponseTimeoutOption,
    SpeedOption,
)
from streameval.core.run.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    EXIT_TERMINATED,
)
from streameval.core.store.locations import resolve_store_url
from streameval.errors import UserError
from streameval.terminal import Column, print_table

if TYPE_CHECKING:
    from streameval.core.analyses.capacity_search import CapacityResult, CapacitySearch, CurvePoint


def capacity(
    ctx: typer.Context,
    adapter_url: AdapterUrlOption,
    slo: SloOption,
    benchmark: BenchmarkOption = "synthetic",
    video_root: VideoRootOption = None,
    subset: SubsetOption = None,
    seed: SeedOption = 0,
    task: TaskOption = None,
    task_type: TaskTypeOption = None,
    limit: LevelLimitOption = None,
    profile: WallClockProfileOption = "trace",
    speed: SpeedOption = 1.0,
    start: StartOption = 1,
    most: MostOption = 256,
    sessions_per_level: SessionsPerLevelOption = None,
    server_metrics: ServerMetricsOption = None,
    response_timeout: ResponseTimeoutOption = 60.0,
    cache_dir: CacheDirOption = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Concurrent wall-clock sessions one endpoint holds at a latency target.

    Doubles the sessions at once from --start until a level breaks the SLO, then bisects;
    prints the curve and the largest level meeting every term. Each level is a run of its
    own; the search is stored as a run with its curve (`streameval score RUN` names its
    levels). Exit status: 0 searched; 2 could not start; 4 stopped part-way; 130 interrupted,
    143 terminated by SIGTERM (the curve so far stays stored).
    """
    records = RecordChoice(benchmark, video_root, subset, seed, task, task_type, limit)
    options = CapacityOptions(
        adapter_url=adapter_url,
        slo=slo,
        records=records,
        profile=profile,
        speed=speed,
        start=start,
        most=most,
        sessions_per_level=sessions_per_level,
        server_metrics=server_metrics,
        response_timeout=response_timeout,
        cache_dir=cache_dir,
        store=store,
        as_json=as_json,
    )
    search_capacity(ctx, options)


def search_capacity(ctx: typer.Context, options: CapacityOptions) -> None:
    """`streameval capacity` with these options: check them, search in a store, report."""
    from streameval.core.analyses.capacity_search import CapacitySearch
    from streameval.core.store.store import Store

    options.check(ctx)
    settings = options.settings()
    store_url = resolve_store_url(options.store, options.cache_dir)
    try:
        with Store(store_url) as opened:
            notice = None if options.as_json else _notice
            search = CapacitySearch(settings, opened, store_url, notice=notice)
            result = _search(search)
    except UserError as exc:  # the store
        raise fail(str(exc)) from None
    if options.as_json:
        print(json.dumps({"run_id": search.run_id, "store": opened.url, **result.model_dump()}))
        return
    _print_result(search.run_id, opened.url, result)


def _search(search: CapacitySearch) -> CapacityResult:
    """The search's result, or the exit of a search stopped part-way (its curve so far
    stays stored): 130 on Ctrl-C, 143 on SIGTERM, 4 when it failed after a level."""
    terminated: list[bool] = []
    try:
        return asyncio.run(_until_stopped(search, terminated))
    except (KeyboardInterrupt, asyncio.CancelledError):
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        console.print(
            f"capacity search {search.run_id} {what}: its curve so far is stored",
            highlight=False,
        )
        raise typer.Exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED) from None
    except UserError as exc:
        if not search.points:
            raise fail(str(exc)) from None
        stopped = f"capacity search {search.run_id} stopped (its curve so far is stored)"
        raise fail(f"{stopped}: {exc}", EXIT_STOPPED) from None


async def _until_stopped(search: CapacitySearch, terminated: list[bool]) -> CapacityResult:
    """The search, which SIGTERM (`docker stop`) stops like Ctrl-C: the level in flight and
    the search run are marked interrupted."""
    cancel_on_sigterm(terminated)
    return await search.run()


def _notice(line: str) -> None:
    console.print(line, highlight=False)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _row(point: CurvePoint) -> list[str]:
    m = point.metrics
    accuracy = m.qa_accuracy if m.qa_accuracy is not None else m.in_window_accuracy
    return [
        str(point.sessions),
        _seconds(m.ttft_p50_s),
        _seconds(m.ttft_p95_s),
        _seconds(m.lag_p99_s),
        _share(m.drop_rate),
        str(m.failed),
        _share(accuracy),
        "pass" if point.passed else "FAIL",
        point.run_id,
    ]


def _print_result(run_id: str, store_url: str, result: CapacityResult) -> None:
    columns = [
        Column("sessions", key=True, justify="right"),
        Column("ttft p50", justify="right"),
        Column("ttft p95", justify="right"),
        Column("lag p99", justify="right"),
        Column("dropped", justify="right"),
        Column("failed", justify="right"),
        Column("accuracy", justify="right"),
        Column("SLO", key=True),
        Column("run", key=True),
    ]
    out = Console()
    rows = [_row(point) for point in result.points]
    print_table(out, columns, rows, title="levels (times in seconds; accuracy: QA, else in-window)")
    slo = ", ".join(term.text() for term in result.slo)
    if result.limited_by_max:
        verdict = f"at least {result.capacity} sessions at once (--max {result.max} passed)"
    elif result.capacity:
        verdict = f"{result.capacity} sessions at once ({result.first_failing} break it)"
    else:
        verdict = f"none: {result.first_failing} session(s) at once already break it"
    out.print(
        f"capacity at {slo}: {verdict}\ncapacity run {run_id}\nstore {store_url}",
        highlight=False,
    )
