"""The frame pipeline: decode a video once, sample it at a fixed rate, cache JPEGs on disk.

A video is decoded sequentially, once per (video content, image rules): seeking to every
sample decodes each keyframe interval again and again, which is several times slower on
ordinary keyframe spacing (bench/bench_frame_sampling.py measures it). Sample k sits at video
time t = k / fps and shows source frame floor(t * source_fps + 0.5). Each sample is resized
inside PyAV's pixel-format conversion (cheaper than a Pillow resize), JPEG-encoded with
Pillow and written to disk straight away, so memory stays flat whatever the video's length.

Cache layout (content-addressed, shared by every run on the machine):

    root/<digest[:2]>/<digest>-<rules key>/000000.jpg ... index.json

An entry is built in a private `.partial-*` folder with index.json written last, then
published by one atomic rename; an entry folder without a valid index.json (left by a killed
process) is ignored and rebuilt.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import math
import os
import shutil
import threading
import time
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import av
from av.video.reformatter import VideoReformatter
from PIL import Image

log = logging.getLogger(__name__)

INDEX_NAME = "index.json"
# Bumped whenever the sampling or encoding changes, so older cache entries are rebuilt.
INDEX_FORMAT = 1
# A decoded stream may end a little before the duration its header declares (audio tails,
# estimated durations); anything shorter than this margin means the file was cut off.
TRUNCATION_MARGIN_S = 1.0
TRUNCATION_MARGIN_FRACTION = 0.05
# A builder adds a JPEG every few seconds at most; a partial folder untouched this long
# belongs to a process that died, and is deleted.
STALE_PARTIAL_S = 600.0
# Callers compute window bounds with their own float arithmetic; a nanosecond of slack
# keeps a sample at exactly the bound inside.
TIME_EPSILON_S = 1e-9
# AREA averages the source pixels under each output pixel: the right filter for downscaling.
RESIZE_INTERPOLATION = "AREA"


class VideoDecodeError(Exception):
    """A video cannot be used: missing, unreadable, corrupt, truncated or without video."""


class ImageRulesError(ValueError):
    """Image rules out of range (fps, width cap or JPEG quality)."""


@dataclass(frozen=True)
class ImageRules:
    fps: float = 1.0
    max_width: int = 960  # cap, aspect kept, never upscale
    jpeg_quality: int = 90

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fps) and self.fps > 0):
            raise ImageRulesError(f"image rules: fps must be a positive number, got {self.fps}")
        if self.max_width < 1:
            raise ImageRulesError(f"image rules: max_width must be >= 1, got {self.max_width}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ImageRulesError(
                f"image rules: jpeg_quality must be in 1..100, got {self.jpeg_quality}"
            )

    def key(self) -> str:
        """Stable short string naming these rules in cache paths."""
        return f"{float(self.fps)!r}fps-w{self.max_width}-q{self.jpeg_quality}"


@dataclass(frozen=True)
class FrameRef:
    index: int  # sample index k (t = k / fps)
    source_index: int  # the source frame shown: floor(t * source_fps + 0.5), or the last frame
    t: float  # video time in seconds, = k / fps
    frame_id: str  # stable id: f"{video_digest[:16]}:{source_index}"
    width: int
    height: int
    nbytes: int


@dataclass(frozen=True)
class VideoFrames:
    """The samples of one video under one set of rules; the JPEGs stay on disk."""

    video_digest: str
    duration_s: float
    source_fps: float
    rules: ImageRules
    frames: tuple[FrameRef, ...]  # all samples with k / fps < duration_s
    directory: Path

    def between(self, start_s: float, end_s: float) -> list[FrameRef]:
        """The samples with start_s <= t <= end_s, in time order."""
        lo = bisect_left(self.frames, start_s - TIME_EPSILON_S, key=_time_of)
        hi = bisect_right(self.frames, end_s + TIME_EPSILON_S, key=_time_of)
        return list(self.frames[lo:hi])

    def read(self, ref: FrameRef) -> bytes:
        """The JPEG bytes of one sample, read from disk."""
        if not (0 <= ref.index < len(self.frames) and self.frames[ref.index] == ref):
            raise ValueError(
                f"frame {ref.frame_id} (sample {ref.index}) is not in {self.directory}"
            )
        return (self.directory / _jpeg_name(ref.index)).read_bytes()


def _time_of(ref: FrameRef) -> float:
    return ref.t


def _jpeg_name(index: int) -> str:
    return f"{index:06d}.jpg"


# ----------------------------------------------------------------------------- digests

_digest_lock = threading.Lock()
_digests: dict[tuple[str, int, int], str] = {}


def video_digest(path: Path) -> str:
    """sha256 of the file's bytes, computed once per process per (path, size, mtime)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise VideoDecodeError(f"{path}: video file not found") from None
    except OSError as exc:
        raise VideoDecodeError(f"{path}: cannot read video file ({exc.strerror})") from None
    if not path.is_file():
        raise VideoDecodeError(f"{path}: not a regular file")
    memo_key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    # One lock for all files: concurrent sessions on one video then hash it only once.
    with _digest_lock:
        if memo_key not in _digests:
            with path.open("rb") as f:
                _digests[memo_key] = hashlib.file_digest(f, "sha256").hexdigest()
        return _digests[memo_key]


