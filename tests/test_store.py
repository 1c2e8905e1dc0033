"""The event store and its writer, on SQLite and PostgreSQL (see the store_url fixture)."""

from __future__ import annotations

import asyncio
import hashlib
import platform
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from streameval.core.benchmark.records import EvidenceSpan, ProactiveRecord, QARecord, Trigger
from streameval.core.store import models
from streameval.core.store.light import schema_versions, sqlite_runs
from streameval.core.store.locations import sqlite_file
from streameval.core.store.store import (
    MIGRATIONS_DIR,
    AdapterEndpoint,
    SessionInfo,
    Store,
    StoreError,
    config_hash,
    default_store_url,
    library_versions,
)
from streameval.core.store.writer import EventWriter, EventWriterFailed
from streameval.events import Event, EventKind, PayloadError
from tests.event_examples import example, example_events

RUN = "run-1"
BIG_NS = 2**53 + 12345  # not representable as a float: proves integers stay integers
CONFIG = {"benchmark": "synthetic", "fps": 2.0, "pacing": "logical", "profile": "trace"}


def sample_records() -> list[dict]:
    qa = QARecord(
        record_id="qa-1",
        source_id="src-1",
        source_benchmark="synthetic",
        task_type="counting",
        video_path="videos/a.mp4",
        question="How many red squares appeared?",
        options=("A. 1", "B. 2"),
        answer="B",
        question_time_s=12.5,
        evidence_anchor_s=10.0,
        evidence_spans=(EvidenceSpan(start_s=8.0, end_s=10.0, description="två rutor"),),
    )
    proactive = ProactiveRecord(
        record_id="pro-1",
        source_id="src-2",
        source_benchmark="synthetic",
        task_type="alert",
        video_path="videos/b.mp4",
        instruction="Tell me when the light turns green.",
        instruction_time_s=0.0,
        triggers=(Trigger(trigger_type="event_onset", answer="green", point_s=4.0),),
        metadata={"difficulty": None, "tags": ["x"]},
    )
    return [qa.model_dump(mode="json"), proactive.model_dump(mode="json")]


def make_event(session_id: str, seq: int, kind: str = EventKind.FRAME_SENT, **payload) -> Event:
    """An event of `kind` with the example payload, `payload` changing some of its fields."""
    return Event(RUN, session_id, seq, kind, BIG_NS + seq, seq * 0.5, {**example(kind), **payload})


def new_run(store: Store, sessions: dict[str, list[str]] | None = None) -> None:
    store.create_run(RUN, "synthetic", CONFIG, {"state": "native"})
    store.add_records(RUN, sample_records())
    sessions = sessions if sessions is not None else {"s1": ["qa-1"], "s2": ["pro-1"]}
    store.add_sessions(RUN, list(sessions.items()))


# --- opening and migrating --------------------------------------------------------------------


