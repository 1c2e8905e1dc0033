"""`streameval run`: run a benchmark against adapter endpoints, or resume a stored run,
and report it (its options: core_server/cli/run_options.py). `execute` runs (or resumes)
under the progress display; the demo (streameval/cli.py) shares it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from streameval.core.cli.common import (
    AllowOutsideVideoRootOption,
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
from streameval.core.cli.run_adapters import (
    AdapterConfigOption,
    AdapterOption,
    AdapterOptionsOption,
    GpusOption,
    ReplicasOption,
    TerminatedWhileStarting,
    adapter_report,
    print_adapter_report,
    started_adapters,
)
from streameval.core.cli.run_options import (
    AdapterReadyTimeoutOption,
    AdapterUrlsOption,
    AllowAdapterChangeOption,
    CacheDirOption,
    ConcurrencyOption,
    DetachOption,
    FpsOption,
    LeaseTimeoutOption,
    LimitOption,
    MaxWidthOption,
    ModalitiesOption,
    PacingOption,
    PerturbOption,
    PerturbSeedOption,
    ProfileOption,
    QaHistoryOption,
    ResponseTimeoutOption,
    ResumeOption,
    RetryFailedOption,
    RobustnessOption,
    RunOptions,
    SpeedOption,
    StartRateOption,
    UnreachableTimeoutOption,
    VerifyVideoDigestsOption,
    option_error,
)
from streameval.core.run.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    EXIT_TERMINATED,
)
from streameval.core.run.timeouts import ALL_DOWN_GIVE_UP_S, DEFAULT_LEASE_S
from streameval.core.store.locations import resolve_store_url
from streameval.errors import UserError

# The runtime (store, runner, video and HTTP stacks) is imported by the functions that use
# it: `streameval --help` builds the command tree without it (streameval/cli.py).
if TYPE_CHECKING:
    from streameval.core.config import RunConfig
    from streameval.core.run.run_end import RunSummary
    from streameval.core.store.store import Store
    from streameval.progress import Progress


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
    start_rate: float | None = None,
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
        executor = RunExecutor(
            config, store, shown, lease_s=lease_s, give_up_s=give_up_s, start_rate=start_rate
        )
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


def run(
    ctx: typer.Context,
    adapter: AdapterOption = None,
    adapter_option: AdapterOptionsOption = None,
    adapter_config: AdapterConfigOption = None,
    replicas: ReplicasOption = None,
    gpus: GpusOption = None,
    adapter_url: AdapterUrlsOption = None,
    concurrency: ConcurrencyOption = 4,
    benchmark: BenchmarkOption = "synthetic",
    video_root: VideoRootOption = None,
    allow_outside_video_root: AllowOutsideVideoRootOption = False,
    subset: SubsetOption = None,
    seed: SeedOption = 0,
    task: TaskOption = None,
    task_type: TaskTypeOption = None,
    limit: LimitOption = None,
    profile: ProfileOption = "trace",
    pacing: PacingOption = "logical",
    speed: SpeedOption = 1.0,
    fps: FpsOption = None,
    max_width: MaxWidthOption = 960,
    modalities: ModalitiesOption = None,
    qa_history: QaHistoryOption = None,
    response_timeout: ResponseTimeoutOption = 60.0,
    adapter_ready_timeout: AdapterReadyTimeoutOption = None,
    cache_dir: CacheDirOption = None,
    verify_video_digests: VerifyVideoDigestsOption = False,
    store: StoreOption = None,
    resume: ResumeOption = None,
    retry_failed: RetryFailedOption = False,
    allow_adapter_change: AllowAdapterChangeOption = False,
    detach: DetachOption = False,
    lease_timeout: LeaseTimeoutOption = DEFAULT_LEASE_S,
    unreachable_timeout: UnreachableTimeoutOption = ALL_DOWN_GIVE_UP_S,
    start_rate: StartRateOption = None,
    perturb: PerturbOption = None,
    robustness: RobustnessOption = None,
    perturb_seed: PerturbSeedOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Run a benchmark against an adapter it starts (--adapter) or adapter endpoints you
    run (--adapter-url), or --resume an interrupted run.

    Exit status (a resume's counts the sessions kept from before too): 0 every session
    finished; 1 some sessions failed; 2 the run could not start (bad options, unreachable
    or changed adapter, changed benchmark, a run another live Core owns); 3 every session
    failed (the run's status is then `failed`); 4 the run stopped part-way (every adapter
    endpoint gone: resume it; the store failed); 130 interrupted, 143 terminated by
    SIGTERM (continue it with --resume).
    """
    records = RecordChoice(
        benchmark, video_root, subset, seed, task, task_type, limit, allow_outside_video_root
    )
    options = RunOptions(
        adapter_url=adapter_url,
        concurrency=concurrency,
        records=records,
        profile=profile,
        pacing=pacing,
        speed=speed,
        fps=fps,
        max_width=max_width,
        modalities=modalities,
        qa_history=qa_history,
        response_timeout=response_timeout,
        adapter_ready_timeout=adapter_ready_timeout,
        cache_dir=cache_dir,
        verify_video_digests=verify_video_digests,
        store=store,
        resume=resume,
        retry_failed=retry_failed,
        allow_adapter_change=allow_adapter_change,
        detach=detach,
        lease_timeout=lease_timeout,
        unreachable_timeout=unreachable_timeout,
        start_rate=start_rate,
        perturb=perturb,
        robustness=robustness,
        perturb_seed=perturb_seed,
        as_json=as_json,
        adapter=adapter,
        adapter_options=adapter_option,
        adapter_config=adapter_config,
        replicas=replicas,
        gpus=gpus,
    )
    run_with(ctx, options)


def run_with(ctx: typer.Context, options: RunOptions) -> None:
    """`streameval run` with these options: check them, open the store, run (or only
    create a detached run), report, and exit with the run's status."""
    options.check(ctx)
    from streameval.core.store.store import Store

    try:
        with Store(resolve_store_url(options.store, options.cache_dir)) as opened:
            config = options.config(opened)
            if options.detach:
                _create_detached(config, opened, options.as_json)
                return
            cache_dir = Path(config.cache_dir)
            with started_adapters(options, options.concurrency, cache_dir) as managed:
                if managed is not None:
                    config = config.model_copy(update={"endpoints": managed.endpoints})
                summary = execute(
                    config,
                    opened,
                    resume_id=options.resume,
                    show_progress=not options.as_json,
                    retry_failed=options.retry_failed,
                    allow_adapter_change=options.allow_adapter_change,
                    lease_s=options.lease_timeout,
                    give_up_s=options.unreachable_timeout,
                    start_rate=options.start_rate,
                )
            _print_summary(summary, opened, options.as_json, adapter_report(managed))
            if not options.as_json:
                print_adapter_report(managed)
    except UserError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:  # pydantic validation of the options
        raise fail(option_error(exc)) from None
    except KeyboardInterrupt:  # Ctrl-C while the adapters started: they are stopped
        console.print("interrupted", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except TerminatedWhileStarting:
        console.print("terminated (SIGTERM)", highlight=False)
        raise typer.Exit(EXIT_TERMINATED) from None
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
        f"{store.url} --run {run_id} --adapter NAME (or --adapter-url ws://127.0.0.1:PORT/ws)",
        highlight=False,
    )


def _print_summary(
    summary: RunSummary, store: Store, as_json: bool, adapters: dict[str, list]
) -> None:
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
        **summary.decode,
        **adapters,
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
