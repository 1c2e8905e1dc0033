"""The frame pipeline: decode what a video's samples need once, cache JPEGs on disk.

Sample k sits at video time t = k / fps (time 0 is the first frame). Which source frame it
shows depends on the stream, as `probe` classifies it:

- constant frame rate (the usual case): source frame floor(t * source_fps + 0.5), the rule
  of the spec, with the frame number read from each frame's timestamp;
- variable frame rate (timestamp gaps that differ from the nominal frame period by more than
  a muxer's rounding): the last frame whose presentation time is <= t, i.e. the frame a
  player shows at t. Its source index is its position in presentation order.

Decoding follows a plan made from the packets alone, read without decoding (timestamps and
keyframe flags): the timestamps tell which frame each sample shows, so the decoder is fed
only the keyframe intervals (GOPs) holding a shown frame, each from its keyframe up to the
packet of its last shown frame, then drained (decoding order puts a frame's references
before it). GOPs without a sample and the tail of a GOP after its last sample are skipped
(the demuxer reads past them; the decoder never sees them); the last GOP is always decoded
to the end, as its last frame gives the duration. A frame shown before its GOP's keyframe
(an open GOP's leading frame, which references the GOP before) is decoded on from the
previous GOP. Every frame out of the decoder is checked against the plan (timestamps in
presentation order, none missing); on any difference, or a stream the plan cannot describe
(packets without timestamps, discarded or duplicate ones), every frame is decoded instead,
which gives the same samples. Seeking anew for each sample would decode each GOP again and
again (bench/bench_frame_sampling.py compares the approaches).

Frames are delivered upright: a display matrix (or a legacy `rotate` tag) turning the picture
by 90, 180 or 270 degrees is applied, and the width cap applies to the upright picture. Each
sample is resized inside PyAV's pixel-format conversion (cheaper than a Pillow resize),
turned, JPEG-encoded with Pillow and written to disk straight away, so memory stays flat
whatever the video's length.

Cache layout (content-addressed, shared by every run on the machine):

    root/<digest[:2]>/<digest>-<rules key>/000000.jpg ... index.json
    root/video-digests/<key>.json   (key: sha256 of the video's absolute path)

The digest is the sha256 of the video's bytes. Hashing a long video takes a while, so each
digest is remembered with the file's identity (path, device, inode, size, modification and
change times): a later lookup, in any process, that finds the same identity reuses it without
reading the video. A file changed or replaced since changes its identity (its change time at
least, which no program can set back) and is hashed again; a digest is only remembered once
the file has not changed for DIGEST_SETTLED_NS, so two changes within one tick of the file
system's clock cannot hide each other. `FrameCache(root, verify=True)` ignores the on-disk
memo and hashes each video in full once per process.

An entry is built in a private `.partial-*` folder with index.json written last, then
published by one atomic rename; an entry folder without a valid index.json (left by a killed
process) is ignored and rebuilt.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Literal

import av
from av.video.reformatter import VideoReformatter
from PIL import Image

from streameval.core.errors import CoreError
from streameval.events import FailureCause

log = logging.getLogger(__name__)

INDEX_NAME = "index.json"
# Bumped whenever the sampling or encoding changes, so older cache entries are rebuilt.
INDEX_FORMAT = 2
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
# An entry being built reports how far it is at most this often (FrameCache.get's on_progress).
PROGRESS_INTERVAL_S = 0.25
# AREA averages the source pixels under each output pixel: the right filter for downscaling.
RESIZE_INTERPOLATION = "AREA"
# A muxer rounds every timestamp to its time base on its own, so two frames of a constant-rate
# stream may lie up to one tick closer or further apart than the nominal frame period
# (29.97 fps in Matroska's milliseconds: gaps of 33 and 34).
ROUNDING_TICKS = 1
# Pillow's ROTATE_n turns counter-clockwise; keyed here by the clockwise turn it makes.
_CLOCKWISE = {
    90: Image.Transpose.ROTATE_270,
    180: Image.Transpose.ROTATE_180,
    270: Image.Transpose.ROTATE_90,
}


class FramesError(CoreError):
    """A record's frames cannot be produced or read: its session fails at stage `frames`.

    `cause` is the `session_failed` cause: `input` when the video itself is unusable (a
    rerun would fail again), `infrastructure` when the Core's own frame cache failed (a full
    disk, a deleted cache file: a rerun after fixing the machine succeeds). Never `adapter`:
    the adapter had no part in it. The message is one line.
    """

    cause: FailureCause = FailureCause.INPUT


class VideoDecodeError(FramesError):
    """A video cannot be used: missing, unreadable (a symlink loop included), corrupt,
    truncated or without video.

    The message is one line, "<path>: <what is wrong>".
    """


class FrameCacheError(FramesError):
    """The frame cache cannot be written or read back: "frame cache <path>: <what failed>"
    (out of disk space, a file size limit, a read-only or deleted cache folder)."""

    cause = FailureCause.INFRASTRUCTURE


class ImageRulesError(CoreError, ValueError):
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


DurationSource = Literal["stream", "container", "packets", "decoded"]


@dataclass(frozen=True)
class VideoInfo:
    """A video file as `probe` reads it, without decoding it in full."""

    duration_s: float
    # Where duration_s comes from: the video stream's metadata, else the container's; without
    # either, the packet timestamps; without those (raw streams), counting decoded frames.
    duration_source: DurationSource
    source_fps: float  # the nominal rate; frames / duration_s at a variable frame rate
    width: int  # of the upright picture, after rotation
    height: int
    rotation: int  # clockwise degrees (0, 90, 180, 270) that turn the coded picture upright
    variable_frame_rate: bool
    codec: str  # FFmpeg's decoder name: "h264", "hevc", "vp9", ...
    container: str  # FFmpeg's demuxer name: "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", ...


@dataclass(frozen=True)
class FrameRef:
    index: int  # sample index k (t = k / fps)
    source_index: int  # the source frame shown (see the module docstring)
    t: float  # video time in seconds, = k / fps
    frame_id: str  # stable id: f"{video_digest[:16]}:{source_index}"
    width: int
    height: int
    nbytes: int


@dataclass(frozen=True)
class VideoFrames:
    """The samples of one video under one set of rules; the JPEGs stay on disk."""

    video_digest: str
    duration_s: float  # as decoded: the end of the last frame
    source_fps: float
    rules: ImageRules
    frames: tuple[FrameRef, ...]  # all samples with k / fps < duration_s
    directory: Path
    info: VideoInfo  # what `probe` read from the file

    def between(self, start_s: float, end_s: float) -> list[FrameRef]:
        """The samples with start_s <= t <= end_s, in time order."""
        lo = bisect_left(self.frames, start_s - TIME_EPSILON_S, key=_time_of)
        hi = bisect_right(self.frames, end_s + TIME_EPSILON_S, key=_time_of)
        return list(self.frames[lo:hi])

    def path(self, ref: FrameRef) -> Path:
        """Where the JPEG of one sample lies (for consumers that hand on paths, not bytes)."""
        return self.directory / _jpeg_name(ref.index)

    def read(self, ref: FrameRef) -> bytes:
        """The JPEG bytes of one sample, read from disk; FrameCacheError when the cache lost
        it (deleted under a running Core, an I/O error). Reading never writes: a read-only
        results API reads through here too."""
        if not (0 <= ref.index < len(self.frames) and self.frames[ref.index] == ref):
            raise ValueError(
                f"frame {ref.frame_id} (sample {ref.index}) is not in {self.directory}"
            )
        path = self.directory / _jpeg_name(ref.index)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise FrameCacheError(
                f"frame cache {self.directory}: cannot read sample {ref.index} ({_strerror(exc)})"
            ) from None

    def discard(self) -> None:
        """Mark this entry broken (its index.json removed) after a failed `read`, so that the
        next `FrameCache.get` rebuilds it instead of failing every later session on it. Only
        the Core, which owns the cache, calls this."""
        with contextlib.suppress(OSError):
            (self.directory / INDEX_NAME).unlink()


def _time_of(ref: FrameRef) -> float:
    return ref.t


def _jpeg_name(index: int) -> str:
    return f"{index:06d}.jpg"


def _strerror(exc: OSError) -> str:
    # strerror alone ("No space left on device"): the path is named by the caller once.
    return exc.strerror or str(exc)


@contextlib.contextmanager
def _cache_io(folder: Path, what: str) -> Iterator[None]:
    """Turns an OSError of the cache's own files (ENOSPC, EFBIG past RLIMIT_FSIZE, EROFS,
    EACCES) into one FrameCacheError line; errors reading the video are not wrapped here."""
    try:
        yield
    except OSError as exc:
        raise FrameCacheError(f"frame cache {folder}: cannot {what} ({_strerror(exc)})") from None


# ----------------------------------------------------------------------------- digests

DIGEST_MEMO_DIR = "video-digests"
# File systems stamp changes with a coarse clock (a few milliseconds on Linux, 2 s on FAT):
# a file changed twice within one tick keeps its timestamps. A digest is remembered only for
# a file whose last change is older than this when hashing starts, as git does for its index.
DIGEST_SETTLED_NS = 2_000_000_000
_HEX_DIGITS = frozenset("0123456789abcdef")

_digest_lock = threading.Lock()


@dataclass(frozen=True)
class FileIdentity:
    """What tells one version of a file from another without reading it."""

    path: str  # absolute, not resolved: `resolve` raises RuntimeError on a symlink loop
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int  # set by the kernel on every change: no program can set it back

    @classmethod
    def of(cls, path: Path, stat: os.stat_result) -> FileIdentity:
        return cls(
            os.path.abspath(path),
            stat.st_dev,
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
            stat.st_ctime_ns,
        )

    def settled(self, at_ns: int) -> bool:
        """Whether any change after `at_ns` is sure to change this identity."""
        return max(self.mtime_ns, self.ctime_ns) < at_ns - DIGEST_SETTLED_NS


class DigestMemo:
    """Video digests remembered on disk, one small JSON file per video path, so that a new
    process finds a video's digest without reading the video. `read=False` never trusts it
    (the verifying mode); `write=False` never writes it (readers of a read-only cache)."""

    def __init__(self, folder: Path, *, read: bool = True, write: bool = True) -> None:
        self.folder = Path(folder)
        self.read = read
        self.write = write

    def get(self, identity: FileIdentity) -> str | None:
        if not self.read:
            return None
        try:
            record = json.loads(self._file(identity).read_text())
            digest = record["sha256"]
            if record["file"] != asdict(identity) or not _is_sha256(digest):
                return None
            return digest
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, identity: FileIdentity, digest: str) -> None:
        """Remember a digest; a memo that cannot be written only costs a later hash."""
        if not self.write:
            return
        target = self._file(identity)
        temporary = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
        record = json.dumps({"file": asdict(identity), "sha256": digest})
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(record)
            # Readers see the old record or the new one, never half of one.
            temporary.replace(target)
        except OSError as exc:
            log.debug("cannot remember the digest of %s: %s", identity.path, _strerror(exc))
            with contextlib.suppress(OSError):
                temporary.unlink()

    def _file(self, identity: FileIdentity) -> Path:
        # One flat folder: nothing in it looks like the <digest[:2]>/<entry> folders.
        key = hashlib.sha256(os.fsencode(identity.path)).hexdigest()
        return self.folder / f"{key}.json"


# Digests found in this process, by file identity: each file version is hashed once.
_digests: dict[FileIdentity, str] = {}


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX_DIGITS


def _stat(path: Path) -> os.stat_result:
    """The file's status, after checking that it is a readable regular file."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise VideoDecodeError(f"{path}: video file not found") from None
    except OSError as exc:
        raise VideoDecodeError(f"{path}: cannot read video file ({exc.strerror})") from None
    if not path.is_file():
        raise VideoDecodeError(f"{path}: not a regular file")
    return stat