def test_migration_creates_the_documented_schema(store: Store, store_url: str) -> None:
    engine = create_engine(store_url)
    try:
        schema = inspect(engine)
        # Later migrations add tables of their own; these are this contract's.
        assert {"alembic_version", "runs", "run_records", "sessions", "events"} <= set(
            schema.get_table_names()
        )
        columns = {t: [c["name"] for c in schema.get_columns(t)] for t in ("runs", "events")}
        assert columns["runs"] == [
            "run_id",
            "created_at",
            "status",
            "benchmark",
            "config",
            "config_hash",
            "versions",
            "conditions",
            "finished_at",
        ]
        assert columns["events"] == [
            "run_id",
            "session_id",
            "seq",
            "kind",
            "runtime_ns",
            "video_t",
            "payload",
        ]
        assert [c["name"] for c in schema.get_columns("sessions")] == [
            "run_id",
            "session_id",
            "record_ids",
            "status",
            "attempt",
            "endpoint",
            "failure_stage",
            "failure_reason",
            "started_at",
            "finished_at",
            "adapter",
            "failure_cause",
            "lease_owner",
            "lease_expires_at",
            "host",
            "worker_id",
            "expected_s",
        ]
        claim_index = {ix["name"]: ix for ix in schema.get_indexes("sessions")}
        # Claims read a run's sessions of one status longest first (migration 0011).
        assert claim_index["ix_sessions_claim"]["column_names"] == [
            "run_id",
            "status",
            "expected_s",
            "session_id",
        ]
        assert schema.get_pk_constraint("events")["constrained_columns"] == [
            "run_id",
            "session_id",
            "seq",
        ]
        assert schema.get_pk_constraint("run_records")["constrained_columns"] == [
            "run_id",
            "record_id",
        ]
        indexes = {ix["name"]: ix["column_names"] for ix in schema.get_indexes("events")}
        # Only the primary key's index: every reader goes through it (migration 0008).
        assert indexes == {}
        with engine.connect() as conn:
            head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
            assert head is not None
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head

            # The table definitions the store queries with match what the migrations built.
            def ours(name: str | None, type_: str, _parent: object) -> bool:
                return type_ != "table" or name in models.metadata.tables

            options = {"compare_type": True, "include_name": ours}
            context = MigrationContext.configure(conn, opts=options)
            assert compare_metadata(context, models.metadata) == []
    finally:
        engine.dispose()


def test_the_schema_versions_read_from_file_names_are_alembics_history() -> None:
    """A read-only store's version is checked without Alembic, from the migration files'
    names: they must name Alembic's revisions, in its order."""
    history = ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()  # newest first
    assert schema_versions() == [revision.revision for revision in reversed(list(history))]


