"""The events of a store's sessions: storing batches exactly once, fenced by the workers'
session leases, and reading them back typed.

Batches are stored by the fastest path of each database: COPY on PostgreSQL, multi-row
INSERTs on the driver's cursor on SQLite. An event travels as a plain row (`EventRow`)
from the session that records it to the insert, with its payload already JSON text.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Row, func, select

from streameval.core.store import models
from streameval.core.store.database import StoreDatabase, retried
from streameval.core.store.light import StoreError
from streameval.events import Event, EventPayload, PayloadError, read_payload

# An events row in the column order of `_EVENT_COLUMNS`: run_id, session_id, seq, kind,
# runtime_ns, video_t and the payload's JSON text.
EventRow = tuple[str, str, int, str, int, float | None, str]

# Well under SQLite's smallest limit on a statement's parameters (999 before 3.32).
_SQLITE_MAX_PARAMETERS = 900
_EVENT_COLUMNS = "run_id, session_id, seq, kind, runtime_ns, video_t, payload"
_COPY_EVENTS = f"COPY events ({_EVENT_COLUMNS}) FROM STDIN"
_EVENT_WIDTH = 7  # columns of an events row
_EVENT_ROW = "(" + ", ".join("?" * _EVENT_WIDTH) + ")"
_ROWS_PER_INSERT = _SQLITE_MAX_PARAMETERS // _EVENT_WIDTH


def event_row(ev: Event) -> EventRow:
    """The row that stores an event."""
    return (
        ev.run_id,
        ev.session_id,
        ev.seq,
        ev.kind.value,
        ev.runtime_ns,
        ev.video_t,
        _payload_json(ev.payload),
    )


class StoreEvents(StoreDatabase):
    """The Store's events (the `events` table)."""

    def append_events(self, events: Sequence[Event], owner: str | None = None) -> set[str]:
        """Insert a batch in one transaction: all of it is stored, or none of it.

        A transient error is retried (Store.retrying); as the failed try may have committed
        (a connection lost during COMMIT), a retry skips the events already stored, so each
        is stored exactly once. With `owner`, events of sessions whose lease that worker no
        longer holds are dropped (their session was given to another attempt); returns those
        sessions."""
        return self.append_rows([event_row(event) for event in events], owner)

    def append_rows(self, rows: Sequence[EventRow], owner: str | None = None) -> set[str]:
        """`append_events` for events already turned into rows: `event_row`, or a session's
        `Recorder`, whose rows the Core's event writer stores (the Recorder validates every
        payload but frame_sent's and frame_ack's, which it writes from typed values)."""
        if not rows:
            return set()
        uncertain = False

        def attempt() -> set[str]:
            nonlocal uncertain
            try:
                return self._append_rows(rows, owner, skip_stored=uncertain)
            except StoreError as exc:
                uncertain = uncertain or exc.transient
                raise

        return self.retrying(attempt)

    def _append_rows(
        self, rows: Sequence[EventRow], owner: str | None, skip_stored: bool
    ) -> set[str]:
        (run_id, first, first_seq, *_), (_, last, last_seq, *_) = rows[0], rows[-1]
        what = (
            f"cannot append {len(rows)} events of run {run_id!r} (session {first!r} seq "
            f"{first_seq} to session {last!r} seq {last_seq})"
        )
        lost: set[str] = set()
        with self.transaction(what) as conn:
            if owner is not None:
                lost = _sessions_not_held(conn, rows, owner)
                rows = [row for row in rows if row[1] not in lost]
            if skip_stored:
                stored = _stored_keys(conn, rows)
                rows = [row for row in rows if row[:3] not in stored]
            if not rows:
                return lost
            if conn.dialect.name == "postgresql":
                _copy_events(conn, rows)
            else:
                _insert_events(conn, rows)
        return lost

    def iter_events(
        self, run_id: str, session_id: str | None = None, batch: int = 5000
    ) -> Iterator[Event]:
        """Events ordered by (session_id, seq), fetched `batch` rows at a time."""
        table = models.events
        query = (
            select(table).where(table.c.run_id == run_id).order_by(table.c.session_id, table.c.seq)
        )
        if session_id is not None:
            query = query.where(table.c.session_id == session_id)
        with self.transaction(f"cannot read events of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            if session_id is not None:
                self._require_session(conn, run_id, session_id)
            for row in conn.execution_options(yield_per=batch).execute(query):
                yield _stored_event(row)

    @retried
    def count_events(self, run_id: str) -> int:
        table = models.events
        with self.transaction(f"cannot count events of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            return conn.execute(
                select(func.count()).select_from(table).where(table.c.run_id == run_id)
            ).scalar_one()

    @staticmethod
    def _require_session(conn: Connection, run_id: str, session_id: str) -> None:
        table = models.sessions
        query = select(table.c.session_id).where(
            table.c.run_id == run_id, table.c.session_id == session_id
        )
        if conn.execute(query).first() is None:
            raise StoreError(f"unknown session {session_id!r} in run {run_id!r}")


def _payload_json(payload: EventPayload) -> str:
    """A payload's JSON text, serialised by its model in one call (no dict in between)."""
    return payload.__pydantic_serializer__.to_json(payload).decode()


def _stored_event(row: Row[Any]) -> Event:
    """An events row as a typed event; a payload that does not match its kind is named."""
    try:
        payload = read_payload(row.kind, row.payload)
    except PayloadError as exc:
        raise StoreError(
            f"run {row.run_id!r} session {row.session_id!r} event {row.seq}: {exc}"
        ) from None
    return Event(
        row.run_id, row.session_id, row.seq, row.kind, row.runtime_ns, row.video_t, payload
    )


def _copy_events(conn: Connection, rows: Sequence[EventRow]) -> None:
    """PostgreSQL bulk load: COPY takes one round trip per batch where executemany takes
    many; measured under a busy event loop it stores batches 3-5x faster."""
    cursor = conn.connection.driver_connection.cursor()
    with cursor.copy(_COPY_EVENTS) as copy:
        for row in rows:
            copy.write_row(row)


def _insert_events(conn: Connection, rows: Sequence[EventRow]) -> None:
    """SQLite: multi-row INSERTs of plain tuples on the driver's cursor, in the transaction.

    The driver lets go of the interpreter lock around every statement it steps; one
    statement per row (executemany) handed the lock back and forth with the sessions'
    event loop a thousand times a batch, which cost the loop five times the insert itself.
    SQLAlchemy's per-row parameter handling cost more than the insert too."""
    cursor = conn.connection.driver_connection.cursor()
    try:
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[start : start + _ROWS_PER_INSERT]
            cursor.execute(_insert_rows(len(chunk)), [value for row in chunk for value in row])
    finally:
        cursor.close()


@functools.cache
def _insert_rows(count: int) -> str:
    return f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES " + ", ".join([_EVENT_ROW] * count)


def _sessions_not_held(conn: Connection, rows: Sequence[EventRow], owner: str) -> set[str]:
    """The batch's sessions whose lease `owner` does not hold. On PostgreSQL the held rows
    stay share-locked until the batch commits, so no claim can reset them in between."""
    table = models.sessions
    wanted = {(row[0], row[1]) for row in rows}
    held: set[tuple[str, str]] = set()
    for run_id in {run for run, _ in wanted}:
        ids = [session for run, session in wanted if run == run_id]
        if conn.dialect.name == "sqlite":
            held.update((run_id, session) for session in _held_sqlite(conn, run_id, ids, owner))
            continue
        query = select(table.c.session_id).where(
            table.c.run_id == run_id, table.c.session_id.in_(ids), table.c.lease_owner == owner
        )
        held.update(
            (run_id, row.session_id) for row in conn.execute(query.with_for_update(read=True))
        )
    return {session for run, session in wanted - held}


def _held_sqlite(conn: Connection, run_id: str, ids: list[str], owner: str) -> list[str]:
    """The driver's query for the sessions of `ids` that `owner` holds: built by SQLAlchemy
    for every batch, the same query cost as much as storing the batch."""
    held: list[str] = []
    cursor = conn.connection.driver_connection.cursor()
    try:
        for start in range(0, len(ids), _SQLITE_MAX_PARAMETERS):
            chunk = ids[start : start + _SQLITE_MAX_PARAMETERS]
            marks = ", ".join("?" * len(chunk))
            cursor.execute(
                "SELECT session_id FROM sessions WHERE run_id = ? AND lease_owner = ? "
                f"AND session_id IN ({marks})",
                (run_id, owner, *chunk),
            )
            held.extend(session for (session,) in cursor.fetchall())
    finally:
        cursor.close()
    return held


def _stored_keys(conn: Connection, rows: Sequence[EventRow]) -> set[tuple[str, str, int]]:
    """Which of these rows' (run, session, seq) keys are already stored."""
    table = models.events
    spans: dict[tuple[str, str], list[int]] = {}
    for run_id, session_id, seq, *_ in rows:
        spans.setdefault((run_id, session_id), []).append(seq)
    stored: set[tuple[str, str, int]] = set()
    for (run_id, session_id), seqs in spans.items():
        query = select(table.c.seq).where(
            table.c.run_id == run_id,
            table.c.session_id == session_id,
            table.c.seq.between(min(seqs), max(seqs)),
        )
        stored.update((run_id, session_id, seq) for seq in conn.execute(query).scalars())
    return stored
