"""Which source frame each sample shows.

Sample k sits at video time t = k / fps (time 0 is the first frame). Which source frame it
shows depends on the stream, as `probe` classifies it:

- constant frame rate (the usual case): source frame floor(t * source_fps + 0.5), the rule
  of the spec, with the frame number read from each frame's timestamp: the frame nearest
  to t, which may start up to half a frame period after t. A tie (t exactly halfway between
  two frames) goes to the later frame, and t is first rounded to 9 decimals, in floating
  point, as TRACE's sampler computes it (om-ai-lab/trace-bench, `sample_video`:
  floor(round(start + i / fps, 9) * CAP_PROP_FPS + 0.5)): 5/6 s at 15 fps, 12.5 frame
  periods exactly, is frame 12 there because 0.833333333 s is a little before it;
- variable frame rate (timestamp gaps that differ from the nominal frame period by more than
  a muxer's rounding): the last frame whose presentation time is <= t, i.e. the frame a
  player shows at t. Its source index is its position in presentation order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import av

Position = int | Fraction


@dataclass(frozen=True)
class Placed:
    source_index: int
    position: Position  # where the frame starts on the axis samples are placed on
    frame: av.VideoFrame


@dataclass(frozen=True)
class Timing:
    """Places frames and samples on one axis; a sample shows the last frame placed at or
    before it. Constant rate: the axis counts source frames (a frame at its number, a sample
    at floor(t * source_fps + 0.5)). Variable rate: the axis is time since the first frame."""

    variable: bool
    rate: Fraction
    time_base: Fraction | None

    def place(self, frames: Iterable[av.VideoFrame]) -> Iterator[Placed]:
        origin: int | None = None
        elapsed = -1 / self.rate
        for ordinal, frame in enumerate(frames):
            if frame.pts is None or self.time_base is None:
                # No timestamp (raw streams): the frame follows the last by a nominal period.
                elapsed += 1 / self.rate
            else:
                origin = frame.pts if origin is None else origin
                elapsed = (frame.pts - origin) * self.time_base
            yield Placed(*self.locate(ordinal, elapsed), frame)

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

    def end_s(self, last: Placed) -> float:
        """The video's duration: where its last frame ends."""
        if not self.variable:
            return (last.source_index + 1) / float(self.rate)
        lasts = last.frame.duration * self.time_base if last.frame.duration else 1 / self.rate
        return float(last.position + lasts)


# TRACE's sampler rounds every sample time to this many decimals before choosing its frame.
TIME_DECIMALS = 9


def source_index(t: float, source_fps: float) -> int:
    """The source frame a sample at time t shows at a constant rate (before clamping to the
    last frame), computed as TRACE computes it, ties included."""
    return math.floor(round(t, TIME_DECIMALS) * source_fps + 0.5)
