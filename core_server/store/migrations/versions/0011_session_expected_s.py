"""Longest sessions first: each session's expected duration (`expected_s`, the video
seconds it streams, known when the run is created), and the claim index ordered by it.

Sessions stored earlier get 0 and are claimed by id among themselves, as before.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(
            sa.Column("expected_s", sa.Double, nullable=False, server_default=sa.text("0"))
        )
    op.drop_index("ix_sessions_claim", "sessions")
    op.create_index(
        "ix_sessions_claim",
        "sessions",
        ["run_id", "status", sa.text("expected_s DESC"), "session_id"],
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_claim", "sessions")
    op.create_index("ix_sessions_claim", "sessions", ["run_id", "status", "session_id"])
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("expected_s")
