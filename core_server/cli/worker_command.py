"""`streameval worker`: claim sessions of stored runs and run them against one adapter
(docs/scale.md). The command builds WorkerOptions once; `work_with` opens the store and
works until no session is left (or --max-sessions), then the summary is reported.
"""

from __future__ import annotations

import asyncio
import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streameval.core.cli import run_adapters
from streameval.core.cli.common import (
    JsonOption,
    StoreOption,
    console,
    fail,
    first_validation_error,
)
from streameval.core.cli.run_adapters import (
    AdapterChoice,
    AdapterConfigOption,
    AdapterOption,
    AdapterOptionsOption,
    GpusOption,
    ReplicasOption,
)
from streameval.core.run.exit_codes import EXIT_INTERRUPTED
from streameval.core.run.timeouts import DEFAULT_LEASE_S
from streameval.core.store.locations import resolve_store_url
from streameval.errors import UserError

# The runtime (store, runner, video and HTTP stacks) is imported by the functions that use
# it: `streameval --help` builds the command tree without it (streameval/cli.py).
if TYPE_CHECKING:
    from streameval.core.config import EndpointConfig
    from streameval.core.run.worker import WorkerSummary
    from streameval.core.store.store import Store


@dataclass(frozen=True)
class WorkerOptions(AdapterChoice):
    """Every option of one `streameval worker`, as given (None: not given); those of the
    adapter it starts (--adapter ...) come from AdapterChoice."""

    adapter_url: list[str] | None
    store: str | None
    run_id: str | None
    concurrency: int
    max_sessions: int | None
    follow: bool
    lease_timeout: float
    video_root: Path | None
    cache_dir: Path | None
    allow_adapter_change: bool
    as_json: bool
    decode_ahead: int | None = None


def worker(
    adapter: AdapterOption = None,
    adapter_option: AdapterOptionsOption = None,
    adapter_config: AdapterConfigOption = None,
    replicas: ReplicasOption = None,
    gpus: GpusOption = None,
    adapter_url: Annotated[
        list[str] | None,
        typer.Option(
            "--adapter-url",
            help="This worker's adapter, usually beside it: ws://127.0.0.1:PORT/ws; "
            "repeat it for one per GPU of the machine (or --adapter to start them).",
        ),
    ] = None,
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
    decode_ahead: Annotated[
        int | None,
        typer.Option(
            help="Sessions ahead whose videos are decoded while the current ones stream "
            "(default: twice the sessions in flight, at least 16; 0: none).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Claim sessions of stored runs and run them against one adapter, which it starts
    itself (--adapter) or you run (--adapter-url) (docs/scale.md).

    Exit status: 0 no session is left (or --max-sessions were claimed); 2 the worker could
    not start (store, adapter, or an adapter the run did not use); 130 interrupted (the
    sessions it held go back to the queue).
    """
    options = WorkerOptions(
        adapter_url=adapter_url,
        store=store,
        run_id=run_id,
        concurrency=concurrency,
        max_sessions=max_sessions,
        follow=follow,
        lease_timeout=lease_timeout,
        video_root=video_root,
        cache_dir=cache_dir,
        allow_adapter_change=allow_adapter_change,
        as_json=as_json,
        decode_ahead=decode_ahead,
        adapter=adapter,
        adapter_options=adapter_option,
        adapter_config=adapter_config,
        replicas=replicas,
        gpus=gpus,
    )
    work_with(options)


def work_with(options: WorkerOptions) -> None:
    """Work with these options in their store and report, or exit with the one line of what
    stopped the worker from starting (2) or that it was interrupted (130)."""
    from streameval.core.config import EndpointConfig
    from streameval.core.store.store import Store

    options.check_adapter_choice(adapter_url_given=bool(options.adapter_url))
    if not options.adapter_url and options.adapter is None:
        raise fail("give --adapter NAME (the worker starts it) or --adapter-url of one you run")
    try:
        # A bad URL or concurrency is said before the store opens.
        given = [
            EndpointConfig(url=url, concurrency=options.concurrency)
            for url in options.adapter_url or []
        ]
        if options.lease_timeout <= 0:
            raise fail(f"--lease-timeout must be positive, got {options.lease_timeout:g}")
        if options.decode_ahead is not None and options.decode_ahead < 0:
            raise fail(f"--decode-ahead must be 0 or more, got {options.decode_ahead}")
        with (
            Store(resolve_store_url(options.store, options.cache_dir)) as opened,
            run_adapters.started_adapters(
                options, options.concurrency, options.cache_dir
            ) as managed,
        ):
            endpoints = managed.endpoints if managed is not None else given
            summary = _work(opened, endpoints, options)
            _print_summary(summary, options.as_json, run_adapters.adapter_report(managed))
        if not options.as_json:
            run_adapters.print_adapter_report(managed)
    except UserError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:
        raise fail(first_validation_error(exc)) from None
    except (asyncio.CancelledError, KeyboardInterrupt, run_adapters.TerminatedWhileStarting):
        # SIGTERM or Ctrl-C: the held sessions went back to the queue
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _work(store: Store, endpoints: list[EndpointConfig], options: WorkerOptions) -> WorkerSummary:
    from streameval.core.run.decoding_ahead import look_ahead_for
    from streameval.core.run.runner import RunExecutor, stored_run_executor
    from streameval.core.run.worker import Worker, this_worker

    identity = this_worker()
    lease_s = options.lease_timeout
    executors: dict[str, RunExecutor] = {}

    building = asyncio.Lock()  # decoding ahead asks too: the executor is built once

    async def executor_for(run: str) -> RunExecutor:
        async with building:
            if run not in executors:
                executors[run] = await stored_run_executor(
                    store,
                    run,
                    endpoints,
                    cache_dir=options.cache_dir,
                    video_root=options.video_root,
                    identity=identity,
                    lease_s=lease_s,
                    allow_adapter_change=options.allow_adapter_change,
                )
        return executors[run]

    async def go() -> WorkerSummary:
        main = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
        if options.run_id is not None:
            await executor_for(options.run_id)  # a refused adapter stops here, before any claim
        worker = Worker(
            store,
            endpoints,
            executor_for,
            identity=identity,
            lease_s=lease_s,
            look_ahead=look_ahead_for(options.decode_ahead, endpoints),
        )
        return await worker.run(
            options.run_id, max_sessions=options.max_sessions, follow=options.follow
        )

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _print_summary(summary: WorkerSummary, as_json: bool, adapters: dict[str, list]) -> None:
    body = {
        "worker_id": summary.worker_id,
        "host": summary.host,
        "claimed": summary.claimed,
        "finished": summary.finished,
        "failed": summary.failed,
        "lost": summary.lost,
        "runs": sorted(summary.runs),
        **summary.decode_report(),
        **adapters,
    }
    if as_json:
        print(json.dumps(body), flush=True)
    else:
        console.print(
            f"worker {summary.worker_id}: {summary.claimed} sessions claimed, "
            f"{summary.finished} finished, {summary.failed} failed, {summary.lost} lost",
            highlight=False,
        )
