"""Initial schema: runs, run_records, sessions, events.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("benchmark", sa.String(200), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.Column("conditions", sa.JSON(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
    )
    op.create_table(
        "run_records",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("record_id", sa.String(200), nullable=False),
        sa.Column("task", sa.String(20), nullable=False),
        sa.Column("task_type", sa.String(200), nullable=False),
        sa.Column("source_benchmark", sa.String(200), nullable=False),
        sa.Column("video_path", sa.Text(), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "record_id", name="pk_run_records"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_records_run_id"),
    )
    op.create_table(
        "sessions",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("session_id", sa.String(200), nullable=False),
        sa.Column("record_ids", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("endpoint", sa.Text(), nullable=True),
        sa.Column("failure_stage", sa.String(50), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "session_id", name="pk_sessions"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_sessions_run_id"),
    )
    op.create_table(
        "events",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("session_id", sa.String(200), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("kind", sa.String(50), nullable=False),
        sa.Column("runtime_ns", sa.BigInteger(), nullable=False),
        sa.Column("video_t", sa.Double(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "session_id", "seq", name="pk_events"),
        sa.ForeignKeyConstraint(
            ["run_id", "session_id"],
            ["sessions.run_id", "sessions.session_id"],
            name="fk_events_session",
        ),
    )
    op.create_index("ix_events_run_id_kind", "events", ["run_id", "kind"])


def downgrade() -> None:
    op.drop_index("ix_events_run_id_kind", table_name="events")
    op.drop_table("events")
    op.drop_table("sessions")
    op.drop_table("run_records")
    op.drop_table("runs")