def file_sha256(path: Path) -> str:
    """sha256 of the file's bytes, read in full."""
    try:
        with Path(path).open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as exc:
        raise VideoDecodeError(f"{path}: cannot read video file ({_strerror(exc)})") from None


def video_digest(path: Path, memo: DigestMemo | None = None) -> str:
    """sha256 of the file's bytes, hashed once per version of the file (see FileIdentity):
    remembered in this process and, with `memo`, on disk for other processes."""
    path = Path(path)
    identity = FileIdentity.of(path, _stat(path))
    # One lock for all files: concurrent sessions on one video then hash it only once.
    with _digest_lock:
        digest = _digests.get(identity) or (memo.get(identity) if memo else None)
        if digest is None:
            started_ns = time.time_ns()
            digest = file_sha256(path)
            if not identity.settled(started_ns):
                return digest  # changed too recently to vouch for: hashed again next time
            if memo is not None:
                memo.put(identity, digest)
        _digests[identity] = digest
        return digest


# ----------------------------------------------------------------------------- probing


def probe(path: Path) -> VideoInfo:
    """What a video is, read from its metadata, its frame timestamps and its first frame.

    Only the first frame is decoded (it proves the file decodes and carries the rotation),
    unless the stream has neither a declared duration nor timestamps: then its frames are
    counted. The timestamps come from the container's index where it lists every frame (mp4,
    mov: nothing more is read), otherwise from reading every packet without decoding it.
    """
    path = Path(path)
    _stat(path)
    with _open(path) as container:
        stream = _video_stream(path, container)
        rate = _nominal_rate(path, stream)
        time_base = _time_base(stream)
        stamps, first = _timestamps_and_first_frame(path, container, stream)
        declared = _declared_duration(stream, container)
        rotation = _rotation(first, stream)
        codec, format_name = stream.codec_context.name, container.format.name
    if declared is not None:
        duration_s, source = declared
    elif stamps and time_base is not None:
        # The last frame lasts one nominal period.
        duration_s, source = float((max(stamps) - min(stamps)) * time_base + 1 / rate), "packets"
    else:
        duration_s, source = float(_count_frames(path) / rate), "decoded"
    variable = time_base is not None and _varies(stamps, rate, time_base)
    turned = rotation in (90, 270)
    return VideoInfo(
        duration_s=duration_s,
        duration_source=source,
        source_fps=len(stamps) / duration_s if variable else float(rate),
        width=first.height if turned else first.width,
        height=first.width if turned else first.height,
        rotation=rotation,
        variable_frame_rate=variable,
        codec=codec,
        container=format_name,
    )


