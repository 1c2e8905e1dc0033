"""The frame pipeline's public types: the image rules samples are taken under, what `probe`
reads of a video (VideoInfo), one sample (FrameRef) and one video's samples, whose JPEGs stay
in their cache entry's folder (VideoFrames, with the names of the entry's files)."""

from __future__ import annotations

import contextlib
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from streameval.core.frames.errors import FrameCacheError, ImageRulesError, strerror_of

# An entry's folder holds one JPEG per sample (`jpeg_name`) and this index, written last.
INDEX_NAME = "index.json"
# Callers compute window bounds with their own float arithmetic; a nanosecond of slack
# keeps a sample at exactly the bound inside.
TIME_EPSILON_S = 1e-9


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

    duration_s: float  # the video stream's own, from its first frame
    # Where duration_s comes from: the video stream's metadata (Matroska: its track's
    # duration tag); without it, the packet timestamps; without those (raw streams), the
    # container's, else counting decoded frames.
    duration_source: DurationSource
    source_fps: float  # the nominal rate; frames / duration_s at a variable frame rate
    width: int  # as displayed: the pixel aspect applied, then turned upright
    height: int
    rotation: int  # clockwise degrees (0, 90, 180, 270) that turn the coded picture upright
    variable_frame_rate: bool
    codec: str  # FFmpeg's decoder name: "h264", "hevc", "vp9", ...
    container: str  # FFmpeg's demuxer name: "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", ...
    sample_aspect_ratio: str = "1:1"  # a coded pixel's width:height ("8:9" on NTSC DVDs)


@dataclass(frozen=True)
class FrameRef:
    index: int  # sample index k (t = k / fps)
    source_index: int  # the source frame shown (see streameval.core.frames.timing)
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
        return self.directory / jpeg_name(ref.index)

    def read(self, ref: FrameRef) -> bytes:
        """The JPEG bytes of one sample, read from disk; FrameCacheError when the cache lost
        it (deleted under a running Core, an I/O error). Reading never writes: a read-only
        results API reads through here too."""
        if not (0 <= ref.index < len(self.frames) and self.frames[ref.index] == ref):
            raise ValueError(
                f"frame {ref.frame_id} (sample {ref.index}) is not in {self.directory}"
            )
        path = self.directory / jpeg_name(ref.index)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise FrameCacheError(
                f"frame cache {self.directory}: cannot read sample {ref.index} ({strerror_of(exc)})"
            ) from None

    def discard(self) -> None:
        """Mark this entry broken (its index.json removed) after a failed `read`, so that the
        next `FrameCache.get` rebuilds it instead of failing every later session on it. Only
        the Core, which owns the cache, calls this."""
        with contextlib.suppress(OSError):
            (self.directory / INDEX_NAME).unlink()


def _time_of(ref: FrameRef) -> float:
    return ref.t


def jpeg_name(index: int) -> str:
    return f"{index:06d}.jpg"
