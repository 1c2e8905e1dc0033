"""What a video is, read from its metadata and packets without decoding it in full
(`probe`), and the opening of a video file and its stream, whose failures are one-line
VideoDecodeErrors.

Its rotation comes from a display matrix (or a legacy `rotate` tag) turning the picture by
90, 180 or 270 degrees; its rate is variable when timestamp gaps differ from the nominal
frame period by more than a muxer's rounding.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import av

from streameval.core.frames.decoding import decoded_frames
from streameval.core.frames.digest import stat_video
from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.types import DurationSource, VideoInfo

# A muxer rounds every timestamp to its time base on its own, so two frames of a constant-rate
# stream may lie up to one tick closer or further apart than the nominal frame period
# (29.97 fps in Matroska's milliseconds: gaps of 33 and 34).
ROUNDING_TICKS = 1


def probe(path: Path) -> VideoInfo:
    """What a video is, read from its metadata, its frame timestamps and its first frame.

    Only the first frame is decoded (it proves the file decodes and carries the rotation),
    unless the stream has neither a declared duration nor timestamps: then its frames are
    counted. The timestamps come from the container's index where it lists every frame (mp4,
    mov: nothing more is read), otherwise from reading every packet without decoding it.
    """
    path = Path(path)
    stat_video(path)
    with open_video(path) as container:
        stream = video_stream(path, container)
        rate = nominal_rate(path, stream)
        time_base = stream_time_base(stream)
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


def open_video(path: Path) -> av.container.InputContainer:
    try:
        return av.open(str(path))
    except av.FFmpegError as exc:
        # FFmpeg's own wording ("Invalid data found when processing input"), as its tools say it.
        raise VideoDecodeError(f"{path}: {exc.strerror}") from None


def video_stream(path: Path, container: av.container.InputContainer) -> av.VideoStream:
    if not container.streams.video:
        raise VideoDecodeError(f"{path}: no video stream")
    return container.streams.video[0]


def nominal_rate(path: Path, stream: av.VideoStream) -> Fraction:
    # FFmpeg's own guess first: the rate every timestamp fits, or the codec's for a stream
    # without timestamps (whose average rate FFmpeg makes up as 25).
    rate = stream.guessed_rate or stream.average_rate
    if not rate:
        raise VideoDecodeError(f"{path}: video stream has no frame rate")
    return Fraction(rate)


def stream_time_base(stream: av.VideoStream) -> Fraction | None:
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
    with open_video(path) as container:
        return sum(1 for _ in decoded_frames(path, container))
