"""`streameval capacity`: concurrent live streams one endpoint holds at a latency target
(docs/capacity.md; the search is core_server/analyses/capacity_search.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from streameval.core.cli.common import (
    PROFILE_HELP,
    BenchmarkOption,
    SeedOption,
    StoreOption,
    SubsetOption,
    TaskOption,
    TaskTypeOption,
    VideoRootOption,
    cancel_on_sigterm,
    check_protocol_profile,
    console,
    fail,
    first_validation_error,
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
    adapter_url: Annotated[
        str, typer.Option("--adapter-url", help="The one adapter endpoint, ws://host:port/ws.")
    ],
    slo: Annotated[
        str,
        typer.Option(
            "--slo",
            help="Latency target, TERM=VALUE,...: ttft_p50, ttft_p95, latency_p95, lag_p99 "
            "(seconds, at most), drop_rate, failed_rate (at most; failed_rate=0 unless "
            "given), qa_accuracy, in_window_accuracy (at least).",
        ),
    ],
    benchmark: BenchmarkOption = "synthetic",
    video_root: VideoRootOption = None,
    subset: SubsetOption = None,
    seed: SeedOption = 0,
    task: TaskOption = None,
    task_type: TaskTypeOption = None,
    limit: Annotated[
        int | None, typer.Option(help="Use at most this many records (repeated per level).")
    ] = None,
    profile: Annotated[
        str, typer.Option(help=f"{PROFILE_HELP.removesuffix('.')}; one that allows wall-clock.")
    ] = "trace",
    speed: Annotated[float, typer.Option(help="Wall-clock speed factor.")] = 1.0,
    start: Annotated[int, typer.Option(min=1, help="The first level (sessions at once).")] = 1,
    most: Annotated[int, typer.Option("--max", min=1, help="The largest level tried.")] = 256,
    sessions_per_level: Annotated[
        int | None,
        typer.Option(
            "--sessions-per-level",
            min=1,
            help="Sessions each level runs, N at once (at least N) [default: N].",
        ),
    ] = None,
    server_metrics: Annotated[
        str | None,
        typer.Option(
            "--server-metrics",
            help="The model server's Prometheus endpoint (vLLM: http://HOST:PORT/metrics), "
            "read before, during and after each level [default: the one the adapter's /info "
            "names, e.g. the openai adapter's server].",
        ),
    ] = None,
    response_timeout: Annotated[float, typer.Option(help="Seconds per answer/step.")] = 60.0,
    cache_dir: Annotated[Path | None, typer.Option(help="Frame and benchmark cache.")] = None,
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Concurrent wall-clock sessions one endpoint holds at a latency target.

    Doubles the sessions at once from --start until a level breaks the SLO, then bisects;
    prints the curve and the largest level meeting every term. Each level is a run of its
    own; the search is stored as a run with its curve (`streameval score RUN` names its
    levels). Exit status: 0 searched; 2 could not start; 4 stopped part-way; 130 interrupted,
    143 terminated by SIGTERM (the curve so far stays stored).
    """
    from streameval.core.analyses.capacity_search import (
        CapacitySearch,
        SearchSettings,
        parse_slo,
    )
    from streameval.core.config import EndpointConfig, RunConfig
    from streameval.core.store.store import Store

    if start > most:
        raise fail(f"--start {start} is above --max {most}")
    check_protocol_profile(ctx, profile)
    if server_metrics is not None and not server_metrics.startswith(("http://", "https://")):
        raise fail(f"--server-metrics must be an http:// or https:// URL, got {server_metrics!r}")
    try:
        terms = parse_slo(slo)
        # Validated as a run's configuration: the same one-line errors as `run`.
        endpoint = EndpointConfig(url=adapter_url)
        base = RunConfig(
            benchmark=benchmark,
            benchmark_seed=seed,
            video_root=str(video_root) if video_root else None,
            subset=subset,
            tasks=task or ["qa", "proactive"],
            task_types=task_type or [],
            limit=limit,
            endpoints=[endpoint],
            profile=profile,
            pacing="wall_clock",
            speed=speed,
            response_timeout_s=response_timeout,
            **({"cache_dir": str(cache_dir)} if cache_dir else {}),
        )
    except UserError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:  # pydantic validation of the options
        raise fail(first_validation_error(exc)) from None
    settings = SearchSettings(
        adapter_url=endpoint.url,
        slo=terms,
        base=base,
        start=start,
        most=most,
        sessions_per_level=sessions_per_level,
        server_metrics=server_metrics,
    )
    store_url = resolve_store_url(store, cache_dir)
    try:
        with Store(store_url) as opened:
            search = CapacitySearch(
                settings, opened, store_url, notice=None if as_json else _notice
            )
            terminated: list[bool] = []
            try:
                result = asyncio.run(_until_stopped(search, terminated))
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
    except UserError as exc:  # the store
        raise fail(str(exc)) from None
    if as_json:
        print(json.dumps({"run_id": search.run_id, "store": opened.url, **result.model_dump()}))
        return
    _print_result(search.run_id, opened.url, result)


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
