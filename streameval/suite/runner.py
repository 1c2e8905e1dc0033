"""Running a suite: for each adapter, its replicas started once (managed adapters), then one
run per benchmark through the Core's run path (`streameval run`'s RunOptions and
`execute`), each new run added to the suite as soon as it exists.

The same code continues a suite (`eval --resume`): a run that ended (finished, or failed
as a whole) is kept as it is, one that did not is resumed like `run --resume` resumes it,
and a run the suite does not have yet is created. An adapter whose runs all ended is not
started at all.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer

from streameval.core.cli.common import console
from streameval.core.cli.run_command import execute
from streameval.core.run.exit_codes import EXIT_INTERRUPTED, EXIT_TERMINATED
from streameval.core.run.run_end import RunSummary
from streameval.suite.model import Suite, SuiteAdapter, SuiteBenchmark, run_options

if TYPE_CHECKING:
    from streameval.core.cli.run_options import RunOptions
    from streameval.core.config import RunConfig
    from streameval.core.store.store import Store

# A run that ended: `eval --resume` keeps it as it is.
ENDED = ("finished", "failed")


@dataclass(frozen=True)
class CellRun:
    """What became of one (adapter, benchmark) of the suite in this invocation."""

    adapter: str
    benchmark: str
    run_id: str
    action: Literal["kept", "created", "resumed"]
    exit_code: int


def new_suite_id() -> str:
    return f"suite-{uuid.uuid4().hex[:12]}"


class SuiteRunner:
    """Runs (or continues) the stored suite `suite_id` in `store`."""

    def __init__(
        self, suite: Suite, suite_id: str, store: Store, cache_dir: Path, show_progress: bool
    ) -> None:
        self.suite = suite
        self.suite_id = suite_id
        self.store = store
        self.cache_dir = cache_dir
        self.show_progress = show_progress

    def run(self) -> list[CellRun]:
        """Every cell, adapter by adapter; a run that stops the suite (interrupted, every
        endpoint gone) ends it here, resumable."""
        from streameval.core.cli.run_adapters import TerminatedWhileStarting

        done: list[CellRun] = []
        try:
            for adapter in self.suite.adapters:
                done += self._adapter_cells(adapter)
        except (KeyboardInterrupt, TerminatedWhileStarting) as exc:  # a run's is its Exit
            self._say_how_to_resume()
            terminated = isinstance(exc, TerminatedWhileStarting)
            raise typer.Exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED) from None
        return done

    def _adapter_cells(self, adapter: SuiteAdapter) -> list[CellRun]:
        """The adapter's runs: its replicas started (as `run --adapter` starts them) only
        when one of its runs has work left."""
        from streameval.core.cli.run_adapters import print_adapter_report, started_adapters

        stored = self._stored_runs()
        kept = {
            b.label: self._kept(adapter, b, stored.get((adapter.label, b.label)))
            for b in self.suite.benchmarks
        }
        if all(cell is not None for cell in kept.values()):
            return [cell for cell in kept.values() if cell is not None]
        done = []
        concurrency = self.suite.run.concurrency
        with started_adapters(adapter.choice(), concurrency, self.cache_dir) as managed:
            assert managed is not None
            urls = [endpoint.url for endpoint in managed.endpoints]
            for benchmark in self.suite.benchmarks:
                cell = kept[benchmark.label]
                run_id = stored.get((adapter.label, benchmark.label))
                done.append(cell or self._run_cell(adapter, benchmark, urls, run_id))
        if self.show_progress:
            print_adapter_report(managed)
        return done

    def _stored_runs(self) -> dict[tuple[str, str], str]:
        info = self.store.suite(self.suite_id)
        assert info is not None, "the suite is stored before it runs"
        return info.runs

    def _kept(
        self, adapter: SuiteAdapter, benchmark: SuiteBenchmark, run_id: str | None
    ) -> CellRun | None:
        """The cell as it is when its run ended; None when it has work left."""
        if run_id is None:
            return None
        status = self.store.get_run(run_id).status
        if status not in ENDED:
            return None
        sessions = self.store.sessions(run_id)
        failed = sum(session.status == "failed" for session in sessions)
        summary = RunSummary(run_id, len(sessions), status=status, failed_total=failed)
        return CellRun(adapter.label, benchmark.label, run_id, "kept", summary.exit_code)

    def _run_cell(
        self, adapter: SuiteAdapter, benchmark: SuiteBenchmark, urls: list[str], run_id: str | None
    ) -> CellRun:
        """Create the cell's run (and add it to the suite) or resume it, then execute it."""
        from streameval.core.run.runner import RunExecutor

        config = self._options(benchmark, urls, run_id).config(self.store)
        action: Literal["created", "resumed"] = "resumed" if run_id else "created"
        if run_id is None:
            run_id = asyncio.run(RunExecutor(config, self.store).prepare())
            self.store.add_suite_run(self.suite_id, run_id, adapter.label, benchmark.label)
        console.print(
            f"suite {self.suite_id}: {adapter.label} on {benchmark.label}: run {run_id} ({action})",
            highlight=False,
        )
        summary = self._execute(config, run_id)
        console.print(
            f"run {run_id}: {summary.finished} finished, {summary.failed} failed, "
            f"{summary.kept} kept from before",
            highlight=False,
        )
        return CellRun(adapter.label, benchmark.label, run_id, action, summary.exit_code)

    def _execute(self, config: RunConfig, run_id: str) -> RunSummary:
        try:
            return execute(config, self.store, run_id, self.show_progress)
        except typer.Exit:  # interrupted or stopped: the run said how to resume it alone
            self._say_how_to_resume()
            raise

    def _say_how_to_resume(self) -> None:
        console.print(
            f"suite {self.suite_id} stopped: resume it with "
            f"`streameval eval --resume {self.suite_id}`",
            highlight=False,
        )

    def _options(
        self, benchmark: SuiteBenchmark, urls: list[str], resume: str | None
    ) -> RunOptions:
        as_json = not self.show_progress
        return run_options(
            self.suite, benchmark, urls, self.cache_dir, self.store.url, resume, as_json
        )