# ----------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class _Stream:
    """What sampling needs to know about a video stream."""

    rate: Fraction  # average frame rate
    time_base: Fraction | None
    declared_s: float | None  # duration from the header, when it has one


def _open(path: Path) -> av.container.InputContainer:
    try:
        return av.open(str(path))
    except av.FFmpegError as exc:
        raise VideoDecodeError(f"{path}: not a readable video ({exc.strerror})") from None


def _describe(path: Path, container: av.container.InputContainer) -> _Stream:
    if not container.streams.video:
        raise VideoDecodeError(f"{path}: no video stream")
    stream = container.streams.video[0]
    rate = stream.average_rate or stream.guessed_rate
    if not rate:
        raise VideoDecodeError(f"{path}: video stream has no frame rate")
    if stream.duration is not None and stream.time_base is not None:
        declared_s: float | None = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        declared_s = container.duration / av.time_base
    else:
        declared_s = None
    time_base = Fraction(stream.time_base) if stream.time_base else None
    return _Stream(Fraction(rate), time_base, declared_s)


def _indexed_frames(
    path: Path, container: av.container.InputContainer, info: _Stream
) -> Iterator[tuple[int, av.VideoFrame]]:
    """Every decoded frame with its source index, computed from its pts (origin: first frame)."""
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    origin: int | None = None
    index = -1
    try:
        for frame in container.decode(stream):
            if frame.pts is None or info.time_base is None:
                index += 1
            else:
                if origin is None:
                    origin = frame.pts
                index = math.floor(
                    (frame.pts - origin) * info.time_base * info.rate + Fraction(1, 2)
                )
            yield index, frame
    except av.FFmpegError as exc:
        at_s = max(index, 0) / info.rate
        raise VideoDecodeError(
            f"{path}: corrupt video data near {float(at_s):.2f}s ({exc.strerror})"
        ) from None


def source_index(t: float, source_fps: float) -> int:
    """The source frame a sample at time t shows (before clamping to the last frame)."""
    return math.floor(t * source_fps + 0.5)


# ----------------------------------------------------------------------------- encoding


class _JpegWriter:
    """Resizes, encodes and writes one sample at a time into a folder."""

    def __init__(self, folder: Path, rules: ImageRules, digest: str) -> None:
        self.folder = folder
        self.rules = rules
        self.id_prefix = digest[:16]
        # One scaler for the whole video: its context is reused instead of rebuilt per frame.
        self.scaler = VideoReformatter()

    def write(self, k: int, t: float, source: int, frame: av.VideoFrame) -> FrameRef:
        width, height = capped_size(frame.width, frame.height, self.rules.max_width)
        rgb = self.scaler.reformat(
            frame, width=width, height=height, format="rgb24", interpolation=RESIZE_INTERPOLATION
        )
        plane = rgb.planes[0]
        image = Image.frombuffer("RGB", (width, height), plane, "raw", "RGB", plane.line_size, 1)
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=self.rules.jpeg_quality)
        data = buffer.getvalue()
        (self.folder / _jpeg_name(k)).write_bytes(data)
        return FrameRef(k, source, t, f"{self.id_prefix}:{source}", width, height, len(data))


def capped_size(width: int, height: int, max_width: int) -> tuple[int, int]:
    """The output size: width capped at max_width, aspect kept, never upscaled."""
    if width <= max_width:
        return width, height
    return max_width, max(1, round(height * max_width / width))


# ----------------------------------------------------------------------------- sampling


def _sample_video(
    path: Path, digest: str, rules: ImageRules, folder: Path
) -> tuple[float, float, list[FrameRef]]:
    """Decode the video once, writing every sample's JPEG; returns (duration, fps, frames)."""
    writer = _JpegWriter(folder, rules, digest)
    refs: list[FrameRef] = []
    with _open(path) as container:
        info = _describe(path, container)
        source_fps = float(info.rate)
        last: tuple[int, av.VideoFrame] | None = None
        target = source_index(0.0, source_fps)
        for index, frame in _indexed_frames(path, container, info):
            last = (index, frame)
            # Frames come in presentation order; a frame at or past the target serves it.
            while target <= index:
                k = len(refs)
                refs.append(writer.write(k, k / rules.fps, index, frame))
                target = source_index((k + 1) / rules.fps, source_fps)
        if last is None:
            raise VideoDecodeError(f"{path}: video stream has no decodable frames")
        last_index, last_frame = last
        duration_s = (last_index + 1) / source_fps
        _check_not_truncated(path, duration_s, info.declared_s)
        # Samples in the last half frame round past the end: they show the last frame.
        while len(refs) / rules.fps < duration_s:
            k = len(refs)
            refs.append(writer.write(k, k / rules.fps, last_index, last_frame))
    return duration_s, source_fps, refs


