"""One sample's JPEG, written as soon as its frame is decoded.

Frames are delivered as players show them: at their display size (non-square pixels
stretched or narrowed by the pixel aspect `probe` read) and upright (its rotation applied);
the width cap applies to that picture, which is never enlarged past its display size. Each
sample is resized inside PyAV's pixel-format conversion (cheaper than a Pillow resize),
turned, JPEG-encoded with Pillow and written to disk straight away, so memory stays flat
whatever the video's length. While it writes, the writer tells
how far sampling is (`DecodeProgress`), a few times a second.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from av.video.reformatter import VideoReformatter
from PIL import Image

from streameval.core.frames.errors import cache_io
from streameval.core.frames.probing import display_size
from streameval.core.frames.timing import Placed
from streameval.core.frames.types import FrameRef, ImageRules, VideoInfo, jpeg_name

# An entry being built reports how far it is at most this often (FrameCache.get's on_progress).
PROGRESS_INTERVAL_S = 0.25
# AREA averages the source pixels under each output pixel: the right filter for downscaling.
RESIZE_INTERPOLATION = "AREA"
# Pillow's ROTATE_n turns counter-clockwise; keyed here by the clockwise turn it makes.
_CLOCKWISE = {
    90: Image.Transpose.ROTATE_270,
    180: Image.Transpose.ROTATE_180,
    270: Image.Transpose.ROTATE_90,
}


# Told (seconds of video sampled so far, the video's duration) while an entry is built.
DecodeProgress = Callable[[float, float], None]


class ProgressTicker:
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


class JpegWriter:
    """Resizes to the display size, turns upright, encodes and writes one sample at a time
    into a folder."""

    def __init__(
        self,
        folder: Path,
        rules: ImageRules,
        digest: str,
        info: VideoInfo,
        ticker: ProgressTicker | None = None,
    ) -> None:
        self.folder = folder
        self.rules = rules
        self.id_prefix = digest[:16]
        self.rotation = info.rotation
        self.aspect = Fraction(info.sample_aspect_ratio.replace(":", "/"))
        # One scaler for the whole video: its context is reused instead of rebuilt per frame.
        self.scaler = VideoReformatter()
        self.ticker = ticker

    def write(self, k: int, placed: Placed) -> FrameRef:
        frame = placed.frame
        turned = self.rotation in (90, 270)
        shown = display_size(frame.width, frame.height, self.aspect)
        upright = (shown[1], shown[0]) if turned else shown
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
        with cache_io(self.folder.parent, f"write sample {k}"):
            (self.folder / jpeg_name(k)).write_bytes(data)
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
