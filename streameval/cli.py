"""The one `streameval` command: the Core's commands (core_server/cli/commands.py), the scorer's
(scorer/service/cli.py), and what needs both: the demo, which runs, then scores, `eval`,
which runs a suite file, then tables it (streameval/suite/), and `profiles`, which lists the
protocol and the scoring profiles (streameval/profiles_cli.py).

The composition lives here, above both, so that the Core never imports the scorer.

Every command module imports what its commands need inside them: building the command tree
(for `streameval --help`) reads only signatures, so it imports no store, video or model
stack (bench/bench_startup.py measures it; tests/test_cli_startup.py keeps it so).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streameval.cli_help import HelpGroup
from streameval.core.cli import commands as core_cli
from streameval.core.cli.common import SCORING_PROFILES_KEY
from streameval.core.cli.run_command import execute
from streameval.errors import UserError
from streameval.profiles_cli import profiles
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.service import cli as scorer_cli
from streameval.suite.command import eval_suite
from streameval.synth.cli import synth


class StreamevalGroup(HelpGroup):
    panels = (
        ("Getting started", ("demo", "profiles")),
        ("Evaluate", ("run", "eval", "runs", "score", "compare", "table", "report", "export")),
        ("Serve", ("results-api", "core-api", "adapter")),
        ("Scale", ("worker", "launch", "plan")),
        ("Data", ("data", "synth")),
        ("Analyses", ("capacity", "audit")),
    )


app = typer.Typer(
    cls=StreamevalGroup,
    help="Condition-aware evaluation of streaming video understanding.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Usage errors in Click's plain words, below the usage line of streameval/cli_help.py
    # (Typer's rich box would also print nothing where no arguments ask for the help).
    rich_markup_mode=None,
)
app.add_typer(core_cli.app)
app.add_typer(scorer_cli.app)
app.command("synth")(synth)
app.command("profiles")(profiles)
app.command("eval")(eval_suite)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"streameval {version('streameval')}")
        raise typer.Exit()


@app.callback()
def options(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    # For the Core's commands, which never import the scorer (core_server/cli/common.py).
    ctx.meta[SCORING_PROFILES_KEY] = tuple(SCORING_PROFILES)


@app.command()
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    store: core_cli.StoreOption = None,
    cache_dir: Annotated[Path | None, typer.Option(help="Frame and benchmark cache.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic benchmark.")] = 0,
    modalities: Annotated[
        str | None,
        typer.Option(
            help="Run the synthetic benchmark with sound (synthetic-av), streaming video,audio "
            "or video alone (the reference adapter then guesses the sound tasks); without "
            "it, the silent synthetic benchmark."
        ),
    ] = None,
) -> None:
    """Generate the synthetic benchmark, serve the reference adapter, run, score, report."""
    from streameval.core.benchmark.synthetic import AUDIO_VISUAL_NAME, SILENT
    from streameval.core.cli.progress_display import progress_display
    from streameval.core.cli.run_options import modality_list
    from streameval.core.config import EndpointConfig, RunConfig
    from streameval.core.launch.adapter_process import AdapterProcess
    from streameval.core.store.locations import default_cache_dir, resolve_store_url
    from streameval.core.store.store import Store
    from streameval.progress import Phase
    from streameval.scorer.report import score_run

    cache = cache_dir or default_cache_dir()
    try:
        with (
            AdapterProcess("reference") as adapter,
            Store(resolve_store_url(store, cache)) as opened,
            # One display for the run's phases and the scoring after it.
            progress_display(core_cli.console, not as_json) as progress,
        ):
            config = RunConfig(
                benchmark=SILENT.name if modalities is None else AUDIO_VISUAL_NAME,
                benchmark_seed=seed,
                endpoints=[EndpointConfig(url=adapter.url, concurrency=4)],
                cache_dir=str(cache),
                modalities=modality_list(modalities),
            )
            summary = execute(config, opened, progress=progress)
            progress.start(Phase.SCORING, None)
            scores = score_run(opened, summary.run_id)
            progress.finish(Phase.SCORING)
    except UserError as exc:
        raise core_cli.fail(str(exc)) from None
    if as_json:
        print(
            json.dumps({"run_id": summary.run_id, "store": opened.url, "metrics": scores.to_json()})
        )
        return
    # Sized to the terminal: the tables fit it, and the store URL gets a line of its own.
    out = Console()
    scores.render(out)
    out.print(
        f"{summary.finished} sessions finished, {summary.failed} failed\n"
        f"store {opened.url}\n"
        f"units, scales and meanings: streameval score {summary.run_id} --explain\n"
        f"scores as JSON: streameval score {summary.run_id} --json\n"
        f"event log: streameval export {summary.run_id}\n"
        "dashboard: streameval results-api, then open http://127.0.0.1:8800/",
        highlight=False,
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