def _open(path: Path) -> av.container.InputContainer:
    try:
        return av.open(str(path))
    except av.FFmpegError as exc:
        # FFmpeg's own wording ("Invalid data found when processing input"), as its tools say it.
        raise VideoDecodeError(f"{path}: {exc.strerror}") from None


def _video_stream(path: Path, container: av.container.InputContainer) -> av.VideoStream:
    if not container.streams.video:
        raise VideoDecodeError(f"{path}: no video stream")
    return container.streams.video[0]


def _nominal_rate(path: Path, stream: av.VideoStream) -> Fraction:
    # FFmpeg's own guess first: the rate every timestamp fits, or the codec's for a stream
    # without timestamps (whose average rate FFmpeg makes up as 25).
    rate = stream.guessed_rate or stream.average_rate
    if not rate:
        raise VideoDecodeError(f"{path}: video stream has no frame rate")
    return Fraction(rate)


def _time_base(stream: av.VideoStream) -> Fraction | None:
    return Fraction(stream.time_base) if stream.time_base else None


def _declared_duration(
    stream: av.VideoStream, container: av.container.InputContainer
) -> tuple[float, DurationSource] | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base), "stream"
    if container.duration is not None:
        return container.duration / av.time_base, "container"
    return None


def _timestamps_and_first_frame(
    path: Path, container: av.container.InputContainer, stream: av.VideoStream
) -> tuple[list[int], av.VideoFrame]:
    """Every frame's timestamp (in the stream's time base, in any order) and the first frame."""
    entries = stream.index_entries
    # mp4 and mov index every frame (by decoding time) when opened; others index keyframes.
    indexed = 0 < stream.frames == len(entries)
    stamps = [entry.timestamp for entry in entries] if indexed else []
    first: av.VideoFrame | None = None
    try:
        for packet in container.demux(stream):
            if first is None:
                first = next(iter(packet.decode()), None)
            if not indexed:
                if packet.pts is not None:
                    stamps.append(packet.pts)
            elif first is not None:
                break
    except av.FFmpegError as exc:
        raise VideoDecodeError(f"{path}: corrupt video data ({exc.strerror})") from None
    if first is None:
        raise VideoDecodeError(f"{path}: video stream has no decodable frames")
    return stamps, first


