"""Drop the events index on (run_id, kind): no query reads by kind.

Every reader of events (the scorer, exports, `iter_events`, `count_events`) selects a run,
or a session of it, in (session_id, seq) order: the primary key serves all of them. The
second index was only ever written, one more B-tree insert for every event: storing the
throughput benchmark's events costs a fifth less CPU without it (bench/bench_store_inserts.py,
BENCHMARKS.md "The Core's send path").

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_events_run_id_kind", table_name="events")


def downgrade() -> None:
    op.create_index("ix_events_run_id_kind", "events", ["run_id", "kind"])
