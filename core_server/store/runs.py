"""The runs of a store and their records: creating a run (with what it was run with: its
config's hash and the versions of the libraries that can change results), its status, and
deleting runs with every row that belongs to them."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, Text, cast, delete, insert, select, update

from streameval.core.store import models
from streameval.core.store.clock import store_now
from streameval.core.store.database import StoreDatabase, check_status, retried, utc_now
from streameval.core.store.light import RunInfo, StoreError
from streameval.core.store.videos import video_rows

_VERSIONED_PACKAGES = (
    "streameval",
    "av",
    "sqlalchemy",
    "websockets",
    "numpy",
    "pydantic",
    "fastapi",
)

# How often change_run_conditions re-reads conditions another Core changed under it.
CONDITIONS_RACES = 20

# Every table holding rows of runs, those that refer to others first (the order to delete).
RUN_TABLES = tuple(
    table for table in reversed(models.metadata.sorted_tables) if "run_id" in table.c
)


@dataclass(frozen=True)
class DeletedRuns:
    """What `Store.delete_runs` removed: the runs as they were, and the rows of each table."""

    runs: list[RunInfo]
    rows: dict[str, int]


def canonical_json(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no spaces, UTF-8, no NaN/Infinity."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()


def library_versions() -> dict[str, str]:
    """Versions that can change results, read from package metadata (nothing is imported)."""
    versions = {"python": platform.python_version()}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def record_rows(run_id: str, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `run_records` rows of a run's records (KeyError: a record lacks a column)."""
    return [
        {
            "run_id": run_id,
            "record_id": rec["record_id"],
            "task": rec["task"],
            "task_type": rec["task_type"],
            "source_benchmark": rec["source_benchmark"],
            "video_path": rec["video_path"],
            "record": rec,
        }
        for rec in records
    ]


