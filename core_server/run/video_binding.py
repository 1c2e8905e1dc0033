"""A run is bound to its videos' bytes: the sha256 of each video, recorded when the run is
created (`creation_digests`), or by the first resume or worker that reads a video the run
has none for yet (`VideoBinding.expected`), is what every later read must find.

The frame cache is asked for a video's frames with the recorded digest (`expect`): a file
replaced since is refused before a frame of it is decoded or sent, and its sessions fail at
stage `frames` with cause `input` and one line naming the file (VideoChangedError); the
run's other sessions go on. Videos are named as the records name them (relative to the
video root), so a worker on another machine with its own copy under another root is bound
to the same bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from streameval.core.frames.cache import FrameCache
from streameval.core.frames.errors import FramesError
from streameval.core.store.store import Store

# Videos hashed at once when a run is created (hashing reads the whole file).
HASHERS = 4


async def creation_digests(cache: FrameCache, root: Path, names: Iterable[str]) -> dict[str, str]:
    """The sha256 of each video under `root` that can be read now, by name; one that
    cannot (missing here: a detached run whose workers bring the videos) is left out, to
    be recorded by the first worker that reads it."""
    slots = asyncio.Semaphore(HASHERS)

    async def digest(name: str) -> tuple[str, str | None]:
        async with slots:
            try:
                return name, await asyncio.to_thread(cache.digest, root / name)
            except FramesError:
                return name, None

    found = await asyncio.gather(*(digest(name) for name in sorted(set(names))))
    return {name: sha256 for name, sha256 in found if sha256 is not None}


class VideoBinding:
    """The digests one run's videos are bound to, read from the store once and completed
    as videos the run had none for are met."""

    def __init__(self, store: Store, run_id: str, cache: FrameCache) -> None:
        self.store = store
        self.run_id = run_id
        self.cache = cache
        self._bound: dict[str, str] | None = None
        self._lock = asyncio.Lock()

    async def expected(self, name: str, path: Path) -> str | None:
        """The sha256 the video `name` (at `path` here) must have: the recorded one, or, when
        the run has none yet, the file's own, recorded now (unless another worker recorded
        one first: then that). None for a file that cannot be read: its sessions fail on it
        with the frame pipeline's own error."""
        async with self._lock:
            if self._bound is None:
                self._bound = await asyncio.to_thread(self.store.video_digests, self.run_id)
            bound = self._bound.get(name)
            if bound is None:
                try:
                    digest = await asyncio.to_thread(self.cache.digest, path)
                except FramesError:
                    return None
                bound = await asyncio.to_thread(self.store.bind_video, self.run_id, name, digest)
                self._bound[name] = bound
            return bound
