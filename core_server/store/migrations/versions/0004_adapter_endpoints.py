"""Adapter endpoints registered with the control API (`POST /adapters`).

The control API kept them in memory, so restarting the `core` service forgot every
registered endpoint and runs naming one were refused until it was registered again; stored
here they survive restarts and are shared by Core workers that use one store.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "adapter_endpoints",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_adapter_endpoints"),
    )


def downgrade() -> None:
    op.drop_table("adapter_endpoints")