def _varies(stamps: list[int], rate: Fraction, time_base: Fraction) -> bool:
    """Whether the gaps between frames stray from the nominal period by more than rounding
    (a variable frame rate, or dropped frames)."""
    period = 1 / (rate * time_base)  # in ticks
    return any(abs(b - a - period) > ROUNDING_TICKS for a, b in pairwise(sorted(stamps)))


def _rotation(first: av.VideoFrame, stream: av.VideoStream) -> int:
    """Clockwise degrees (0, 90, 180, 270) that turn the coded picture upright.

    FFmpeg's decoder copies the stream's display matrix onto every frame, where
    `VideoFrame.rotation` reads it as a counter-clockwise angle: FFmpeg's command line shows
    a frame of rotation -90 turned a quarter clockwise. Old muxers wrote a `rotate` tag in
    clockwise degrees instead. Other angles are rounded to the nearest quarter turn; a
    matrix's mirroring is not applied.
    """
    tags = {key.lower(): value for key, value in stream.metadata.items()}
    try:
        clockwise = -first.rotation if first.rotation else float(tags.get("rotate", 0))
    except ValueError:  # a `rotate` tag that is not a number turns nothing, as in players
        clockwise = 0
    return round(clockwise / 90) % 4 * 90


def _count_frames(path: Path) -> int:
    with _open(path) as container:
        return sum(1 for _ in _decoded(path, container))


# ----------------------------------------------------------------------------- decoding


def _decoded(path: Path, container: av.container.InputContainer) -> Iterator[av.VideoFrame]:
    """Every frame of the video stream in presentation order, decoded on all cores."""
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    at_s = 0.0
    try:
        for frame in container.decode(stream):
            at_s = frame.time if frame.time is not None else at_s
            yield frame
    except av.FFmpegError as exc:
        raise VideoDecodeError(
            f"{path}: corrupt video data near {at_s:.2f}s ({exc.strerror})"
        ) from None


Position = int | Fraction


@dataclass(frozen=True)
class _Placed:
    source_index: int
    position: Position  # where the frame starts on the axis samples are placed on
    frame: av.VideoFrame


@dataclass(frozen=True)
class _Timing:
    """Places frames and samples on one axis; a sample shows the last frame placed at or
    before it. Constant rate: the axis counts source frames (a frame at its number, a sample
    at floor(t * source_fps + 0.5)). Variable rate: the axis is time since the first frame."""

    variable: bool
    rate: Fraction
    time_base: Fraction | None

    def place(self, frames: Iterable[av.VideoFrame]) -> Iterator[_Placed]:
        origin: int | None = None
        elapsed = -1 / self.rate
        for ordinal, frame in enumerate(frames):
            if frame.pts is None or self.time_base is None:
                # No timestamp (raw streams): the frame follows the last by a nominal period.
                elapsed += 1 / self.rate
            else:
                origin = frame.pts if origin is None else origin
                elapsed = (frame.pts - origin) * self.time_base
            yield _Placed(*self.locate(ordinal, elapsed), frame)

    def locate(self, ordinal: int, elapsed: Fraction) -> tuple[int, Position]:
        """(source index, position) of the frame `ordinal` in presentation order, which
        starts `elapsed` seconds after the first frame."""
        if self.variable:
            return ordinal, elapsed
        number = math.floor(elapsed * self.rate + Fraction(1, 2))
        return number, number

    def sample_at(self, k: int, fps: float) -> Position:
        """Where sample k (at t = k / fps) lies on the axis."""
        if self.variable:
            return Fraction(k) / Fraction(fps)
        return source_index(k / fps, float(self.rate))

    def end_s(self, last: _Placed) -> float:
        """The video's duration: where its last frame ends."""
        if not self.variable:
            return (last.source_index + 1) / float(self.rate)
        lasts = last.frame.duration * self.time_base if last.frame.duration else 1 / self.rate
        return float(last.position + lasts)


def source_index(t: float, source_fps: float) -> int:
    """The source frame a sample at time t shows at a constant rate (before clamping to the
    last frame)."""
    return math.floor(t * source_fps + 0.5)


