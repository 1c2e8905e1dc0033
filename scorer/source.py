"""Where a run's data comes from: a store, or an exported JSONL log; both look the same here.

Events travel as plain tuples `(session_id, seq, kind, runtime_ns, video_t, payload)` whose
payload is either a dict (export) or its JSON text (store). Reading the store through the
DBAPI cursor and decoding a payload only when the scorer needs it is what makes a million
events score in seconds: most events (frames, acks, steps, silences) need only their columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Text, cast, select

from streameval.core.store import models
from streameval.core.store.export import ExportedRun, read_jsonl
from streameval.core.store.store import Store

RawEvent = tuple[str, int, str, int, float | None, str | dict[str, Any]]
_FETCH_ROWS = 5000
# The run fields that describe how a run was produced (stored with every score).
RUN_FIELDS = ("run_id", "status", "benchmark", "config", "config_hash", "conditions", "versions")


def payload_of(event: RawEvent) -> dict[str, Any]:
    payload = event[5]
    return json.loads(payload) if isinstance(payload, str) else payload


@dataclass
class RunSource:
    run: dict[str, Any]  # RUN_FIELDS
    records: list[dict[str, Any]]
    events: Callable[[str | None], Iterable[RawEvent]]  # all events, or one session's

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    @property
    def protocol(self) -> str | None:
        """The protocol profile the run was made under (its configuration's `profile`)."""
        return (self.run.get("config") or {}).get("profile")

    @property
    def clock(self) -> tuple[str | None, float | None]:
        """(pacing, speed): what a runtime measurement of this run means. Under logical
        pacing a runtime delay is processing time; under wall clock, real-time lag."""
        config = self.run.get("config") or {}
        pacing = config.get("pacing")
        return pacing, config.get("speed", 1.0) if pacing == "wall_clock" else None


def store_source(store: Store, run_id: str) -> RunSource:
    info = store.get_run(run_id)
    run = {name: getattr(info, name) for name in RUN_FIELDS}
    records = store.records(run_id)
    engine = store.engine
    return RunSource(run, records, lambda session_id=None: _store_rows(engine, run_id, session_id))


def _store_rows(engine: Engine, run_id: str, session_id: str | None) -> Iterator[RawEvent]:
    table = models.events
    query = (
        select(
            table.c.session_id,
            table.c.seq,
            table.c.kind,
            table.c.runtime_ns,
            table.c.video_t,
            cast(table.c.payload, Text),
        )
        .where(table.c.run_id == run_id)
        .order_by(table.c.session_id, table.c.seq)
    )
    if session_id is not None:
        query = query.where(table.c.session_id == session_id)
    with engine.connect() as conn:
        compiled = query.compile(dialect=conn.dialect)
        params: Any = compiled.construct_params()
        if compiled.positional:
            params = tuple(params[name] for name in compiled.positiontup or ())
        dbapi = conn.connection
        # A named (server-side) cursor streams from PostgreSQL instead of buffering the run.
        postgres = conn.dialect.name == "postgresql"
        cursor = dbapi.cursor(name="streameval_scorer") if postgres else dbapi.cursor()
        try:
            cursor.execute(str(compiled), params)
            while rows := cursor.fetchmany(_FETCH_ROWS):
                yield from rows
        finally:
            cursor.close()


def exported_source(exported: ExportedRun) -> RunSource:
    run = {name: exported.run[name] for name in RUN_FIELDS}
    records = exported.records
    rows = [
        (e.session_id, e.seq, e.kind, e.runtime_ns, e.video_t, e.payload) for e in exported.events
    ]

    def events(session_id: str | None = None) -> Iterable[RawEvent]:
        if session_id is None:
            return rows
        return [row for row in rows if row[0] == session_id]

    return RunSource(run, records, events)


def file_source(path: str | Path) -> RunSource:
    return exported_source(read_jsonl(path))
