"""Where a run's data comes from: a store, or an exported JSONL log; both look the same here.

Events travel as plain tuples `(session_id, seq, kind, runtime_ns, video_t, payload)` whose
payload is the typed model of its kind (streameval.events), validated once where the row is
read: from the store's JSON text (one pydantic call per row, JSON parsing included), or from
an export's line (scorer/exported.py). The store is read through the DBAPI cursor, skipping
SQLAlchemy's per-row work, which is what makes a million events score in seconds; tuples
keep the rows cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, Text, cast, select

from streameval.core.store import models
from streameval.core.store.store import Store
from streameval.events import JSON_PAYLOAD_READERS, EventPayload, PayloadError, read_payload
from streameval.scorer.errors import ScoreError

EventRow = tuple[str, int, str, int, float | None, EventPayload]
_FETCH_ROWS = 5000
# The run fields that describe how a run was produced (stored with every score).
RUN_FIELDS = ("run_id", "status", "benchmark", "config", "config_hash", "conditions", "versions")


@dataclass
class RunSource:
    run: dict[str, Any]  # RUN_FIELDS
    records: list[dict[str, Any]]
    events: Callable[[str | None], Iterable[EventRow]]  # all events, or one session's
    # What an export read with allow_partial lacks (scorer/exported.py), known once its
    # events have been read; a store's runs are never incomplete in this sense.
    incomplete: list[str] = field(default_factory=list)

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


def _store_rows(engine: Engine, run_id: str, session_id: str | None) -> Iterator[EventRow]:
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
                yield from _typed_rows(run_id, rows)
        finally:
            cursor.close()


def _typed_rows(run_id: str, rows: list[tuple[Any, ...]]) -> Iterator[EventRow]:
    """The store's rows with their payload's JSON text validated into its kind's model.

    One at a time: a batch of live payload models would survive the garbage collector's
    young generation and make its collections cost more than the validation itself."""
    read = JSON_PAYLOAD_READERS
    for row in rows:
        session_id, seq, kind, runtime_ns, video_t, text = row
        try:  # the fast path: one validator call
            payload = read[kind](text)
        except (KeyError, ValueError):  # an unknown kind; a ValidationError is a ValueError
            yield _typed_row(run_id, row)
        else:
            yield session_id, seq, kind, runtime_ns, video_t, payload


def _typed_row(run_id: str, row: tuple[Any, ...]) -> EventRow:
    """One row the slow way: an older Core's payload upgraded, a bad one named."""
    session_id, seq, kind, runtime_ns, video_t, text = row
    try:
        payload = read_payload(kind, text)
    except PayloadError as exc:
        raise ScoreError(f"run {run_id!r} session {session_id!r} event {seq}: {exc}") from None
    return session_id, seq, kind, runtime_ns, video_t, payload