def _timing(path: Path, info: VideoInfo, stream: av.VideoStream) -> _Timing:
    return _Timing(info.variable_frame_rate, _nominal_rate(path, stream), _time_base(stream))


# ----------------------------------------------------------------------------- encoding


# Told (seconds of video sampled so far, the video's duration) while an entry is built.
DecodeProgress = Callable[[float, float], None]


class _ProgressTicker:
    """Passes on how far sampling is, at most every PROGRESS_INTERVAL_S: a clock read per
    sample written (next to a JPEG encode, nothing), none per frame decoded."""

    def __init__(self, on_progress: DecodeProgress, duration_s: float) -> None:
        self.on_progress = on_progress
        self.duration_s = duration_s
        self.next_at = time.monotonic() + PROGRESS_INTERVAL_S

    def sampled(self, t: float) -> None:
        now = time.monotonic()
        if now >= self.next_at:
            self.next_at = now + PROGRESS_INTERVAL_S
            self.on_progress(min(t, self.duration_s), self.duration_s)


class _JpegWriter:
    """Resizes, turns upright, encodes and writes one sample at a time into a folder."""

    def __init__(
        self,
        folder: Path,
        rules: ImageRules,
        digest: str,
        rotation: int,
        ticker: _ProgressTicker | None = None,
    ) -> None:
        self.folder = folder
        self.rules = rules
        self.id_prefix = digest[:16]
        self.rotation = rotation
        # One scaler for the whole video: its context is reused instead of rebuilt per frame.
        self.scaler = VideoReformatter()
        self.ticker = ticker

    def write(self, k: int, placed: _Placed) -> FrameRef:
        frame = placed.frame
        turned = self.rotation in (90, 270)
        upright = (frame.height, frame.width) if turned else (frame.width, frame.height)
        width, height = capped_size(*upright, self.rules.max_width)
        # Scale in the coded orientation, then turn the already small picture.
        coded = (height, width) if turned else (width, height)
        rgb = self.scaler.reformat(
            frame,
            width=coded[0],
            height=coded[1],
            format="rgb24",
            interpolation=RESIZE_INTERPOLATION,
        )
        plane = rgb.planes[0]
        image = Image.frombuffer("RGB", coded, plane, "raw", "RGB", plane.line_size, 1)
        if self.rotation:
            image = image.transpose(_CLOCKWISE[self.rotation])
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=self.rules.jpeg_quality)
        data = buffer.getvalue()
        # Named by the entry's parent: the private `.partial-*` folder is gone by then.
        with _cache_io(self.folder.parent, f"write sample {k}"):
            (self.folder / _jpeg_name(k)).write_bytes(data)
        source = placed.source_index
        t = k / self.rules.fps
        if self.ticker is not None:
            self.ticker.sampled(t)
        return FrameRef(k, source, t, f"{self.id_prefix}:{source}", width, height, len(data))


def capped_size(width: int, height: int, max_width: int) -> tuple[int, int]:
    """The output size: width capped at max_width, aspect kept, never upscaled."""
    if width <= max_width:
        return width, height
    return max_width, max(1, round(height * max_width / width))


# ----------------------------------------------------------------------------- planning


class _PlanMismatch(Exception):
    """The demuxer or decoder did not give what the plan was made from: every frame is
    decoded instead."""


@dataclass
class DecodeStats:
    """What building one entry decoded (tests and benchmarks read it)."""

    packets_decoded: int = 0  # packets sent to the decoder (= frames, when decoding all)
    planned: bool = False  # decoded to a plan; False: every frame decoded


@dataclass(frozen=True)
class _Packets:
    """The video stream's packets in decoding order, as read without decoding them."""

    pts: list[int]
    keyframes: list[int]  # indices of the keyframe packets, where each GOP starts


@dataclass
class _Run:
    """Packets `first` to `last` (a keyframe, then on through one or more GOPs) fed to the
    decoder in one go, then drained: every frame fed comes out, in presentation order.
    Mutable: `came_out` counts the frames checked so far."""

    first: int
    last: int
    # A run that begins with a jump to a keyframe cannot trust the frames shown before the
    # keyframe (an open GOP's leading frames, which reference the GOP before): it ignores
    # them. None for the run that begins the stream, which decodes as decoding all does.
    accept_from: int | None
    expected: list[int]  # timestamps of the frames to come out, in order
    wanted: set[int]  # ranks (places in presentation order) to deliver
    came_out: int = 0


@dataclass(frozen=True)
class _Plan:
    pts: list[int]  # of the packets, in decoding order
    ranks: dict[int, int]  # timestamp -> place in presentation order
    placements: list[tuple[int, Position]]  # by rank: (source index, position)
    shown_by: dict[int, list[int]]  # rank -> the samples showing it (those before the last)
    n_samples: int  # samples placed before the last frame; the rest show the last frame
    runs: list[_Run]
    last_rank: int


