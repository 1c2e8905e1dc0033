"""The records of a benchmark run: the benchmark loaded once per executor, the records the
run streams (the selection, and a robustness run's variant copies, perturb_records.py),
every record by id, and the check that a resume streams the records the run stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.records import Benchmark
from streameval.core.config import RunConfig
from streameval.core.run.errors import RunError
from streameval.core.run.inputs import check_records, records_diff
from streameval.core.run.perturb_records import (
    Perturbed,
    Record,
    StreamedRecords,
    streamed_records,
)
from streameval.core.store.store import Store
from streameval.progress import Progress


def select_records(benchmark: Benchmark, config: RunConfig) -> list[Record]:
    records = [r for r in benchmark.records if r.task in config.tasks]
    if config.task_types:
        records = [r for r in records if r.task_type in config.task_types]
    return records[: config.limit] if config.limit else records


class RunRecords:
    """The benchmark a run streams, loaded on first use, and its records by id (derived
    again from the configuration for a robustness run's variants, once per benchmark)."""

    def __init__(
        self, config: RunConfig, progress: Progress, given: Benchmark | None = None
    ) -> None:
        self.config = config
        self.progress = progress
        # A benchmark held in memory instead of the configuration's (the causality audit's,
        # so that no file holds its answers).
        self.given = given
        self.benchmark: Benchmark | None = None
        self._by_id: dict[str, Record] | None = None
        # A robustness run's perturbation copies: record id -> variant and base record.
        self.perturbed: dict[str, Perturbed] = {}

    def load(self) -> Benchmark:
        """Load the benchmark (again), generating a synthetic one into the cache."""
        benchmark = self.given or load_benchmark(
            self.config.benchmark,
            Path(self.config.cache_dir),
            self.config.benchmark_seed,
            video_root=self.config.video_root,
            subset=self.config.subset,
            progress=self.progress,
            allow_outside_video_root=self.config.allow_outside_video_root,
        )
        self.use(benchmark)
        return benchmark

    def use(self, benchmark: Benchmark) -> None:
        """Stream `benchmark`; its records by id are derived again when next asked for."""
        self.benchmark, self._by_id = benchmark, None

    def loaded(self) -> Benchmark:
        return self.benchmark if self.benchmark is not None else self.load()

    @property
    def video_root(self) -> Path:
        return Path(self.loaded().video_root)

    def for_new_run(self) -> tuple[list[Record], list[dict[str, Any]]]:
        """The records a new run streams, and each as the store holds it; refused before
        any endpoint is asked (bad input is found at once)."""
        benchmark = self.load()
        selected = select_records(benchmark, self.config)
        if not selected:
            raise RunError("the benchmark selection is empty: check --tasks/--task-type/--limit")
        records = streamed_records(selected, self.config, benchmark.records).records
        dumped = [r.model_dump(mode="json") for r in records]
        check_records(dumped)
        return records, dumped

    def by_id(self) -> dict[str, Record]:
        """The benchmark's records by id, and a robustness run's variant records."""
        benchmark = self.loaded()
        if self._by_id is None:
            streamed = self._streamed(benchmark)
            self._by_id = {r.record_id: r for r in (*benchmark.records, *streamed.records)}
            self.perturbed = streamed.perturbed
        return self._by_id

    def check_inputs(self, store: Store, run_id: str) -> None:
        """Refuse a benchmark whose records differ from those the run stored: the model
        would be asked one question and scored against another."""
        benchmark = self.loaded()
        stored = store.records(run_id)
        current = {r.record_id: r.model_dump(mode="json") for r in benchmark.records}
        streamed = self._streamed(benchmark).records
        current.update((r.record_id, r.model_dump(mode="json")) for r in streamed)
        diff = records_diff(stored, current, [r.record_id for r in streamed])
        if diff is not None:
            raise RunError(
                f"run {run_id}: the benchmark {self.config.benchmark} changed since the run "
                f"was created ({diff}); resume with the file the run was created from, or "
                "start a new run"
            )

    def _streamed(self, benchmark: Benchmark) -> StreamedRecords:
        selected = select_records(benchmark, self.config)
        return streamed_records(selected, self.config, benchmark.records)
