"""The Core's commands of the `streameval` command line: export and the control API here;
run (and resume), worker, runs, capacity, audit, adapters, launch and benchmark data from
their own modules.

The one `streameval` command (streameval/cli.py) adds the scorer's commands and the demo,
which runs and then scores; the Core itself never imports the scorer.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from streameval.core.cli.adapter import adapter_app
from streameval.core.cli.audit import audit_app
from streameval.core.cli.capacity import capacity
from streameval.core.cli.common import StoreOption, console, fail
from streameval.core.cli.data import data_app
from streameval.core.cli.launch import launch_app
from streameval.core.cli.plan import plan
from streameval.core.cli.run_command import run
from streameval.core.cli.runs import runs_app
from streameval.core.cli.worker_command import worker
from streameval.core.store.locations import resolve_store_url
from streameval.errors import UserError

# The runtime (store, video and HTTP stacks) is imported by the commands that use it:
# `streameval --help` builds the command tree without it (streameval/cli.py).
app = typer.Typer(help="The Core's commands.", pretty_exceptions_enable=False)
app.add_typer(adapter_app, name="adapter")
app.add_typer(data_app, name="data", help="Validate, describe and sample benchmark files.")
app.add_typer(launch_app, name="launch")
app.add_typer(audit_app, name="audit")
app.command("capacity")(capacity)
app.command("plan")(plan)  # core_server/cli/plan.py
app.command()(run)  # core_server/cli/run_command.py
app.command()(worker)  # core_server/cli/worker_command.py


# --------------------------------------------------------------------------- store views

app.add_typer(runs_app, name="runs")  # core_server/cli/runs.py


@app.command()
def export(
    run_id: str,
    format: Annotated[str, typer.Option("--format", help="Only jsonl.")] = "jsonl",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="File; - = stdout.")] = None,
    store: StoreOption = None,
) -> None:
    """Write a run's complete event log (schema in docs/events.md), its end line last; a
    file appears at its name only once whole."""
    from streameval.core.store.export import export_jsonl
    from streameval.core.store.export_file import export_to_file
    from streameval.core.store.store import Store, StoreError

    if format != "jsonl":
        raise fail(f"unknown export format {format!r}; only jsonl")
    to_stdout = output is None or str(output) == "-"
    try:
        with Store(resolve_store_url(store, must_exist=True), read_only=True) as opened:
            if to_stdout:
                lines = export_jsonl(opened, run_id, sys.stdout)
            else:
                assert output is not None
                lines = export_to_file(opened, run_id, output)
    except StoreError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(
            f"cannot write {'stdout' if to_stdout else output}: {exc.strerror or exc}"
        ) from None
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
