"""The frames of the videos a run's sessions use, extracted into the frame cache
(Phase.FRAMES) a few videos at once, in the order the sessions will run, while the sessions
already stream: a session whose video is not ready yet waits for that video's decode only
(the frame cache decodes a video once, whoever asks). A cached video costs a lookup. A video
whose frames cannot be made, or whose file changed since the run recorded it
(video_binding.py), is left to its sessions, which fail at stage `frames` with its error.
A worker decoding ahead (decoding_ahead.py) prepares the videos of its next sessions the
same way, one at a time, without showing it, and leaving a video another process is decoding
to that process (every worker looks ahead at the same next sessions)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from streameval.core.frames.cache import FrameCache
from streameval.core.frames.errors import FramesError
from streameval.core.frames.types import ImageRules
from streameval.core.run.perturb_records import Record
from streameval.core.run.run_progress import FramesPhase
from streameval.core.run.video_binding import VideoBinding
from streameval.progress import Phase, Progress

# Videos whose frames are extracted at once before the sessions start (each decode also
# uses every core).
FRAME_PREPARERS = 4


@dataclass
class FramePreparation:
    """Fills `cache` with the frames `rules` make, telling `progress` (Phase.FRAMES), for
    videos whose bytes are those `videos` binds the run to (a changed one is not decoded)."""

    cache: FrameCache
    rules: ImageRules
    progress: Progress
    videos: VideoBinding
    preparers: int = FRAME_PREPARERS
    # False: a video another process is decoding is left to it (decoding ahead).
    wait_for_others: bool = True

    async def prepare(self, root: Path, records: Sequence[Record]) -> None:
        """Fill the frame cache for the videos (under `root`) the records use, the first
        record's video first."""
        names = list(dict.fromkeys(record.video_path for record in records))
        if not names:
            return
        phase = FramesPhase(self.progress, len(names))
        slots = asyncio.Semaphore(self.preparers)

        async def prepare(name: str) -> None:
            async with slots:
                if not await self._cached(root / name):
                    phase.show()
                    await self._extract(root, name)
            phase.one_done()

        await asyncio.gather(*(prepare(name) for name in names))
        phase.end()

    async def _extract(self, root: Path, name: str) -> None:
        """Fill the frame cache for one video, telling `progress` how far a long one is."""
        loop = asyncio.get_running_loop()
        reported: list[float] = []

        def decoded(done_s: float, total_s: float) -> None:  # in the decoding thread
            reported.append(total_s)
            loop.call_soon_threadsafe(self.progress.item, Phase.FRAMES, name, done_s, total_s)

        with contextlib.suppress(FramesError):
            expect = await self.videos.expected(name, root / name)
            if self.wait_for_others:
                await self.cache.aget(root / name, self.rules, decoded, expect)
            else:
                await self.cache.aget_unless_busy(root / name, self.rules, expect)
        if reported:  # its line goes
            self.progress.item(Phase.FRAMES, name, reported[-1], reported[-1])

    async def _cached(self, video: Path) -> bool:
        try:
            return await asyncio.to_thread(self.cache.has, video, self.rules)
        except FramesError:
            return False  # preparing it fails too, and its sessions say why
