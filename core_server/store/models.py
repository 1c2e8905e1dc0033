"""Table definitions the store reads and writes (SQLAlchemy Core).

The schema itself is created and evolved only by the Alembic migrations in `migrations/`;
these definitions must describe the same schema (a test compares them with a migrated
database using Alembic's autogenerate comparison). docs/events.md documents every table:
it is the contract with the scorer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal, get_args

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

RunStatus = Literal["created", "running", "finished", "interrupted", "failed"]
SessionStatus = Literal["pending", "running", "finished", "failed"]
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
SESSION_STATUSES: tuple[SessionStatus, ...] = get_args(SessionStatus)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    SQLite has no time zone type and hands back naive values; PostgreSQL hands back the
    session's zone. Both are normalised here so callers always see UTC-aware datetimes.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: store timestamps must be UTC-aware")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("status", String(20), nullable=False),
    Column("benchmark", String(200), nullable=False),
    Column("config", JSON, nullable=False),
    Column("config_hash", String(64), nullable=False),
    Column("versions", JSON, nullable=False),
    Column("conditions", JSON, nullable=False),
    Column("finished_at", UTCDateTime(), nullable=True),
)

run_records = Table(
    "run_records",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("record_id", String(200), primary_key=True),
    Column("task", String(20), nullable=False),
    Column("task_type", String(200), nullable=False),
    Column("source_benchmark", String(200), nullable=False),
    Column("video_path", Text, nullable=False),
    Column("record", JSON, nullable=False),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_records_run_id"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("session_id", String(200), primary_key=True),
    Column("record_ids", JSON, nullable=False),
    Column("status", String(20), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("endpoint", Text, nullable=True),
    Column("failure_stage", String(50), nullable=True),
    Column("failure_reason", Text, nullable=True),
    Column("started_at", UTCDateTime(), nullable=True),
    Column("finished_at", UTCDateTime(), nullable=True),
    Column("adapter", JSON, nullable=True),
    Column("failure_cause", String(20), nullable=True),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_expires_at", UTCDateTime(), nullable=True),
    Column("host", String(255), nullable=True),
    Column("worker_id", String(200), nullable=True),
    # The video seconds the session streams, known when it is created: claims take the
    # longest first (store/queue.py), so the run's tail is at most one short session.
    Column("expected_s", Double, nullable=False, server_default="0"),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_sessions_run_id"),
)
# Serves the claim: a run's sessions of one status, longest first, then by id.
Index(
    "ix_sessions_claim",
    sessions.c.run_id,
    sessions.c.status,
    sessions.c.expected_s.desc(),
    sessions.c.session_id,
)

events = Table(
    "events",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("session_id", String(200), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("kind", String(50), nullable=False),
    Column("runtime_ns", BigInteger, nullable=False),
    Column("video_t", Double, nullable=True),
    Column("payload", JSON, nullable=False),
    ForeignKeyConstraint(
        ["run_id", "session_id"],
        ["sessions.run_id", "sessions.session_id"],
        name="fk_events_session",
    ),
    # No index on kind: every reader selects a run or a session in (session_id, seq) order,
    # which the primary key serves (migration 0008).
)

# Endpoints registered with the control API (POST /adapters), kept across Core restarts.
adapter_endpoints = Table(
    "adapter_endpoints",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("url", Text, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("registered_at", UTCDateTime(), nullable=False),
)

# The Core that drives a run, one at a time (store/run_lease.py): a `run` or `run --resume`
# holds the run until `expires_at`, pushing it forward while it runs; another Core refuses
# the run until then, and takes it over once the lease expired (its owner died).
run_owners = Table(
    "run_owners",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("renewed_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_owners_run_id"),
)

# Results about a run as a whole, one per (run, analysis name): the causality audit's verdict
# with its evidence, the capacity search's curve. Written once the analysis ends.
run_analyses = Table(
    "run_analyses",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("payload", JSON, nullable=False),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_analyses_run_id"),
)

# The bytes a run's videos had when the run met them (core_server/run/video_binding.py): one
# row per (run, video as its records name it), written once, when the run is created or
# when a worker first reads a video the run has no row for; a file whose sha256 differs
# later is refused, so a run never mixes two versions of one video.
run_videos = Table(
    "run_videos",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("video", Text, primary_key=True),
    Column("sha256", String(64), nullable=False),
    Column("recorded_at", UTCDateTime(), nullable=False),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_videos_run_id"),
)

# Evaluation suites (`streameval eval SUITE.yaml`): the suite file's resolved content, once,
# stored before its first run so that a suite killed at once is resumable.
suites = Table(
    "suites",
    metadata,
    Column("suite_id", String(200), primary_key=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("content", JSON, nullable=False),
)

# The runs of a suite, one per (adapter, benchmark) of its file, named by their labels there;
# a run belongs to one suite at most.
suite_runs = Table(
    "suite_runs",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("suite_id", String(200), nullable=False),
    Column("adapter", String(200), nullable=False),
    Column("benchmark", String(200), nullable=False),
    ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_suite_runs_run_id"),
    ForeignKeyConstraint(["suite_id"], ["suites.suite_id"], name="fk_suite_runs_suite_id"),
    Index("ix_suite_runs_suite_id", "suite_id"),
)