def _check_not_truncated(path: Path, decoded_s: float, declared_s: float | None) -> None:
    if declared_s is None:
        return
    margin = max(TRUNCATION_MARGIN_S, TRUNCATION_MARGIN_FRACTION * declared_s)
    if decoded_s < declared_s - margin:
        raise VideoDecodeError(
            f"{path}: truncated video: decoded {decoded_s:.2f}s of the {declared_s:.2f}s "
            "its header declares"
        )


# ----------------------------------------------------------------------------- cache entries


def _entry_dir(root: Path, digest: str, rules: ImageRules) -> Path:
    return root / digest[:2] / f"{digest}-{rules.key()}"


def _load_entry(folder: Path, digest: str, rules: ImageRules) -> VideoFrames | None:
    """The entry's frames, or None when it is missing, half-written or from another format."""
    try:
        index = json.loads((folder / INDEX_NAME).read_text())
        if (
            index["format"] != INDEX_FORMAT
            or index["video_digest"] != digest
            or index["rules"] != rules.key()
        ):
            return None
        frames = tuple(FrameRef(**ref) for ref in index["frames"])
        return VideoFrames(digest, index["duration_s"], index["source_fps"], rules, frames, folder)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_index(folder: Path, frames: VideoFrames) -> None:
    index = {
        "format": INDEX_FORMAT,
        "video_digest": frames.video_digest,
        "rules": frames.rules.key(),
        "duration_s": frames.duration_s,
        "source_fps": frames.source_fps,
        "frames": [asdict(ref) for ref in frames.frames],
    }
    (folder / INDEX_NAME).write_text(json.dumps(index, separators=(",", ":")))


def _remove_stale_partials(final: Path) -> None:
    cutoff = time.time() - STALE_PARTIAL_S
    for partial in final.parent.glob(f"{final.name}.partial-*"):
        if partial.stat().st_mtime < cutoff:
            shutil.rmtree(partial, ignore_errors=True)


def _build_entry(path: Path, digest: str, rules: ImageRules, final: Path) -> VideoFrames:
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(final)
    partial = final.with_name(f"{final.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    partial.mkdir()
    try:
        started = time.perf_counter()
        duration_s, source_fps, refs = _sample_video(path, digest, rules, partial)
        built = VideoFrames(digest, duration_s, source_fps, rules, tuple(refs), final)
        _write_index(partial, built)
        _publish(partial, final, digest, rules)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info(
        "sampled %s: %d frames from %.1fs of video in %.1fs",
        path,
        len(refs),
        duration_s,
        time.perf_counter() - started,
    )
    # Whichever process published first, the entry holds these same frames: same video
    # bytes, same rules, same format.
    return built


def _publish(partial: Path, final: Path, digest: str, rules: ImageRules) -> None:
    """Move a finished entry into place; if another process got there first, keep theirs."""
    if final.exists() and _load_entry(final, digest, rules) is None:
        # Half-written by a killed process, unreadable, or from an older format.
        shutil.rmtree(final, ignore_errors=True)
    try:
        partial.rename(final)
    except OSError:
        if _load_entry(final, digest, rules) is None:
            raise
        shutil.rmtree(partial, ignore_errors=True)


# ----------------------------------------------------------------------------- the cache


class FrameCache:
    """Sampled frames of every video, on disk under `root`, decoded at most once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._loaded: dict[str, VideoFrames] = {}
        self._guard = threading.Lock()
        self._build_locks: dict[str, threading.Lock] = {}
        self._async_locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    def get(self, video_path: Path, rules: ImageRules) -> VideoFrames:
        """The video's samples under these rules, decoding the video if no entry exists."""
        video_path = Path(video_path)
        digest = video_digest(video_path)
        final = _entry_dir(self.root, digest, rules)
        key = final.name
        with self._build_lock(key):
            frames = self._loaded.get(key) or _load_entry(final, digest, rules)
            if frames is None:
                frames = _build_entry(video_path, digest, rules, final)
            self._loaded[key] = frames
            return frames

    async def aget(self, video_path: Path, rules: ImageRules) -> VideoFrames:
        """`get` off the event loop; concurrent calls for one video wait for one decode."""
        key = (str(Path(video_path).resolve()), rules.key())
        lock, users = self._async_locks.get(key, (asyncio.Lock(), 0))
        self._async_locks[key] = (lock, users + 1)
        try:
            async with lock:
                return await asyncio.to_thread(self.get, video_path, rules)
        finally:
            # Drop the lock with its last user: the map stays small and no lock outlives
            # the event loop it was used on.
            lock, users = self._async_locks[key]
            if users == 1:
                del self._async_locks[key]
            else:
                self._async_locks[key] = (lock, users - 1)

    def _build_lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._build_locks.setdefault(key, threading.Lock())
