"""Per-session adapter identity and failure cause.

`sessions.adapter` keeps the adapter's hello (adapter, adapter_version, protocol, declared
conditions) so a run that mixed adapters says which one served each session;
`sessions.failure_cause` says whether a failed session failed for infrastructure, adapter or
input reasons (`streameval.events.failure_cause`), so a resume can retry only the
infrastructure failures.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("adapter", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("failure_cause", sa.String(20), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("failure_cause")
        batch.drop_column("adapter")
