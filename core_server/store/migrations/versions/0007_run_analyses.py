"""Analyses stored with a run: a causality audit's verdict, a capacity search's curve.

They are results about a run as a whole, written once the analysis ends (not events of a
session), one row per (run, name), the payload a JSON object the analysis defines.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_analyses",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_analyses_run_id"),
    )


def downgrade() -> None:
    op.drop_table("run_analyses")