def _scan_packets(
    container: av.container.InputContainer, stream: av.VideoStream
) -> _Packets | None:
    """Every packet's timestamp and keyframe flag, without decoding; None when the packets
    cannot be planned on (one without a timestamp, a discarded or empty one, two with one
    timestamp, a stream that does not begin with a keyframe, a demuxing error)."""
    pts: list[int] = []
    keyframes: list[int] = []
    ended = False
    try:
        for packet in container.demux(stream):
            if ended:
                return None
            if packet.size == 0:
                ended = True  # the empty packet PyAV adds after the last one
                continue
            if packet.pts is None or packet.is_discard:
                return None
            if packet.is_keyframe:
                keyframes.append(len(pts))
            pts.append(packet.pts)
    except av.FFmpegError:
        return None  # the decode-all path reports it in its own words
    if not keyframes or keyframes[0] != 0 or len(set(pts)) != len(pts):
        return None
    return _Packets(pts, keyframes)


def _make_plan(packets: _Packets, timing: _Timing, fps: float) -> _Plan:
    assert timing.time_base is not None  # packets with timestamps have a time base
    in_order = sorted(packets.pts)
    origin = in_order[0]
    placements = [
        timing.locate(rank, (pts - origin) * timing.time_base) for rank, pts in enumerate(in_order)
    ]
    shows = _shown_frames([position for _, position in placements], timing, fps)
    shown_by: dict[int, list[int]] = {}
    for k, rank in enumerate(shows):
        shown_by.setdefault(rank, []).append(k)
    ranks = {pts: rank for rank, pts in enumerate(in_order)}
    last = len(in_order) - 1
    runs = _plan_runs(packets, in_order, ranks, {last, *shows})
    return _Plan(packets.pts, ranks, placements, shown_by, len(shows), runs, last)


def _shown_frames(positions: list[Position], timing: _Timing, fps: float) -> list[int]:
    """The rank of the frame each sample placed before the last frame shows: the decode-all
    loop of `_sample_everything`, run on the positions alone."""
    shows: list[int] = []
    for rank in range(1, len(positions)):
        while timing.sample_at(len(shows), fps) < positions[rank]:
            shows.append(rank - 1)
    return shows


def _plan_runs(
    packets: _Packets, in_order: list[int], ranks: dict[int, int], needed: set[int]
) -> list[_Run]:
    """The runs that decode the needed frames: from the keyframe of each GOP holding one up
    to the packet of its last one; a GOP whose needed frame is shown before its keyframe is
    decoded on from the GOP before."""
    keyframes = packets.keyframes
    packet_of = {pts: index for index, pts in enumerate(packets.pts)}
    last_needed: dict[int, int] = {}  # GOP -> the last packet it must decode
    leading: set[int] = set()  # GOPs to be decoded on from the GOP before
    for rank in needed:
        index = packet_of[in_order[rank]]
        gop = bisect_right(keyframes, index) - 1
        last_needed[gop] = max(last_needed.get(gop, index), index)
        if gop > 0 and in_order[rank] < packets.pts[keyframes[gop]]:
            leading.add(gop)
    # The first run starts the stream (its first frame places every other); the last one
    # decodes through the end of the stream, as decoding all does.
    last_needed.setdefault(0, 0)
    last_needed[len(keyframes) - 1] = len(packets.pts) - 1
    for gop in sorted(leading, reverse=True):
        last_needed.setdefault(gop - 1, keyframes[gop - 1])
    spans: list[list[int]] = []  # [first packet, last packet] of each run
    for gop in sorted(last_needed):
        if gop in leading:  # the GOP before ends the last span
            spans[-1][1] = last_needed[gop]
        else:
            spans.append([keyframes[gop], last_needed[gop]])
    return [_run(packets, ranks, needed, first, last) for first, last in spans]


def _run(packets: _Packets, ranks: dict[int, int], needed: set[int], first: int, last: int) -> _Run:
    accept_from = None if first == 0 else packets.pts[first]
    fed = packets.pts[first : last + 1]
    expected = sorted(pts for pts in fed if accept_from is None or pts >= accept_from)
    wanted = {ranks[pts] for pts in expected} & needed
    return _Run(first, last, accept_from, expected, wanted)


Deliver = Callable[[int, av.VideoFrame], None]


def _decode_to_plan(
    container: av.container.InputContainer,
    stream: av.VideoStream,
    plan: _Plan,
    deliver: Deliver,
    stats: DecodeStats,
) -> None:
    """Feed the decoder the planned packets only, delivering each wanted frame (by rank) as
    it comes out; _PlanMismatch when anything differs from the plan."""
    stream.thread_type = "AUTO"
    codec = stream.codec_context
    runs = iter(plan.runs)
    following, current = next(runs, None), None
    n_packets = 0
    for index, packet in enumerate(_demuxed(container, stream)):
        n_packets = index + 1
        if index >= len(plan.pts) or packet.pts != plan.pts[index]:
            raise _PlanMismatch(f"packet {index} differs from the first read")
        if following is not None and index == following.first:
            current, following = following, next(runs, None)
        if current is None:
            continue
        stats.packets_decoded += 1
        _take(_decode(codec, packet), current, plan, deliver)
        if index == current.last:
            # Draining brings out the frames in flight without feeding the rest of the GOP.
            _take(_decode(codec, None), current, plan, deliver)
            codec.flush_buffers()  # ready for packets again after the drain
            if current.came_out != len(current.expected):
                raise _PlanMismatch(
                    f"{current.came_out} frames of {len(current.expected)} came out"
                )
            current = None
    if n_packets != len(plan.pts) or current is not None or following is not None:
        raise _PlanMismatch(f"{n_packets} packets where the first read found {len(plan.pts)}")


