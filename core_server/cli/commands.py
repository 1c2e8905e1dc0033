"""The Core's commands of the `streameval` command line: run, resume, runs, export, the
control API, adapters and benchmark data.

The one `streameval` command (streameval/cli.py) adds the scorer's commands and the demo,
which runs and then scores; the Core itself never imports the scorer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streameval.core.cli.adapter import adapter_app
from streameval.core.cli.audit import audit_app
from streameval.core.cli.capacity import capacity
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
from streameval.core.cli.data import data_app
from streameval.core.cli.launch import launch_app
from streameval.core.cli.runs import runs_app
from streameval.core.run.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    EXIT_TERMINATED,
)
from streameval.core.run.timeouts import ALL_DOWN_GIVE_UP_S, DEFAULT_LEASE_S
from streameval.core.store.locations import resolve_store_url
from streameval.core.streams.perturb_spec import NAMES as PERTURBATION_NAMES
from streameval.core.streams.perturb_spec import PRESET_HELP, PerturbationError, run_variants
from streameval.errors import UserError

# The runtime (store, runner, video and HTTP stacks) is imported by the commands that use
# it: `streameval --help` builds the command tree without it (streameval/cli.py).
if TYPE_CHECKING:
    from streameval.core.config import EndpointConfig, RunConfig
    from streameval.core.run.run_end import RunSummary
    from streameval.core.run.worker import WorkerSummary
    from streameval.core.store.store import Store
    from streameval.progress import Progress

app = typer.Typer(help="The Core's commands.", pretty_exceptions_enable=False)
app.add_typer(adapter_app, name="adapter")
app.add_typer(data_app, name="data", help="Validate, describe and sample benchmark files.")
app.add_typer(launch_app, name="launch")
app.add_typer(audit_app, name="audit")
app.command("capacity")(capacity)


# The longest lease or unreachable timeout `run` takes: a day (more overflows a timestamp).
MAX_TIMEOUT_S = 86400.0


def execute(
    config: RunConfig,
    store: Store,
    resume_id: str | None = None,
    show_progress: bool = True,
    *,
    retry_failed: bool = False,
    allow_adapter_change: bool = False,
    lease_s: float = DEFAULT_LEASE_S,
    give_up_s: float = ALL_DOWN_GIVE_UP_S,
    progress: Progress | None = None,
) -> RunSummary:
    """Run (or resume), showing its phases on stderr: live bars when stderr is a terminal
    and `show_progress`, plain lines when it is not (core_server/cli/progress_display.py).
    `progress` replaces that display (the demo's, which goes on to show scoring).

    SIGTERM (`docker stop`) stops the run like Ctrl-C: the sessions in flight go back to
    the queue, the run is `interrupted` (resumable at once: its lease is released) and the
    command exits 143."""
    from streameval.core.cli.progress_display import progress_display
    from streameval.core.run.errors import RunStopped, RunTakenOver
    from streameval.core.run.runner import RunExecutor

    started: list[str] = []
    terminated: list[bool] = []

    async def go(shown: Progress) -> RunSummary:
        cancel_on_sigterm(terminated)
        executor = RunExecutor(config, store, shown, lease_s=lease_s, give_up_s=give_up_s)
        run_id = resume_id or await executor.prepare()
        started.append(run_id)
        return await executor.execute(
            run_id, retry_failed=retry_failed, allow_adapter_change=allow_adapter_change
        )

    if progress is None:
        display = progress_display(console, show_progress)
    else:
        display = contextlib.nullcontext(progress)
    try:
        # The display ends before any line below is printed: none is drawn over by a bar.
        with display as shown:
            return asyncio.run(go(shown))
    except (RunStopped, RunTakenOver) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(EXIT_STOPPED) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Finished sessions are already stored; the run is marked interrupted.
        resume = f": resume it with `streameval run --resume {started[0]}`" if started else ""
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        console.print(f"{what}{resume}", highlight=False)
        raise typer.Exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED) from None


# --------------------------------------------------------------------------- run


@app.command()
def run(
    ctx: typer.Context,
    adapter_url: Annotated[
        list[str] | None,
        typer.Option("--adapter-url", help="Adapter endpoint ws://host:port/ws (repeatable)."),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Sessions in flight per endpoint.")] = 4,
    benchmark: BenchmarkOption = "synthetic",
    video_root: VideoRootOption = None,
    subset: SubsetOption = None,
    seed: SeedOption = 0,
    task: TaskOption = None,
    task_type: TaskTypeOption = None,
    limit: Annotated[int | None, typer.Option(help="At most this many records.")] = None,
    profile: Annotated[str, typer.Option(help=PROFILE_HELP)] = "trace",
    pacing: Annotated[str, typer.Option(help="logical or wall_clock.")] = "logical",
    speed: Annotated[float, typer.Option(help="Wall-clock speed factor.")] = 1.0,
    fps: Annotated[float | None, typer.Option(help="Sampling rate (profile's by default).")] = None,
    max_width: Annotated[int, typer.Option(help="Frame width cap.")] = 960,
    qa_history: Annotated[
        float | None, typer.Option("--qa-history", help="Seconds before the anchor; 0 = all.")
    ] = None,
    response_timeout: Annotated[float, typer.Option(help="Seconds per answer/step.")] = 60.0,
    adapter_ready_timeout: Annotated[
        float | None,
        typer.Option(
            "--adapter-ready-timeout",
            help="Seconds to wait for an adapter that is still loading its model (its "
            "/healthz answers 503 loading) before sessions start [default: 600].",
        ),
    ] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="Frame and benchmark cache.")] = None,
    verify_video_digests: Annotated[
        bool,
        typer.Option(
            "--verify-video-digests",
            help="Hash every video in full to find its cached frames, instead of trusting "
            "the digest remembered for the file's size, times and inode.",
        ),
    ] = False,
    store: StoreOption = None,
    resume: Annotated[
        str | None, typer.Option("--resume", help="Continue an interrupted run by its id.")
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="With --resume: also redo the sessions that failed for infrastructure "
            "reasons (unreachable, crashed or timed-out adapter), as new attempts.",
        ),
    ] = False,
    allow_adapter_change: Annotated[
        bool,
        typer.Option(
            "--allow-adapter-change",
            help="With --resume: accept endpoints serving another adapter, version or model "
            "than the run used; the run then lists every adapter it used.",
        ),
    ] = False,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            help="Only create the run (its sessions wait in the store) and print its id; "
            "`streameval worker` processes run it (docs/scale.md).",
        ),
    ] = False,
    lease_timeout: Annotated[
        float,
        typer.Option(
            "--lease-timeout",
            help="Seconds before another Core may take over this run if this one dies "
            "(it renews its lease every third of that).",
        ),
    ] = DEFAULT_LEASE_S,
    unreachable_timeout: Annotated[
        float,
        typer.Option(
            "--unreachable-timeout",
            help="Seconds every adapter endpoint may stay out of rotation (unreachable) "
            "before the run stops as interrupted instead of failing its sessions.",
        ),
    ] = ALL_DOWN_GIVE_UP_S,
    perturb: Annotated[
        list[str] | None,
        typer.Option(
            "--perturb",
            metavar="NAME[:KEY=VALUE,...]",
            help="Also stream every record under this perturbation (repeatable; "
            f"docs/robustness.md): {', '.join(PERTURBATION_NAMES)}.",
        ),
    ] = None,
    robustness: Annotated[
        str | None,
        typer.Option(
            "--robustness",
            help=f"Also stream every record under a preset list of perturbations: {PRESET_HELP}.",
        ),
    ] = None,
    perturb_seed: Annotated[
        int, typer.Option("--perturb-seed", help="Seed of the perturbations' random draws.")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run a benchmark against adapter endpoints (or --resume an interrupted run).

    Exit status (a resume's counts the sessions kept from before too): 0 every session
    finished; 1 some sessions failed; 2 the run could not start (bad options, unreachable
    or changed adapter, changed benchmark, a run another live Core owns); 3 every session
    failed (the run's status is then `failed`); 4 the run stopped part-way (every adapter
    endpoint gone: resume it; the store failed); 130 interrupted, 143 terminated by
    SIGTERM (continue it with --resume).
    """
    for name, value in (
        ("--lease-timeout", lease_timeout),
        ("--unreachable-timeout", unreachable_timeout),
    ):
        if not 0 < value <= MAX_TIMEOUT_S:  # NaN fails this too
            raise fail(f"{name} must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds")
    if not resume and (retry_failed or allow_adapter_change):
        flag = "--retry-failed" if retry_failed else "--allow-adapter-change"
        raise fail(f"{flag} only applies to a resumed run: add --resume RUN_ID")
    if detach and resume:
        raise fail("--detach creates a new run: workers continue a stored one by itself")
    if resume and (perturb or robustness):
        raise fail("--perturb/--robustness apply to a new run: a resumed run keeps its own")
    if not resume:
        check_protocol_profile(ctx, profile)
    try:
        run_variants(perturb or [], robustness)  # a spec error is one line, before anything
    except PerturbationError as exc:
        raise fail(str(exc)) from None
    from streameval.core.config import EndpointConfig, RunConfig
    from streameval.core.run.runner import stored_config
    from streameval.core.store.store import Store

    try:
        with Store(resolve_store_url(store, cache_dir)) as opened:
            if resume:
                stored = stored_config(opened, resume)
                if adapter_url:
                    endpoints = [
                        EndpointConfig(url=u, concurrency=concurrency) for u in adapter_url
                    ]
                    stored = stored.model_copy(update={"endpoints": endpoints})
                if adapter_ready_timeout is not None:
                    update = {"adapter_ready_timeout_s": adapter_ready_timeout}
                    stored = stored.model_copy(update=update)
                if verify_video_digests:
                    stored = stored.model_copy(update={"verify_video_digests": True})
                config = stored
            else:
                if not adapter_url and not detach:
                    raise fail("give at least one --adapter-url (or use `streameval demo`)")
                config = RunConfig(
                    benchmark=benchmark,
                    benchmark_seed=seed,
                    video_root=str(video_root) if video_root else None,
                    subset=subset,
                    tasks=task or ["qa", "proactive"],
                    task_types=task_type or [],
                    limit=limit,
                    endpoints=[
                        EndpointConfig(url=u, concurrency=concurrency) for u in adapter_url or []
                    ],
                    profile=profile,
                    pacing=pacing,
                    speed=speed,
                    fps=fps,
                    max_width=max_width,
                    qa_history_s=qa_history,
                    response_timeout_s=response_timeout,
                    verify_video_digests=verify_video_digests,
                    perturbations=perturb or [],
                    robustness=robustness,
                    perturb_seed=perturb_seed,
                    **({"cache_dir": str(cache_dir)} if cache_dir else {}),
                    **(
                        {"adapter_ready_timeout_s": adapter_ready_timeout}
                        if adapter_ready_timeout is not None
                        else {}
                    ),
                )
            if detach:
                _create_detached(config, opened, as_json)
                return
            summary = execute(
                config,
                opened,
                resume_id=resume,
                show_progress=not as_json,
                retry_failed=retry_failed,
                allow_adapter_change=allow_adapter_change,
                lease_s=lease_timeout,
                give_up_s=unreachable_timeout,
            )
            _print_summary(summary, opened, as_json)
    except UserError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:  # pydantic validation of the options
        raise fail(first_validation_error(exc)) from None
    if summary.exit_code:
        raise typer.Exit(summary.exit_code)


def _create_detached(config: RunConfig, store: Store, as_json: bool) -> None:
    from streameval.core.run.runner import RunExecutor

    run_id = asyncio.run(RunExecutor(config, store).prepare())
    sessions = len(store.sessions(run_id))
    if as_json:
        print(json.dumps({"run_id": run_id, "store": store.url, "sessions": sessions}))
        return
    print(run_id, flush=True)
    console.print(
        f"run {run_id}: {sessions} sessions wait for workers: streameval worker --store "
        f"{store.url} --run {run_id} --adapter-url ws://127.0.0.1:PORT/ws",
        highlight=False,
    )


def _print_summary(summary: RunSummary, store: Store, as_json: bool) -> None:
    body = {
        "run_id": summary.run_id,
        "store": store.url,
        "sessions": summary.total,
        "finished": summary.finished,
        "failed": summary.failed,
        "kept": summary.kept,
        "retried": summary.retried,
        "status": summary.status,
        "failed_total": summary.failed_total,
    }
    if as_json:
        print(json.dumps(body), flush=True)
        return
    retried = f", {summary.retried} failed ones retried" if summary.retried else ""
    # The store URL on a line of its own: a narrow terminal wraps the counts, not the URL.
    console.print(
        f"run [bold]{summary.run_id}[/bold]: {summary.finished} finished, {summary.failed} "
        f"failed, {summary.kept} kept from before{retried}\nstore {store.url}",
        highlight=False,
    )
    if summary.status == "failed":
        console.print(f"[red]run {summary.run_id} failed: every session failed[/red]")
    elif summary.failed_total:
        console.print(
            f"[yellow]{summary.failed_total} of {summary.total} sessions of run "
            f"{summary.run_id} failed[/yellow]",
            highlight=False,
        )


# --------------------------------------------------------------------------- worker


@app.command()
def worker(
    adapter_url: Annotated[
        str,
        typer.Option(
            "--adapter-url",
            help="This worker's adapter, usually beside it: ws://127.0.0.1:PORT/ws.",
        ),
    ],
    store: StoreOption = None,
    run_id: Annotated[
        str | None, typer.Option("--run", help="Work on this run only (default: any run).")
    ] = None,
    concurrency: Annotated[
        int, typer.Option(help="Sessions in flight (1 keeps wall-clock timings faithful).")
    ] = 1,
    max_sessions: Annotated[
        int | None, typer.Option(help="Stop after claiming this many sessions.")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="When no session is left, wait for new runs.")
    ] = False,
    lease_timeout: Annotated[
        float,
        typer.Option(help="Seconds before a dead worker's session may be run again elsewhere."),
    ] = DEFAULT_LEASE_S,
    video_root: Annotated[
        Path | None, typer.Option(help="Where the benchmark's videos are on this machine.")
    ] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="This machine's frame cache.")] = None,
    allow_adapter_change: Annotated[
        bool,
        typer.Option(help="Accept an adapter identity the run has not used yet (recorded)."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Claim sessions of stored runs and run them against one adapter (docs/scale.md).

    Exit status: 0 no session is left (or --max-sessions were claimed); 2 the worker could
    not start (store, adapter, or an adapter the run did not use); 130 interrupted (the
    sessions it held go back to the queue).
    """
    from streameval.core.config import EndpointConfig
    from streameval.core.store.store import Store

    try:
        endpoint = EndpointConfig(url=adapter_url, concurrency=concurrency)
        if lease_timeout <= 0:
            raise fail(f"--lease-timeout must be positive, got {lease_timeout:g}")
        with Store(resolve_store_url(store, cache_dir)) as opened:
            summary = _work(
                opened, endpoint, run_id, max_sessions, follow, lease_timeout,
                cache_dir, video_root, allow_adapter_change,
            )  # fmt: skip
    except UserError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:
        raise fail(first_validation_error(exc)) from None
    except asyncio.CancelledError:  # SIGTERM: the held sessions went back to the queue
        raise typer.Exit(EXIT_INTERRUPTED) from None
    body = {
        "worker_id": summary.worker_id,
        "host": summary.host,
        "claimed": summary.claimed,
        "finished": summary.finished,
        "failed": summary.failed,
        "lost": summary.lost,
        "runs": sorted(summary.runs),
    }
    if as_json:
        print(json.dumps(body), flush=True)
    else:
        console.print(
            f"worker {summary.worker_id}: {summary.claimed} sessions claimed, "
            f"{summary.finished} finished, {summary.failed} failed, {summary.lost} lost",
            highlight=False,
        )


def _work(
    store: Store,
    endpoint: EndpointConfig,
    run_id: str | None,
    max_sessions: int | None,
    follow: bool,
    lease_s: float,
    cache_dir: Path | None,
    video_root: Path | None,
    allow_adapter_change: bool,
) -> WorkerSummary:
    from streameval.core.run.runner import RunExecutor, stored_run_executor
    from streameval.core.run.worker import Worker, this_worker

    identity = this_worker()
    executors: dict[str, RunExecutor] = {}

    async def executor_for(run: str) -> RunExecutor:
        if run not in executors:
            executors[run] = await stored_run_executor(
                store, run, endpoint, cache_dir=cache_dir, video_root=video_root,
                identity=identity, lease_s=lease_s, allow_adapter_change=allow_adapter_change,
            )  # fmt: skip
        return executors[run]

    async def go() -> WorkerSummary:
        main = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
        if run_id is not None:
            await executor_for(run_id)  # a refused adapter stops here, before any claim
        worker = Worker(store, [endpoint], executor_for, identity=identity, lease_s=lease_s)
        return await worker.run(run_id, max_sessions=max_sessions, follow=follow)

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


# --------------------------------------------------------------------------- store views

app.add_typer(runs_app, name="runs")  # core_server/cli/runs.py


@app.command()
def export(
    run_id: str,
    format: Annotated[str, typer.Option("--format", help="Only jsonl.")] = "jsonl",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="File; - = stdout.")] = None,
    store: StoreOption = None,
) -> None:
    """Write a run's complete event log (schema in docs/events.md)."""
    from streameval.core.store.export import export_jsonl
    from streameval.core.store.store import Store, StoreError

    if format != "jsonl":
        raise fail(f"unknown export format {format!r}; only jsonl")
    try:
        with Store(resolve_store_url(store, must_exist=True), read_only=True) as opened:
            if output is None or str(output) == "-":
                lines = export_jsonl(opened, run_id, sys.stdout)
            else:
                with output.open("w") as handle:
                    lines = export_jsonl(opened, run_id, handle)
    except StoreError as exc:
        raise fail(str(exc)) from None
    console.print(f"exported {lines} lines", highlight=False)


# --------------------------------------------------------------------------- services


@app.command("core-api")
def core_api(
    host: Annotated[str, typer.Option(help="Bind address (loopback by default).")] = "127.0.0.1",
    port: int = 8700,
    store: StoreOption = None,
) -> None:
    """Serve the control API (start runs, run status, adapter registry) behind a bearer token."""
    from streameval.core.launch.control_api import create_app, resolve_token
    from streameval.listening import serve_app

    try:
        token, generated = resolve_token()
        served = create_app(resolve_store_url(store), token)
        if generated:
            console.print(f"control API token (set STREAMEVAL_API_TOKEN to choose one): {token}")
        serve_app(served, host, port, "control API")
    except UserError as exc:  # a guessable token, a store that cannot be opened, a busy port
        raise fail(str(exc)) from None
