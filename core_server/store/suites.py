"""Evaluation suites (`streameval eval`): a suite file's resolved content (the `suites`
table) and the run of each of its (adapter, benchmark) cells (`suite_runs`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select

from streameval.core.store import models
from streameval.core.store.database import StoreDatabase, retried, utc_now
from streameval.core.store.light import StoreError


@dataclass(frozen=True)
class SuiteInfo:
    """A stored suite: its resolved file and its runs by (adapter label, benchmark label),
    in the order they were created."""

    suite_id: str
    created_at: datetime
    content: dict[str, Any]
    runs: dict[tuple[str, str], str]


class StoreSuites(StoreDatabase):
    """The Store's evaluation suites."""

    def create_suite(self, suite_id: str, content: dict[str, Any]) -> None:
        with self.transaction(f"cannot create suite {suite_id!r}") as conn:
            row = {"suite_id": suite_id, "created_at": utc_now(), "content": content}
            conn.execute(insert(models.suites).values(**row))

    def add_suite_run(self, suite_id: str, run_id: str, adapter: str, benchmark: str) -> None:
        """Make `run_id` the suite's run of the cell (adapter, benchmark)."""
        row = {"run_id": run_id, "suite_id": suite_id, "adapter": adapter, "benchmark": benchmark}
        with self.transaction(f"cannot add run {run_id!r} to suite {suite_id!r}") as conn:
            self._require_run(conn, run_id)
            conn.execute(insert(models.suite_runs).values(**row))

    @retried
    def suite(self, suite_id: str) -> SuiteInfo | None:
        """The suite `suite_id`, None when the store has none of that id."""
        table = models.suite_runs
        with self.transaction(f"cannot read suite {suite_id!r}") as conn:
            found = conn.execute(
                select(models.suites).where(models.suites.c.suite_id == suite_id)
            ).first()
            if found is None:
                return None
            runs = models.runs
            rows = conn.execute(
                select(table)
                .join(runs, runs.c.run_id == table.c.run_id)
                .where(table.c.suite_id == suite_id)
                .order_by(runs.c.created_at, runs.c.run_id)
            )
            runs = {(row.adapter, row.benchmark): row.run_id for row in rows}
        return SuiteInfo(found.suite_id, found.created_at, found.content, runs)


def unknown_suite(suite_id: str, store_url: str) -> StoreError:
    return StoreError(f"unknown suite id {suite_id!r} in store {store_url}")
