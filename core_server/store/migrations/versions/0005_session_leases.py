"""Sessions as a work queue: leases, and who ran each session.

Workers on many machines claim a run's sessions from the shared store. A claim writes the
worker's id into `lease_owner` and a deadline into `lease_expires_at`, which the worker
pushes forward while the session runs; a session whose deadline passed (its worker died)
can be claimed again, as a new attempt. `host` and `worker_id` say where each session ran.
The index serves the claim query: pending or expired sessions of a run.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(200), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("worker_id", sa.String(200), nullable=True))
    op.create_index("ix_sessions_claim", "sessions", ["run_id", "status", "session_id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_claim", "sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("worker_id")
        batch.drop_column("host")
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
