"""Runs have one owner at a time: the Core driving a run holds a lease on it.

`run` and `run --resume` write their worker id, host and process id with a deadline that
they push forward while the run goes on; another Core refuses the run until the deadline
passed (its owner died) and then takes it over (core_server/store/run_lease.py).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_owners",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_owners_run_id"),
    )


def downgrade() -> None:
    op.drop_table("run_owners")
