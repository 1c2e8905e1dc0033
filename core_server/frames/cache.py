"""The frame cache: decode what a video's samples need once, keep the JPEGs on disk.

`FrameCache` finds a video's entry by its digest (streameval.core.frames.digest) and builds
it when missing (streameval.core.frames.entries), one build at a time per entry, from
threads, event-loop tasks and other processes sharing the cache alike (build_lock.py).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from streameval.core.frames.build_lock import entry_build_lock
from streameval.core.frames.digest import (
    DIGEST_MEMO_DIR,
    DigestMemo,
    identified_digest,
    video_digest,
)
from streameval.core.frames.entries import build_entry, entry_dir, load_entry
from streameval.core.frames.errors import FramesError, VideoChangedError
from streameval.core.frames.jpeg_writer import DecodeProgress
from streameval.core.frames.types import INDEX_NAME, ImageRules, VideoFrames

T = TypeVar("T")


class FrameCache:
    """Sampled frames of every video, on disk under `root`, decoded at most once."""

    def __init__(self, root: Path, *, verify: bool = False) -> None:
        """`verify`: never take a video's digest from the on-disk memo (see
        streameval.core.frames.digest); hash each video in full, once per process and
        version of the file."""
        self.root = Path(root)
        self.verify = verify
        memo = self.root / DIGEST_MEMO_DIR
        self._memo = DigestMemo(memo, read=not verify)
        # Readers that must never write (the read-only results API) use it without adding.
        self._reading_memo = DigestMemo(memo, read=not verify, write=False)
        self._loaded: dict[str, VideoFrames] = {}
        self._guard = threading.Lock()
        self._build_locks: dict[str, threading.Lock] = {}
        self._async_locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    def lookup(self, video_path: Path, rules: ImageRules) -> VideoFrames | None:
        """The cached entry of this video under these rules, reading only (None if absent):
        for readers that must never decode or write, such as the read-only results API."""
        digest = video_digest(Path(video_path), self._reading_memo)
        return load_entry(entry_dir(self.root, digest, rules), digest, rules)

    def has(self, video_path: Path, rules: ImageRules) -> bool:
        """Whether the video's samples under these rules are cached (hashing the video, and
        remembering its digest, if need be); VideoDecodeError for a video that is not there."""
        video_path = Path(video_path)
        digest = video_digest(video_path, self._memo)
        return load_entry(entry_dir(self.root, digest, rules), digest, rules) is not None

    def digest(self, video_path: Path) -> str:
        """The sha256 of the video's bytes (remembered, see streameval.core.frames.digest);
        VideoDecodeError for a video that is not there."""
        return video_digest(Path(video_path), self._memo)

    def get(
        self,
        video_path: Path,
        rules: ImageRules,
        on_progress: DecodeProgress | None = None,
        expect: str | None = None,
    ) -> VideoFrames:
        """The video's samples under these rules, decoding the video if no entry exists (or
        waiting for the process that decodes it); while it decodes, `on_progress` hears how
        far it is, a few times a second (in the decoding thread). `expect`: the sha256 the
        video must have (the one its run recorded); a file with other bytes is refused
        before anything is read from it (VideoChangedError)."""
        frames = self._get(Path(video_path), rules, on_progress, expect, wait=True)
        assert frames is not None  # waiting, it is built or loaded
        return frames

    def get_unless_busy(
        self, video_path: Path, rules: ImageRules, expect: str | None = None
    ) -> VideoFrames | None:
        """`get`, or None at once when another process is decoding the video: decoding
        ahead leaves it to that process instead of decoding it twice."""
        return self._get(Path(video_path), rules, None, expect, wait=False)

    def _get(
        self,
        video_path: Path,
        rules: ImageRules,
        on_progress: DecodeProgress | None,
        expect: str | None,
        *,
        wait: bool,
    ) -> VideoFrames | None:
        source, digest = identified_digest(video_path, self._memo)
        if expect is not None and digest != expect:
            raise VideoChangedError(
                f"{video_path}: changed since the run started (sha256 {digest[:12]}..., the "
                f"run recorded {expect[:12]}...); put the original file back, or start a new run"
            )
        final = entry_dir(self.root, digest, rules)
        key = final.name
        with self._build_lock(key):
            frames = self._loaded.get(key)
            if frames is not None and not (final / INDEX_NAME).exists():
                frames = None  # marked broken by a failed `read`: rebuild it
            frames = frames or load_entry(final, digest, rules)
            if frames is None:
                with entry_build_lock(final, wait=wait) as mine:
                    if not mine:
                        return None
                    # Built by another process while this one waited for the lock?
                    frames = load_entry(final, digest, rules) or build_entry(
                        video_path, source, digest, rules, final, on_progress
                    )
            self._loaded[key] = frames
            return frames

    async def aget(
        self,
        video_path: Path,
        rules: ImageRules,
        on_progress: DecodeProgress | None = None,
        expect: str | None = None,
    ) -> VideoFrames:
        """`get` off the event loop; concurrent calls for one video wait for one decode."""
        return await self._aget(
            video_path, rules, functools.partial(self.get, on_progress=on_progress, expect=expect)
        )

    async def aget_unless_busy(
        self, video_path: Path, rules: ImageRules, expect: str | None = None
    ) -> VideoFrames | None:
        """`get_unless_busy` off the event loop."""
        return await self._aget(
            video_path, rules, functools.partial(self.get_unless_busy, expect=expect)
        )

    async def _aget(
        self, video_path: Path, rules: ImageRules, get: Callable[[Path, ImageRules], T]
    ) -> T:
        # abspath, not resolve: resolving a symlink loop raises RuntimeError (Python 3.11);
        # `get` turns the loop into a VideoDecodeError.
        key = (os.path.abspath(video_path), rules.key())
        lock, users = self._async_locks.get(key, (asyncio.Lock(), 0))
        self._async_locks[key] = (lock, users + 1)
        try:
            async with lock:
                return await asyncio.to_thread(get, video_path, rules)
        finally:
            # Drop the lock with its last user: the map stays small and no lock outlives
            # the event loop it was used on.
            lock, users = self._async_locks[key]
            if users == 1:
                del self._async_locks[key]
            else:
                self._async_locks[key] = (lock, users - 1)

    async def aget_waited(
        self, video_path: Path, rules: ImageRules, expect: str | None = None
    ) -> tuple[VideoFrames, float]:
        """`aget`, and how many seconds the caller waited for the video's decode (its own or
        one in flight): 0.0 when the entry was cached when asked for."""
        started = time.monotonic()
        ready = await asyncio.to_thread(self._ready, video_path, rules)
        frames = await self.aget(video_path, rules, expect=expect)
        return frames, 0.0 if ready else time.monotonic() - started

    def _ready(self, video_path: Path, rules: ImageRules) -> bool:
        try:
            return self.has(video_path, rules)
        except FramesError:
            return False  # `aget` says why

    def _build_lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._build_locks.setdefault(key, threading.Lock())