def _demuxed(container: av.container.InputContainer, stream: av.VideoStream) -> Iterator[av.Packet]:
    try:
        for packet in container.demux(stream):
            if packet.size:  # not the empty packet PyAV adds after the last one
                yield packet
    except av.FFmpegError as exc:
        raise _PlanMismatch(f"demuxing failed ({exc.strerror})") from None


def _decode(codec: av.CodecContext, packet: av.Packet | None) -> list[av.VideoFrame]:
    """The frames one packet brings out (None: drain the decoder)."""
    try:
        return codec.decode(packet)
    except av.FFmpegError as exc:
        raise _PlanMismatch(f"decoding failed ({exc.strerror})") from None


def _take(frames: list[av.VideoFrame], run: _Run, plan: _Plan, deliver: Deliver) -> None:
    """Check each frame out of the decoder against the plan and deliver the wanted ones."""
    for frame in frames:
        if frame.pts is None:
            raise _PlanMismatch("a frame came out without a timestamp")
        if run.accept_from is not None and frame.pts < run.accept_from:
            continue
        if run.came_out >= len(run.expected) or frame.pts != run.expected[run.came_out]:
            raise _PlanMismatch(f"the frame at pts {frame.pts} came out out of order")
        run.came_out += 1
        rank = plan.ranks[frame.pts]
        if rank in run.wanted:
            deliver(rank, frame)


# ----------------------------------------------------------------------------- sampling


def _sample_video(
    path: Path,
    digest: str,
    rules: ImageRules,
    folder: Path,
    *,
    decode_all: bool = False,
    stats: DecodeStats | None = None,
    on_progress: DecodeProgress | None = None,
) -> tuple[VideoInfo, float, list[FrameRef]]:
    """Write every sample's JPEG into `folder`, decoding what the samples need (every frame
    with `decode_all`, which gives the same JPEGs); returns (info, duration, frames)."""
    info = probe(path)
    stats = DecodeStats() if stats is None else stats
    ticker = None if on_progress is None else _ProgressTicker(on_progress, info.duration_s)
    writer = _JpegWriter(folder, rules, digest, info.rotation, ticker)
    if not decode_all:
        try:
            sampled = _sample_planned(path, info, rules, writer, stats)
        except _PlanMismatch as exc:
            log.info("%s: %s; decoding every frame", path, exc)
            _remove_samples(folder)
            sampled = None
        if sampled is not None:
            return info, *sampled
    return info, *_sample_everything(path, info, rules, writer, stats)


def _sample_planned(
    path: Path, info: VideoInfo, rules: ImageRules, writer: _JpegWriter, stats: DecodeStats
) -> tuple[float, list[FrameRef]] | None:
    """Sample by decoding only what the plan names; None when the packets allow no plan."""
    with _open(path) as container:
        stream = _video_stream(path, container)
        timing = _timing(path, info, stream)
        packets = None if timing.time_base is None else _scan_packets(container, stream)
    if packets is None:
        return None
    plan = _make_plan(packets, timing, rules.fps)
    refs: dict[int, FrameRef] = {}
    last: list[_Placed] = []

    def deliver(rank: int, frame: av.VideoFrame) -> None:
        placed = _Placed(*plan.placements[rank], frame)
        for k in plan.shown_by.get(rank, ()):
            refs[k] = writer.write(k, placed)
        if rank == plan.last_rank:
            last.append(placed)

    stats.packets_decoded = 0
    with _open(path) as container:
        _decode_to_plan(container, _video_stream(path, container), plan, deliver, stats)
        if len(refs) != plan.n_samples or not last:
            raise _PlanMismatch("a planned frame was not delivered")
        ordered = [refs[k] for k in range(plan.n_samples)]
        duration_s = _finish(path, info, timing, rules, writer, ordered, last[0])
    stats.planned = True
    return duration_s, ordered


def _sample_everything(
    path: Path, info: VideoInfo, rules: ImageRules, writer: _JpegWriter, stats: DecodeStats
) -> tuple[float, list[FrameRef]]:
    """Sample by decoding every frame in presentation order."""
    refs: list[FrameRef] = []
    stats.packets_decoded, stats.planned = 0, False
    with _open(path) as container:
        timing = _timing(path, info, container.streams.video[0])
        shown: _Placed | None = None
        for placed in timing.place(_decoded(path, container)):
            stats.packets_decoded += 1
            # Frames come in presentation order: the one on screen serves every sample
            # placed before the next one.
            while shown is not None and timing.sample_at(len(refs), rules.fps) < placed.position:
                refs.append(writer.write(len(refs), shown))
            shown = placed
        if shown is None:
            raise VideoDecodeError(f"{path}: video stream has no decodable frames")
        duration_s = _finish(path, info, timing, rules, writer, refs, shown)
    return duration_s, refs