def test_the_light_sqlite_reader_lists_the_runs_store_lists(tmp_path: Path) -> None:
    """`streameval runs` reads a SQLite store without SQLAlchemy (store/light.py): the same
    runs, in the same order, with the same values as `Store.list_runs`."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store(url) as store:
        assert sqlite_runs(tmp_path / "s.db", url) == []
        for run_id in ("b", "a", "c"):
            store.create_run(run_id, "synthetic@1", {"profile": "trace", "fps": 1.5})
        store.update_run_conditions("a", {"adapters": [{"adapter": "x", "nested": [1, None]}]})
        store.set_run_status("a", "finished")
        listed = store.list_runs()
    assert [info.run_id for info in listed] == ["c", "a", "b"]
    assert listed[1].finished_at is not None and listed[0].finished_at is None
    assert sqlite_runs(tmp_path / "s.db", url) == listed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]  # nothing written


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:////data/runs.db", "/data/runs.db"),
        ("sqlite:////data/my runs.db", "/data/my runs.db"),
        # What SQLAlchemy renders as an escape (`a@b.db`), or reads with options: not here.
        ("sqlite:////data/a%40b.db", None),
        ("sqlite:////data/runs.db?timeout=5", None),
        ("sqlite://", None),
        ("sqlite:///:memory:", None),
        ("sqlite:///file:runs.db", None),
        ("postgresql+psycopg://u@h/db", None),
    ],
)
def test_only_a_plain_sqlite_url_is_read_without_sqlalchemy(url: str, path: str | None) -> None:
    assert sqlite_file(url) == (None if path is None else Path(path))


def test_reopening_keeps_data(store_url: str) -> None:
    with Store(store_url) as first:
        new_run(first)
    with Store(store_url) as second:
        assert second.get_run(RUN).benchmark == "synthetic"
        assert [s.session_id for s in second.sessions(RUN)] == ["s1", "s2"]


def test_sqlite_store_uses_wal(tmp_path: Path) -> None:
    url = default_store_url(tmp_path)
    assert url == f"sqlite:///{tmp_path}/streameval.db"
    with Store(url):
        pass
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    engine.dispose()


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_postgresql_url_without_driver_uses_psycopg(store_url: str) -> None:
    with Store(store_url.replace("postgresql+psycopg://", "postgresql://", 1)) as store:
        new_run(store)
        store.append_events([make_event("s1", 0)])
        assert store.count_events(RUN) == 1


def test_in_memory_sqlite_store_works() -> None:
    with Store("sqlite://") as store:
        new_run(store)
        store.append_events([make_event("s1", 0)])
        assert store.count_events(RUN) == 1


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "cannot open store 'not a url'"),
        ("nosuchdb://host/db", "cannot open store nosuchdb://host/db"),
        ("mysql://u:secret@host/db", "only sqlite:/// and postgresql+psycopg:// URLs"),
        ("postgresql+psycopg2://u:secret@host/db", "only sqlite:/// and postgresql+psycopg://"),
        ("postgresql+psycopg://u:secret@127.0.0.1:1/db", "cannot open store"),
    ],
)
def test_bad_store_url_is_one_clear_error(url: str, expected: str) -> None:
    with pytest.raises(StoreError, match=re.escape(expected)) as info:
        Store(url)
    assert "secret" not in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_sqlite_directory_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unable to open database file"):
        Store(f"sqlite:///{tmp_path}/missing/dir/x.db")


# --- runs, records, sessions ------------------------------------------------------------------


def test_config_hash_is_sha256_of_canonical_json() -> None:
    expected = hashlib.sha256('{"a":[1,2.5],"b":"é"}'.encode()).hexdigest()
    assert config_hash({"b": "é", "a": [1, 2.5]}) == expected
    assert config_hash({"a": [1, 2.5], "b": "é"}) == expected


def test_library_versions_names_the_stack() -> None:
    versions = library_versions()
    assert set(versions) == {
        "python",
        "streameval",
        "av",
        "sqlalchemy",
        "websockets",
        "numpy",
        "pydantic",
        "fastapi",
    }
    assert versions["python"] == platform.python_version()
    import sqlalchemy

    assert versions["sqlalchemy"] == sqlalchemy.__version__


def test_run_round_trip(store: Store) -> None:
    before = datetime.now(UTC)
    created = store.create_run(RUN, "synthetic", CONFIG)
    assert store.get_run(RUN) == created
    assert created.status == "created"
    assert created.config == CONFIG
    assert created.config_hash == config_hash(CONFIG)
    assert created.versions == library_versions()
    assert created.conditions == {}
    assert created.finished_at is None
    assert created.created_at.tzinfo == UTC
    assert before <= created.created_at <= datetime.now(UTC)

    store.update_run_conditions(RUN, {"state": "native", "history": None})
    store.set_run_status(RUN, "running")
    assert store.get_run(RUN).finished_at is None
    store.set_run_status(RUN, "finished")
    run = store.get_run(RUN)
    assert (run.status, run.conditions) == ("finished", {"state": "native", "history": None})
    assert run.finished_at is not None and run.finished_at >= run.created_at


def test_list_runs_newest_first(store: Store) -> None:
    for run_id in ("a", "b", "c"):
        store.create_run(run_id, "synthetic", {})
    assert [r.run_id for r in store.list_runs()] == ["c", "b", "a"]


def test_duplicate_run_and_bad_status_are_rejected(store: Store) -> None:
    store.create_run(RUN, "synthetic", {})
    with pytest.raises(StoreError, match="run 'run-1' already exists"):
        store.create_run(RUN, "synthetic", {})
    with pytest.raises(StoreError, match="invalid run status 'done'"):
        store.set_run_status(RUN, "done")
    with pytest.raises(StoreError, match="invalid session status 'ok'"):
        store.set_session_status(RUN, "s1", "ok")


def test_records_round_trip_exactly(store: Store) -> None:
    new_run(store)
    assert store.records(RUN) == sorted(sample_records(), key=lambda r: r["record_id"])


def test_record_without_required_field_is_rejected(store: Store) -> None:
    store.create_run(RUN, "synthetic", {})
    record = sample_records()[0]
    del record["task_type"]
    with pytest.raises(StoreError, match="a record has no 'task_type' field"):
        store.add_records(RUN, [record])


def test_sessions_round_trip_and_status(store: Store) -> None:
    new_run(store)
    assert store.sessions(RUN) == [
        SessionInfo(RUN, "s1", ["qa-1"], "pending", 0, None, None, None, None, None),
        SessionInfo(RUN, "s2", ["pro-1"], "pending", 0, None, None, None, None, None),
    ]
    store.set_session_status(RUN, "s1", "running", endpoint="ws://127.0.0.1:9000")
    store.set_session_status(RUN, "s2", "running", endpoint="ws://h2:9000")
    store.set_session_status(RUN, "s1", "finished")
    store.set_session_status(RUN, "s2", "failed", stage="handshake", reason="protocol mismatch")
    s1, s2 = store.sessions(RUN)
    assert (s1.status, s1.endpoint, s1.failure_stage, s1.failure_reason) == (
        "finished",
        "ws://127.0.0.1:9000",
        None,
        None,
    )
    assert (s2.status, s2.endpoint, s2.failure_stage, s2.failure_reason) == (
        "failed",
        "ws://h2:9000",
        "handshake",
        "protocol mismatch",
    )
    for s in (s1, s2):
        assert s.started_at is not None and s.finished_at is not None
        assert s.started_at.tzinfo == UTC
        assert timedelta(0) <= s.finished_at - s.started_at < timedelta(seconds=30)


def test_unknown_run_id_is_a_store_error(store: Store) -> None:
    message = "unknown run id 'nope'"
    calls = [
        lambda: store.get_run("nope"),
        lambda: store.records("nope"),
        lambda: store.sessions("nope"),
        lambda: store.count_events("nope"),
        lambda: list(store.iter_events("nope")),
        lambda: store.set_run_status("nope", "running"),
        lambda: store.update_run_conditions("nope", {}),
        lambda: store.add_records("nope", sample_records()),
        lambda: store.add_sessions("nope", [("s1", [])]),
        lambda: store.set_session_status("nope", "s1", "running"),
        lambda: store.reset_session("nope", "s1"),
    ]
    for call in calls:
        with pytest.raises(StoreError, match=message):
            call()


def test_unknown_session_is_a_store_error(store: Store) -> None:
    new_run(store)
    with pytest.raises(StoreError, match="unknown session 's9' in run 'run-1'"):
        store.set_session_status(RUN, "s9", "running")
    with pytest.raises(StoreError, match="unknown session 's9'"):
        list(store.iter_events(RUN, "s9"))
    with pytest.raises(StoreError, match="cannot append 1 events of run 'run-1'"):
        store.append_events([make_event("s9", 0)])


# --- events -----------------------------------------------------------------------------------


def test_events_round_trip_exactly(store: Store) -> None:
    new_run(store)
    events = example_events(RUN, "s1")
    store.append_events(events)
    stored = list(store.iter_events(RUN))
    assert stored == events
    assert all(type(ev.runtime_ns) is int for ev in stored)
    workload = next(ev for ev in stored if ev.kind == EventKind.WORKLOAD)
    assert workload.payload.ended_ns == 2**63 - 1
    assert stored[1].video_t is None
    assert stored[2].video_t == 2 / 3


def test_events_come_back_in_session_seq_order(store: Store) -> None:
    new_run(store)
    events = [make_event(s, seq) for s in ("s1", "s2") for seq in range(40)]
    shuffled = events[:]
    random.Random(7).shuffle(shuffled)
    for start in range(0, len(shuffled), 9):
        store.append_events(shuffled[start : start + 9])
    assert list(store.iter_events(RUN, batch=7)) == events
    assert list(store.iter_events(RUN, "s2", batch=3)) == events[40:]
    assert store.count_events(RUN) == 80
    partial = store.iter_events(RUN, batch=2)
    assert next(partial) == events[0]
    partial.close()  # an abandoned stream releases its connection
    assert store.count_events(RUN) == 80


def test_a_large_batch_is_fenced_by_lease_and_stored_whole(store: Store) -> None:
    """1,000 sessions in one batch (more than one lease query's parameters) and 1,900 rows
    (many INSERTs): the events of the 50 sessions another worker holds are dropped, every
    other one is stored in order."""
    sessions = {f"s{k:04d}": ["qa-1"] for k in range(1000)}
    new_run(store, sessions)
    held = sorted(sessions)[:950]
    table = models.sessions
    with store.engine.begin() as conn:
        conn.execute(table.update().where(table.c.session_id.in_(held)).values(lease_owner="w1"))
    events = [make_event(session, seq) for session in sorted(sessions) for seq in range(2)]
    assert store.append_events(events, owner="w1") == set(sorted(sessions)[950:])
    assert list(store.iter_events(RUN)) == events[: 2 * 950]


def test_duplicate_event_key_rejects_the_whole_batch(store: Store) -> None:
    new_run(store)
    store.append_events([make_event("s1", 0), make_event("s1", 1)])
    with pytest.raises(StoreError, match=r"cannot append 2 events of run 'run-1' \(session 's1'"):
        store.append_events([make_event("s1", 2), make_event("s1", 1)])
    assert [ev.seq for ev in store.iter_events(RUN)] == [0, 1]


@pytest.mark.parametrize("value", [float("nan"), {"a", "set"}])
def test_a_payload_json_cannot_hold_is_refused_before_the_store(value: object) -> None:
    # NaN (which SQLite would take and PostgreSQL refuse) and a set are no JSON values: the
    # event cannot even be created, so nothing of the kind reaches a store.
    with pytest.raises(PayloadError, match="frame_sent payload, field 't'"):
        make_event("s1", 0, t=value)


def test_reset_session_deletes_only_its_events_and_bumps_attempt(store: Store) -> None:
    new_run(store)
    store.append_events([make_event(s, seq) for s in ("s1", "s2") for seq in range(5)])
    store.set_session_status(RUN, "s1", "failed", endpoint="ws://a", stage="streaming", reason="x")
    store.reset_session(RUN, "s1")
    store.reset_session(RUN, "s1")
    assert [(ev.session_id, ev.seq) for ev in store.iter_events(RUN)] == [
        ("s2", seq) for seq in range(5)
    ]
    s1, s2 = store.sessions(RUN)
    assert s1 == SessionInfo(RUN, "s1", ["qa-1"], "pending", 2, None, None, None, None, None)
    assert s2.attempt == 0
    store.append_events([make_event("s1", 0)])  # a resumed session starts again at seq 0
    assert store.count_events(RUN) == 6


# --- adapter endpoints ------------------------------------------------------------------------


def test_adapter_endpoints_are_replaced_by_name_listed_by_name_and_kept(store_url: str) -> None:
    before = datetime.now(UTC)
    with Store(store_url) as store:
        assert store.adapter_endpoints() == []
        first_b = store.register_adapter_endpoint("b", "ws://b:1/ws", 2)
        a = store.register_adapter_endpoint("a", "ws://a:1/ws", 4)
        b = store.register_adapter_endpoint("b", "ws://b2:7/ws", 8)
        assert store.adapter_endpoints() == [a, b]
        pk = inspect(store.engine).get_pk_constraint("adapter_endpoints")
    assert (pk["name"], pk["constrained_columns"]) == ("pk_adapter_endpoints", ["name"])
    assert a == AdapterEndpoint("a", "ws://a:1/ws", 4, a.registered_at)
    assert b == AdapterEndpoint("b", "ws://b2:7/ws", 8, b.registered_at)
    assert b.registered_at.tzinfo == UTC
    assert before <= first_b.registered_at <= a.registered_at <= b.registered_at
    assert b.registered_at <= datetime.now(UTC)
    with Store(store_url) as reopened:
        assert reopened.adapter_endpoints() == [a, b]


# --- the writer -------------------------------------------------------------------------------


class CountingStore(Store):
    """A real store that logs the calls the writer makes, and what was committed by then."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.calls: list[tuple] = []

    def append_rows(self, rows, owner=None):
        super().append_rows(rows, owner)
        self.calls.append(("append", len(rows)))

    def set_session_status(self, run_id, session_id, status, **kw):
        committed = len(list(self.iter_events(run_id, session_id)))
        super().set_session_status(run_id, session_id, status, **kw)
        self.calls.append(("status", session_id, status, committed))


@pytest.fixture
def counting_store(store_url: str):
    with CountingStore(store_url) as store:
        new_run(store)
        yield store


async def test_writer_batches_and_commits_everything_on_close(counting_store) -> None:
    writer = EventWriter(counting_store, batch_size=100, max_delay_s=10.0)
    await writer.start()
    for seq in range(1234):
        writer.put(make_event("s1", seq))
    await writer.close()
    assert counting_store.calls == [("append", 100)] * 12 + [("append", 34)]
    assert counting_store.count_events(RUN) == 1234
    assert [ev.seq for ev in counting_store.iter_events(RUN)] == list(range(1234))


async def test_writer_marks_a_session_finished_after_its_events(counting_store) -> None:
    writer = EventWriter(counting_store, batch_size=100, max_delay_s=10.0)
    await writer.start()
    for seq in range(250):
        writer.put(make_event("s1", seq))
    writer.put_session_status(RUN, "s1", "finished", endpoint="ws://a")
    for seq in range(10):
        writer.put(make_event("s2", seq))
    await writer.close()
    assert counting_store.calls == [
        ("append", 100),
        ("append", 100),
        ("append", 50),
        ("status", "s1", "finished", 250),
        ("append", 10),
    ]
    s1 = counting_store.sessions(RUN)[0]
    assert (s1.status, s1.endpoint) == ("finished", "ws://a")


async def test_writer_writes_a_small_batch_after_max_delay(counting_store) -> None:
    writer = EventWriter(counting_store, batch_size=100, max_delay_s=0.05)
    await writer.start()
    for seq in range(3):
        writer.put(make_event("s1", seq))
    for _ in range(200):  # without flush or close: only the delay triggers the write
        if counting_store.calls:
            break
        await asyncio.sleep(0.01)
    assert counting_store.calls == [("append", 3)]
    await writer.close()


async def test_writer_flush_commits_what_was_queued(counting_store) -> None:
    writer = EventWriter(counting_store, batch_size=100, max_delay_s=10.0)
    await writer.start()
    for seq in range(7):
        writer.put(make_event("s1", seq))
    await writer.flush()
    assert counting_store.count_events(RUN) == 7
    writer.put(make_event("s1", 7))
    await writer.close()
    assert counting_store.calls == [("append", 7), ("append", 1)]


async def test_writer_drains_events_put_before_start(counting_store) -> None:
    writer = EventWriter(counting_store, batch_size=100)
    writer.put(make_event("s1", 0))
    await writer.close()
    assert counting_store.count_events(RUN) == 1
    with pytest.raises(StoreError, match="the event writer is closed"):
        writer.put(make_event("s1", 1))


async def test_writer_surfaces_a_failed_write(counting_store) -> None:
    counting_store.append_events([make_event("s1", 5)])
    writer = EventWriter(counting_store, batch_size=4, max_delay_s=10.0)
    await writer.start()
    for seq in range(8):  # the first batch (seq 0..3) is fine, the second hits seq 5 again
        writer.put(make_event("s1", seq))
    writer.put_session_status(RUN, "s1", "finished")
    with pytest.raises(
        EventWriterFailed, match=r"cannot append 4 events .* seq 4 .* seq 7\)"
    ) as info:
        await writer.flush()
    # Accepted but not stored: counted, never raised into the sessions that put them.
    assert (info.value.unwritten_events, info.value.unwritten_changes) == (4, 1)
    assert not info.value.lost
    writer.put(make_event("s1", 8))
    with pytest.raises(EventWriterFailed) as closed:
        await writer.close()
    assert closed.value.unwritten_events == 5
    assert "5 events and 1 session status changes the writer accepted were not stored" in str(
        closed.value
    )
    assert [ev.seq for ev in counting_store.iter_events(RUN)] == [0, 1, 2, 3, 5]
    assert counting_store.sessions(RUN)[0].status == "pending"
