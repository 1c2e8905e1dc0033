"""A run is bound to its videos: the sha256 of each video's bytes, recorded when the run
is created (or when a worker first reads a video the run has none for), so that a resume or
a worker refuses a file that changed since (core_server/run/video_binding.py).

Runs stored before this revision have no rows: their videos are recorded as they are next
read.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_videos",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("video", sa.Text, primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_videos_run_id"),
    )


def downgrade() -> None:
    op.drop_table("run_videos")
