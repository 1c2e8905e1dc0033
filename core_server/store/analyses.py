"""Results about a run as a whole, stored with it by name: a causality audit's verdict, a
capacity search's curve (the `run_analyses` table)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, select

from streameval.core.store import models
from streameval.core.store.database import StoreDatabase, retried, utc_now


class StoreAnalyses(StoreDatabase):
    """The Store's analyses of runs."""

    def put_analysis(self, run_id: str, name: str, payload: dict[str, Any]) -> None:
        """Store (or replace) the analysis `name` of a run: a causality audit's verdict, a
        capacity search's curve."""
        table = models.run_analyses
        with self.transaction(f"cannot store analysis {name!r} of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            where = (table.c.run_id == run_id) & (table.c.name == name)
            conn.execute(delete(table).where(where))
            row = {"run_id": run_id, "name": name, "created_at": utc_now(), "payload": payload}
            conn.execute(insert(table).values(**row))

    @retried
    def analyses(self, run_id: str) -> dict[str, dict[str, Any]]:
        """The analyses stored with a run, by name (empty when it has none)."""
        table = models.run_analyses
        with self.transaction(f"cannot read analyses of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                select(table.c.name, table.c.payload)
                .where(table.c.run_id == run_id)
                .order_by(table.c.name)
            )
            return {row.name: row.payload for row in rows}
