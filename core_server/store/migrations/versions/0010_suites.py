"""Evaluation suites (`streameval eval SUITE.yaml`): the suite file's resolved content
(`suites`) and the run of each (adapter, benchmark) it names (`suite_runs`), so that
`eval --resume SUITE_ID` continues the suite from the store alone.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "suites",
        sa.Column("suite_id", sa.String(200), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("content", sa.JSON, nullable=False),
    )
    op.create_table(
        "suite_runs",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("suite_id", sa.String(200), nullable=False),
        sa.Column("adapter", sa.String(200), nullable=False),
        sa.Column("benchmark", sa.String(200), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_suite_runs_run_id"),
        sa.ForeignKeyConstraint(["suite_id"], ["suites.suite_id"], name="fk_suite_runs_suite_id"),
    )
    op.create_index("ix_suite_runs_suite_id", "suite_runs", ["suite_id"])


def downgrade() -> None:
    op.drop_index("ix_suite_runs_suite_id", table_name="suite_runs")
    op.drop_table("suite_runs")
    op.drop_table("suites")
