"""The Core's commands of the `streameval` command line: worker, export and the control
API here; run (and resume), runs, capacity, audit, adapters, launch and benchmark data from
their own modules.

The one `streameval` command (streameval/cli.py) adds the scorer's commands and the demo,
which runs and then scores; the Core itself never imports the scorer.
"""

from __future__ import annotations

import asyncio
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
    JsonOption,
    StoreOption,
    console,
    fail,
    first_validation_error,
)
from streameval.core.cli.data import data_app
from streameval.core.cli.launch import launch_app
from streameval.core.cli.run_command import run
from streameval.core.cli.runs import runs_app
from streameval.core.run.exit_codes import EXIT_INTERRUPTED
from streameval.core.run.timeouts import DEFAULT_LEASE_S
from streameval.core.store.locations import resolve_store_url
from streameval.errors import UserError

# The runtime (store, runner, video and HTTP stacks) is imported by the commands that use
# it: `streameval --help` builds the command tree without it (streameval/cli.py).
if TYPE_CHECKING:
    from streameval.core.config import EndpointConfig
    from streameval.core.run.worker import WorkerSummary
    from streameval.core.store.store import Store

app = typer.Typer(help="The Core's commands.", pretty_exceptions_enable=False)
app.add_typer(adapter_app, name="adapter")
app.add_typer(data_app, name="data", help="Validate, describe and sample benchmark files.")
app.add_typer(launch_app, name="launch")
app.add_typer(audit_app, name="audit")
app.command("capacity")(capacity)
app.command()(run)  # core_server/cli/run_command.py


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
    as_json: JsonOption = False,
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
