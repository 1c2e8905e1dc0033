"""`streameval eval SUITE.yaml` and `streameval eval --resume SUITE_ID`: run a suite file (or
continue a stored suite), then print its table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streameval.core.cli.common import JsonOption, StoreOption, console, fail
from streameval.core.cli.run_options import CacheDirOption
from streameval.errors import UserError

# The runtime (store, runs, scorer) is imported when the command runs: `streameval --help`
# builds the command tree without it (streameval/cli.py).
if TYPE_CHECKING:
    from streameval.core.store.store import Store
    from streameval.scorer.table_model import PaperTable
    from streameval.suite.model import Suite, SuiteBenchmark
    from streameval.suite.runner import CellRun

SuiteFileArgument = Annotated[
    Path | None,
    typer.Argument(
        metavar="SUITE.yaml",
        help="The suite file: adapters, benchmarks, profiles, run options, table (docs/suites.md).",
        show_default=False,
    ),
]
ResumeSuiteOption = Annotated[
    str | None,
    typer.Option(
        "--resume",
        metavar="SUITE_ID",
        help="Continue a stored suite: its ended runs kept, the others resumed or created "
        "(no file needed).",
    ),
]


def eval_suite(
    suite_file: SuiteFileArgument = None,
    resume: ResumeSuiteOption = None,
    store: StoreOption = None,
    cache_dir: CacheDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run every adapter of a suite file on every benchmark of it, one run each, then
    print one table per benchmark (or --resume a suite).

    Exit status: the worst of its runs' (`streameval run --help`): 0 every session
    finished, 1 some failed, 2 the suite could not start (a bad file), 3 every session of
    a run failed, 4 a run stopped part-way; 130/143 interrupted (continue it with
    --resume SUITE_ID).
    """
    if (suite_file is None) == (resume is None):
        raise fail("give a suite file or --resume SUITE_ID (one of them)")
    from streameval.core.store.locations import default_cache_dir, resolve_store_url
    from streameval.core.store.store import Store

    cache = cache_dir or default_cache_dir()
    try:
        with Store(resolve_store_url(store, cache)) as opened:
            suite_id, suite = (
                _resumed(opened, resume) if resume else _created(opened, suite_file, cache)
            )
            done = _run(suite, suite_id, opened, cache, as_json)
            _print_table(suite, suite_id, opened, done, as_json)
    except UserError as exc:
        raise fail(str(exc)) from None
    worst = max(cell.exit_code for cell in done)
    if worst:
        raise typer.Exit(worst)


def _created(store: Store, path: Path | None, cache: Path) -> tuple[str, Suite]:
    """A new suite from its file, stored once its run options are checked."""
    from streameval.suite.model import read_suite
    from streameval.suite.runner import new_suite_id

    assert path is not None
    suite = read_suite(path)
    suite_id = new_suite_id()
    store.create_suite(suite_id, suite.model_dump(mode="json"))
    cells = len(suite.adapters) * len(suite.benchmarks)
    console.print(
        f"suite [bold]{suite_id}[/bold]: {cells} runs ({len(suite.adapters)} adapters x "
        f"{len(suite.benchmarks)} benchmarks); continue it with "
        f"`streameval eval --resume {suite_id}`",
        highlight=False,
    )
    return suite_id, suite


def _resumed(store: Store, suite_id: str) -> tuple[str, Suite]:
    from streameval.core.store.suites import unknown_suite
    from streameval.suite.model import stored_suite

    info = store.suite(suite_id)
    if info is None:
        raise unknown_suite(suite_id, store.url)
    return suite_id, stored_suite(info.content)


def _run(suite: Suite, suite_id: str, store: Store, cache: Path, as_json: bool) -> list[CellRun]:
    from streameval.suite.runner import SuiteRunner

    return SuiteRunner(suite, suite_id, store, cache, show_progress=not as_json).run()


def _print_table(
    suite: Suite, suite_id: str, store: Store, done: list[CellRun], as_json: bool
) -> None:
    """One table per benchmark (each under its own scoring profile), the adapters as rows."""
    from streameval.scorer.paper_table import render_table

    tables = [
        (benchmark.label, _table(suite, benchmark, store, done)) for benchmark in suite.benchmarks
    ]
    if as_json:
        runs = [
            {
                "adapter": c.adapter,
                "benchmark": c.benchmark,
                "run_id": c.run_id,
                "action": c.action,
                "exit_code": c.exit_code,
            }
            for c in done
        ]
        shown = [
            {"benchmark": label, "table": json.loads(render_table(table, "json"))}
            for label, table in tables
        ]
        print(json.dumps({"suite_id": suite_id, "store": store.url, "runs": runs, "tables": shown}))
        return
    for label, table in tables:
        print(f"{label}\n\n{render_table(table, suite.table.format)}", flush=True)
    other = [f"{label}: streameval table {_ids(table)} --format latex" for label, table in tables]
    console.print(
        f"suite {suite_id}: {len(done)} runs\nstore {store.url}\n" + "\n".join(other),
        highlight=False,
    )


def _ids(table: PaperTable) -> str:
    return " ".join(dict.fromkeys(row.run_id for row in table.rows))


def _table(
    suite: Suite, benchmark: SuiteBenchmark, store: Store, done: list[CellRun]
) -> PaperTable:
    """The benchmark's table: a row per adapter, labelled as the suite file labels it."""
    from streameval.scorer.paper_table import paper_table

    cells = [cell for cell in done if cell.benchmark == benchmark.label]
    table = paper_table(
        store,
        [cell.run_id for cell in cells],
        metrics=suite.table.metrics,
        by=suite.table.by,
        intervals=suite.table.intervals,
        scoring_profile=benchmark.scoring_profile,
    )
    labels = {cell.run_id: cell.adapter for cell in cells}
    rows = [row.model_copy(update={"label": labels[row.run_id]}) for row in table.rows]
    return table.model_copy(update={"rows": rows})
