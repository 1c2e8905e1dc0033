"""The digests a run's videos are bound to (the `run_videos` table): written once per video,
read back by every resume and worker of the run (core_server/run/video_binding.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from streameval.core.store import models
from streameval.core.store.database import StoreDatabase, retried, utc_now
from streameval.core.store.light import StoreError


def video_rows(run_id: str, digests: Mapping[str, str]) -> list[dict[str, Any]]:
    """The `run_videos` rows binding a run to these digests (video name -> sha256)."""
    now = utc_now()
    return [
        {"run_id": run_id, "video": video, "sha256": sha256, "recorded_at": now}
        for video, sha256 in sorted(digests.items())
    ]


class StoreVideos(StoreDatabase):
    """The Store's bindings of runs to their videos' bytes."""

    @retried
    def video_digests(self, run_id: str) -> dict[str, str]:
        """The sha256 recorded for each of a run's videos, by the name its records use."""
        table = models.run_videos
        with self.transaction(f"cannot read the video digests of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                select(table.c.video, table.c.sha256).where(table.c.run_id == run_id)
            )
            return {row.video: row.sha256 for row in rows}

    @retried
    def bind_video(self, run_id: str, video: str, sha256: str) -> str:
        """Record `sha256` for the run's `video` unless a digest is recorded already, and
        return the recorded one: of two workers meeting a video at once, the first wins and
        the second compares its file with the first's."""
        try:
            rows = video_rows(run_id, {video: sha256})
            self._insert_for_run(run_id, models.run_videos, rows, f"the digest of {video}")
        except StoreError as exc:
            if not isinstance(exc.__cause__, IntegrityError):
                raise
        return self.video_digests(run_id)[video]
