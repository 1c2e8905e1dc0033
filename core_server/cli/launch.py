"""`streameval launch slurm`: submit workers for a stored run as a Slurm job array."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from streameval.core.cli.common import JsonOption
from streameval.core.launch import slurm as launch_slurm
from streameval.core.store.locations import resolve_store_url
from streameval.errors import UserError

launch_app = typer.Typer(help="Spread stored runs over a cluster's workers (docs/scale.md).")


@launch_app.command("slurm")
def slurm(
    run_id: Annotated[
        str | None, typer.Argument(help="The run (`streameval run --detach`); none: any run.")
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="Store URL every node reaches (PostgreSQL).")
    ] = None,
    tasks: Annotated[int, typer.Option("--tasks", "-n", help="Workers: array tasks.")] = 1,
    adapter: Annotated[str, typer.Option(help="Adapter each task serves.")] = "reference",
    adapter_config: Annotated[
        str | None, typer.Option("--adapter-config", help="The adapter's --config.")
    ] = None,
    adapter_option: Annotated[
        list[str] | None,
        typer.Option("-A", "--adapter-option", help="KEY=VALUE for the adapter (repeatable)."),
    ] = None,
    model_cmd: Annotated[
        str | None,
        typer.Option(
            help="Model server each task starts first: 'vllm serve M --port $MODEL_PORT'."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Sessions in flight per worker.")] = 1,
    lease_timeout: Annotated[float | None, typer.Option(help="The workers' lease.")] = None,
    sbatch_arg: Annotated[
        list[str] | None,
        typer.Option("--sbatch-arg", help="More sbatch options: --sbatch-arg=--gres=gpu:1."),
    ] = None,
    template: Annotated[
        Path | None, typer.Option(help="sbatch template (default: deploy/slurm's).")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the array to its end; exit 1 if a task failed.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Submit a Slurm job array of workers, each beside its own adapter (deploy/slurm)."""
    adapter_args = ["--config", adapter_config] if adapter_config else []
    for item in adapter_option or []:
        adapter_args += ["-A", item]
    worker_args = ["--concurrency", str(concurrency)]
    if lease_timeout is not None:
        worker_args += ["--lease-timeout", f"{lease_timeout:g}"]
    try:
        job_id = launch_slurm.submit(
            run_id, resolve_store_url(store), tasks, adapter=adapter, adapter_args=adapter_args,
            worker_args=worker_args, model_cmd=model_cmd, template=template,
            sbatch_args=sbatch_arg or [],
        )  # fmt: skip
        ends = launch_slurm.wait(job_id) if wait else []
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    failed = [end for end in ends if not end.ok]
    if as_json:
        states = [{"task": e.task_id, "state": e.state, "exit_code": e.exit_code} for e in ends]
        print(json.dumps({"job_id": job_id, "tasks": states}))
    else:
        print(job_id)
        for end in failed:
            typer.echo(f"task {end.task_id}: {end.state}, exit status {end.exit_code}", err=True)
    if failed:
        raise typer.Exit(1)
