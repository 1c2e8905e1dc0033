"""The frames a run showed its model, found again in the run's frame cache, as thumbnails.

A run's stored configuration names its benchmark, its cache folder and its image rules
(fps, width cap, JPEG quality); the benchmark gives the folder the records' video paths are
relative to. The cache is content-addressed, so the JPEGs found are exactly those the Core
sent. Where the cache or the videos are not on this machine (a results API on another host),
the frames are unavailable and the dashboard draws frame ticks instead.

Over a store opened read-only (the results API) nothing is ever written: frames are served
from the cache when their entry is there, and are unavailable otherwise (no video is decoded
into the cache, no folder is made).
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image
from pydantic import BaseModel

from streameval.core.benchmark.benchmark_json import load_benchmark_file
from streameval.core.benchmark.importing import BenchmarkError
from streameval.core.benchmark.loader import SYNTHETIC, load_benchmark, synthetic_dir
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.errors import FrameCacheError, ImageRulesError, VideoDecodeError
from streameval.core.frames.types import ImageRules, VideoFrames
from streameval.core.store.store import Store

THUMBNAIL_QUALITY = 80


class FramesUnavailable(Exception):
    """The sampled frames of a record cannot be found on this machine; the message says why."""


class FrameInfo(BaseModel):
    index: int
    t: float
    width: int
    height: int


class FrameIndex(BaseModel):
    available: bool
    reason: str | None
    frames: list[FrameInfo]


@dataclass(frozen=True)
class _RunVideos:
    """Where one run's frames are: its image rules, its frame cache, its records' videos."""

    rules: ImageRules
    cache: FrameCache
    videos: dict[str, Path]  # record id -> video file


class RunFrames:
    """Finds the cached frames of any record of any run in one store. What a run needs is
    resolved once: a run's configuration and records never change after it is created."""

    def __init__(self, store: Store, read_only: bool | None = None) -> None:
        """`read_only` (default: whether the store was opened read-only): only read frames
        the cache already holds, never decode a video into it."""
        self._store = store
        self._read_only = store.read_only if read_only is None else read_only
        self._runs: dict[str, _RunVideos] = {}
        self._caches: dict[Path, FrameCache] = {}
        self._lock = threading.Lock()

    def index(self, run_id: str, record_id: str) -> FrameIndex:
        try:
            frames = self.video_frames(run_id, record_id)
        except FramesUnavailable as exc:
            return FrameIndex(available=False, reason=str(exc), frames=[])
        return FrameIndex(
            available=True,
            reason=None,
            frames=[
                FrameInfo(index=f.index, t=f.t, width=f.width, height=f.height)
                for f in frames.frames
            ],
        )

    def video_frames(self, run_id: str, record_id: str) -> VideoFrames:
        """The record's video under the run's image rules (decoded again only if the cache
        lost it: the same video and rules give the same JPEGs)."""
        run = self._run(run_id)
        video = run.videos.get(record_id)
        if video is None:
            raise FramesUnavailable(f"run {run_id!r} has no record {record_id!r}")
        if not video.is_file():
            raise FramesUnavailable(f"video {video} is not on this machine")
        try:
            if self._read_only:
                return cached_frames(run.cache, video, run.rules)
            return run.cache.get(video, run.rules)
        except (VideoDecodeError, OSError) as exc:
            raise FramesUnavailable(f"frames of {video} cannot be read: {exc}") from None

    def _run(self, run_id: str) -> _RunVideos:
        with self._lock:
            if run_id in self._runs:
                return self._runs[run_id]
        config = self._store.get_run(run_id).config
        try:
            rules = ImageRules(
                fps=float(config["fps"]),
                max_width=int(config["max_width"]),
                jpeg_quality=int(config["jpeg_quality"]),
            )
            cache_dir = Path(config["cache_dir"])
        except (KeyError, TypeError, ValueError, ImageRulesError) as exc:
            raise FramesUnavailable(f"run {run_id} stores no usable image rules ({exc})") from None
        root = _video_root(run_id, config, cache_dir)
        videos = {r["record_id"]: root / r["video_path"] for r in self._store.records(run_id)}
        with self._lock:
            cache = self._caches.setdefault(cache_dir, FrameCache(cache_dir / "frames"))
            run = self._runs[run_id] = _RunVideos(rules, cache, videos)
        return run


def cached_frames(cache: FrameCache, video: Path, rules: ImageRules) -> VideoFrames:
    """The video's frames as the cache holds them, reading only: FramesUnavailable when the
    cache has no complete entry for this video and these rules."""
    frames = cache.lookup(video, rules)
    if frames is None:
        raise FramesUnavailable(
            f"frames of {video} are not in the frame cache (a read-only store never decodes)"
        )
    return frames


def _video_root(run_id: str, config: dict[str, Any], cache_dir: Path) -> Path:
    """The folder the run's video paths are relative to, read from its benchmark."""
    name = str(config.get("benchmark", ""))
    seed = int(config.get("benchmark_seed", 0))
    try:
        if name in SYNTHETIC:
            # Read what the run used; never generate the benchmark from a results viewer.
            path = synthetic_dir(cache_dir, seed, name) / "benchmark.json"
            benchmark = load_benchmark_file(path)
        else:
            benchmark = load_benchmark(
                name,
                cache_dir,
                seed,
                video_root=config.get("video_root"),
                subset=config.get("subset"),
            )
    except BenchmarkError as exc:
        raise FramesUnavailable(f"benchmark of run {run_id} cannot be read: {exc}") from None
    return Path(benchmark.video_root)


def thumbnail(frames: VideoFrames, index: int, width: int) -> bytes:
    """Sample `index` as a JPEG at most `width` pixels wide (aspect kept, never upscaled)."""
    if not 0 <= index < len(frames.frames):
        raise FramesUnavailable(f"no frame {index}: the video has {len(frames.frames)} samples")
    try:
        data = frames.read(frames.frames[index])
    except FrameCacheError as exc:  # a cached sample that cannot be read: one line, a 404
        raise FramesUnavailable(str(exc)) from None
    image = Image.open(io.BytesIO(data))
    if image.width <= width:
        return data
    # thumbnail() lets the JPEG decoder downscale while decoding: much cheaper than resizing.
    image.thumbnail((width, image.height))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=THUMBNAIL_QUALITY)
    return out.getvalue()