class StoreRuns(StoreDatabase):
    """The Store's runs (the `runs` table) and their records (`run_records`)."""

    def create_run(
        self,
        run_id: str,
        benchmark: str,
        config: dict[str, Any],
        conditions: dict[str, Any] | None = None,
        *,
        records: Sequence[dict[str, Any]] = (),
        videos: Mapping[str, str] | None = None,
        expected_s: Mapping[str, float] | None = None,
    ) -> RunInfo:
        """Store a new run with `records`, one pending session per record and `videos` (the
        sha256 of each video by name), in one transaction: a run that exists has every one
        of its sessions. `expected_s`: the video seconds each record's session streams, by
        record id (0 for one left out): claims take the longest first.

        Retried on transient errors for RETRY_BUDGET_S like the store's other calls (a
        locked SQLite file, a PostgreSQL restart). A try whose commit was lost with its
        connection is recognised on the next by the run's creation time and hash."""
        info = RunInfo(
            run_id=run_id,
            created_at=utc_now(),
            status="created",
            benchmark=benchmark,
            config=config,
            config_hash=config_hash(config),
            versions=library_versions(),
            conditions=dict(conditions or {}),
            finished_at=None,
        )
        rows = _checked_record_rows(run_id, records)
        durations = expected_s or {}
        sessions = [
            {
                "run_id": run_id,
                "session_id": row["record_id"],
                "record_ids": [row["record_id"]],
                "status": "pending",
                "attempt": 0,
                "expected_s": durations.get(row["record_id"], 0.0),
            }
            for row in rows
        ]
        bound = video_rows(run_id, videos or {})
        return self.retrying(lambda: self._insert_run(info, rows, sessions, bound))

    def _insert_run(
        self,
        info: RunInfo,
        rows: list[dict[str, Any]],
        sessions: list[dict[str, Any]],
        videos: list[dict[str, Any]],
    ) -> RunInfo:
        table = models.runs
        with self.transaction(f"cannot create run {info.run_id!r}") as conn:
            stored = conn.execute(
                select(table.c.created_at, table.c.config_hash).where(table.c.run_id == info.run_id)
            ).first()
            if stored is None:
                conn.execute(insert(table).values(**asdict(info)))
                if rows:
                    conn.execute(insert(models.run_records), rows)
                    conn.execute(insert(models.sessions), sessions)
                if videos:
                    conn.execute(insert(models.run_videos), videos)
            elif tuple(stored) != (info.created_at, info.config_hash):
                raise StoreError(f"run {info.run_id!r} already exists in {self._display_url}")
        return info

    def set_run_status(self, run_id: str, status: str) -> None:
        check_status(status, models.RUN_STATUSES, "run")
        values: dict[str, Any] = {"status": status}
        if status in ("finished", "interrupted", "failed"):
            values["finished_at"] = utc_now()
        self._update_run(run_id, values)

    def update_run_conditions(self, run_id: str, conditions: dict[str, Any]) -> None:
        self._update_run(run_id, {"conditions": conditions})

    def change_run_conditions(
        self, run_id: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any]:
        """Read, change and write a run's conditions with no other writer in between, and
        return them as stored. `change` gets the stored conditions and returns the new ones
        (None: nothing to write); an error it raises stops here. The write is a
        compare-and-set on the stored text: when another Core changed the conditions since
        they were read, `change` runs again on theirs (it may now refuse them)."""
        for _ in range(CONDITIONS_RACES):
            seen, conditions = self.retrying(lambda: self._stored_conditions(run_id))
            changed = change(dict(conditions))
            if changed is None:
                return conditions
            if self.retrying(functools.partial(self._set_conditions_if, run_id, seen, changed)):
                return changed
        raise StoreError(f"cannot change run {run_id!r}: other Cores keep changing it")

    def _stored_conditions(self, run_id: str) -> tuple[str, dict[str, Any]]:
        """(the conditions' stored text, the conditions)."""
        table = models.runs
        query = select(cast(table.c.conditions, Text), table.c.conditions).where(
            table.c.run_id == run_id
        )
        with self.transaction(f"cannot read run {run_id!r}") as conn:
            row = conn.execute(query).first()
        if row is None:
            raise self._unknown_run(run_id)
        return row[0], row[1]

    def _set_conditions_if(self, run_id: str, seen: str, conditions: dict[str, Any]) -> bool:
        table = models.runs
        with self.transaction(f"cannot update run {run_id!r}") as conn:
            written = conn.execute(
                update(table)
                .where(table.c.run_id == run_id, cast(table.c.conditions, Text) == seen)
                .values(conditions=conditions)
            )
            return written.rowcount == 1

    @retried
    def _update_run(self, run_id: str, values: dict[str, Any]) -> None:
        with self.transaction(f"cannot update run {run_id!r}") as conn:
            table = models.runs
            result = conn.execute(table.update().where(table.c.run_id == run_id).values(**values))
            if result.rowcount == 0:
                raise self._unknown_run(run_id)

    @retried
    def get_run(self, run_id: str) -> RunInfo:
        with self.transaction(f"cannot read run {run_id!r}") as conn:
            row = conn.execute(select(models.runs).where(models.runs.c.run_id == run_id)).first()
        if row is None:
            raise self._unknown_run(run_id)
        return _run_info(row)

    @retried
    def list_runs(self) -> list[RunInfo]:
        table = models.runs
        with self.transaction("cannot list runs") as conn:
            rows = conn.execute(
                select(table).order_by(table.c.created_at.desc(), table.c.run_id.desc())
            )
            return [_run_info(row) for row in rows]

    @retried
    def runs_to_delete(self, run_ids: Sequence[str], *, force: bool = False) -> list[RunInfo]:
        """The runs `delete_runs` would delete, or the StoreError it would raise (so that a
        command can ask for confirmation first)."""
        with self.transaction(f"cannot read {_runs_named(run_ids)}") as conn:
            return self._deletable(conn, run_ids, force)

    def delete_runs(self, run_ids: Sequence[str], *, force: bool = False) -> DeletedRuns:
        """Delete runs with every row that belongs to them, all in one transaction.

        Nothing is deleted when an id is unknown, or when a run is in progress (a Core's
        run lease or a worker's session lease has not expired) unless `force`. What runs
        share is left alone: registered adapter endpoints and the judge's verdict cache
        (keyed by question and answer, not by run)."""
        with self.transaction(f"cannot delete {_runs_named(run_ids)}") as conn:
            infos = self._deletable(conn, run_ids, force)
            ids = [info.run_id for info in infos]
            rows = {
                table.name: conn.execute(delete(table).where(table.c.run_id.in_(ids))).rowcount
                for table in RUN_TABLES
            }
        return DeletedRuns(infos, rows)

    def _deletable(self, conn: Connection, run_ids: Sequence[str], force: bool) -> list[RunInfo]:
        ids = list(dict.fromkeys(run_ids))  # each once, in the order given
        table = models.runs
        found = {
            row.run_id: _run_info(row)
            for row in conn.execute(select(table).where(table.c.run_id.in_(ids)))
        }
        unknown = [run_id for run_id in ids if run_id not in found]
        if unknown:
            names = ", ".join(repr(run_id) for run_id in unknown)
            plural = "s" if len(unknown) > 1 else ""
            raise StoreError(
                f"unknown run id{plural} {names} in store {self._display_url}: nothing deleted"
            )
        if not force:
            _refuse_runs_in_progress(conn, ids)
        return [found[run_id] for run_id in ids]

    # --- records --------------------------------------------------------------------------------

    def add_records(self, run_id: str, records: Sequence[dict[str, Any]]) -> None:
        rows = _checked_record_rows(run_id, records)
        self._insert_for_run(run_id, models.run_records, rows, "records")

    @retried
    def records(self, run_id: str) -> list[dict[str, Any]]:
        table = models.run_records
        with self.transaction(f"cannot read records of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                select(table.c.record).where(table.c.run_id == run_id).order_by(table.c.record_id)
            )
            return [row.record for row in rows]


def _checked_record_rows(run_id: str, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    try:
        return record_rows(run_id, records)
    except KeyError as exc:
        raise StoreError(
            f"cannot add records to run {run_id!r}: a record has no {exc} field"
        ) from exc


def _run_info(row: Row[Any]) -> RunInfo:
    return RunInfo(**row._asdict())  # the columns are named like the fields


def _runs_named(run_ids: Sequence[str]) -> str:
    return ", ".join(f"run {run_id!r}" for run_id in run_ids)


def _refuse_runs_in_progress(conn: Connection, run_ids: list[str]) -> None:
    """StoreError naming a run whose Core or one of whose workers still holds a lease (by
    the database's clock, like every lease)."""
    now = store_now()
    owners = models.run_owners
    owner = conn.execute(
        select(owners).where(owners.c.run_id.in_(run_ids), owners.c.expires_at > now)
    ).first()
    if owner is not None:
        holder = f"a Core on host {owner.host} (pid {owner.pid})"
        raise _in_progress(owner.run_id, holder, owner.expires_at)
    sessions = models.sessions
    held = conn.execute(
        select(sessions).where(sessions.c.run_id.in_(run_ids), sessions.c.lease_expires_at > now)
    ).first()
    if held is not None:
        holder = f"worker {held.worker_id} on host {held.host} (session {held.session_id!r})"
        raise _in_progress(held.run_id, holder, held.lease_expires_at)


def _in_progress(run_id: str, holder: str, until: datetime) -> StoreError:
    return StoreError(
        f"run {run_id!r} is in progress: {holder} holds it until "
        f"{until.isoformat(timespec='seconds')}; stop it first, or add --force to delete it "
        "anyway: nothing deleted"
    )