def _finish(
    path: Path,
    info: VideoInfo,
    timing: _Timing,
    rules: ImageRules,
    writer: _JpegWriter,
    refs: list[FrameRef],
    last: _Placed,
) -> float:
    """Check the decoded length against the header, then add the samples from the last
    frame on (at a constant rate, also those within its last half frame, which round past
    the end): they show the last frame. Returns the duration."""
    duration_s = timing.end_s(last)
    _check_not_truncated(path, duration_s, info)
    while len(refs) / rules.fps < duration_s:
        refs.append(writer.write(len(refs), last))
    return duration_s


def _remove_samples(folder: Path) -> None:
    for jpeg in folder.glob("*.jpg"):
        with contextlib.suppress(OSError):
            jpeg.unlink()


def _check_not_truncated(path: Path, decoded_s: float, info: VideoInfo) -> None:
    if info.duration_source not in ("stream", "container"):
        return
    declared_s = info.duration_s
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
        # A sample deleted from a published entry would fail sessions one by one; the
        # entry is rebuilt instead.
        if not {_jpeg_name(ref.index) for ref in frames} <= set(os.listdir(folder)):
            return None
        info = VideoInfo(**index["video"])
        return VideoFrames(
            digest, index["duration_s"], index["source_fps"], rules, frames, folder, info
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_index(folder: Path, frames: VideoFrames) -> None:
    index = {
        "format": INDEX_FORMAT,
        "video_digest": frames.video_digest,
        "rules": frames.rules.key(),
        "duration_s": frames.duration_s,
        "source_fps": frames.source_fps,
        "video": asdict(frames.info),
        "frames": [asdict(ref) for ref in frames.frames],
    }
    with _cache_io(folder.parent, "write an index"):
        (folder / INDEX_NAME).write_text(json.dumps(index, separators=(",", ":")))


def _remove_stale_partials(final: Path) -> None:
    cutoff = time.time() - STALE_PARTIAL_S
    for partial in final.parent.glob(f"{final.name}.partial-*"):
        # Another process may remove it between the listing and the stat.
        with contextlib.suppress(OSError):
            if partial.stat().st_mtime < cutoff:
                shutil.rmtree(partial, ignore_errors=True)


def _build_entry(
    path: Path,
    digest: str,
    rules: ImageRules,
    final: Path,
    on_progress: DecodeProgress | None = None,
) -> VideoFrames:
    with _cache_io(final.parent, "create a folder"):
        final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(final)
    partial = final.with_name(f"{final.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with _cache_io(final.parent, "create a folder"):
        partial.mkdir()
    try:
        started = time.perf_counter()
        info, duration_s, refs = _sample_video(
            path, digest, rules, partial, on_progress=on_progress
        )
        built = VideoFrames(digest, duration_s, info.source_fps, rules, tuple(refs), final, info)
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
    except OSError as exc:
        if _load_entry(final, digest, rules) is None:
            raise FrameCacheError(
                f"frame cache {final.parent}: cannot publish an entry ({_strerror(exc)})"
            ) from None
        shutil.rmtree(partial, ignore_errors=True)


# ----------------------------------------------------------------------------- the cache


class FrameCache:
    """Sampled frames of every video, on disk under `root`, decoded at most once."""

    def __init__(self, root: Path, *, verify: bool = False) -> None:
        """`verify`: never take a video's digest from the on-disk memo (see the module
        docstring); hash each video in full, once per process and version of the file."""
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
        return _load_entry(_entry_dir(self.root, digest, rules), digest, rules)

    def has(self, video_path: Path, rules: ImageRules) -> bool:
        """Whether the video's samples under these rules are cached (hashing the video, and
        remembering its digest, if need be); VideoDecodeError for a video that is not there."""
        video_path = Path(video_path)
        digest = video_digest(video_path, self._memo)
        return _load_entry(_entry_dir(self.root, digest, rules), digest, rules) is not None

    def get(
        self, video_path: Path, rules: ImageRules, on_progress: DecodeProgress | None = None
    ) -> VideoFrames:
        """The video's samples under these rules, decoding the video if no entry exists;
        while it decodes, `on_progress` hears how far it is, a few times a second (in the
        decoding thread)."""
        video_path = Path(video_path)
        digest = video_digest(video_path, self._memo)
        final = _entry_dir(self.root, digest, rules)
        key = final.name
        with self._build_lock(key):
            frames = self._loaded.get(key)
            if frames is not None and not (final / INDEX_NAME).exists():
                frames = None  # marked broken by a failed `read`: rebuild it
            frames = frames or _load_entry(final, digest, rules)
            if frames is None:
                frames = _build_entry(video_path, digest, rules, final, on_progress)
            self._loaded[key] = frames
            return frames

    async def aget(
        self, video_path: Path, rules: ImageRules, on_progress: DecodeProgress | None = None
    ) -> VideoFrames:
        """`get` off the event loop; concurrent calls for one video wait for one decode."""
        # abspath, not resolve: resolving a symlink loop raises RuntimeError (Python 3.11);
        # `get` turns the loop into a VideoDecodeError.
        key = (os.path.abspath(video_path), rules.key())
        lock, users = self._async_locks.get(key, (asyncio.Lock(), 0))
        self._async_locks[key] = (lock, users + 1)
        try:
            async with lock:
                return await asyncio.to_thread(self.get, video_path, rules, on_progress)
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
