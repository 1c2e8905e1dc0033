"""What a video is, read from its metadata and packets without decoding it in full
(`probe`), and the opening of a video file and its stream, whose failures are one-line
VideoDecodeErrors.

The video stream is the one players show: the first marked default, else the first (cover
art never). Its duration is that stream's own, measured from its first frame, in every
container: a Matroska/WebM audio track running past the video, or timestamps starting at
5 s, change nothing. Its pixels may not be square: the display size applies the sample
aspect ratio to the coded width, as players do. Its rotation comes from a display matrix (or
a legacy `rotate` tag) turning the picture by 90, 180 or 270 degrees; its rate is variable
when timestamp gaps differ from the nominal frame period by more than a muxer's rounding. A
still image (a PNG or JPEG renamed .mp4) is refused: FFmpeg reads it as a one-frame video.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import av

from streameval.core.frames.decoding import decoded_frames
from streameval.core.frames.digest import stat_video
from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.types import DurationSource, VideoInfo

# FFmpeg's demuxers of still images: "image2" (files named like pictures) and the
# "<codec>_pipe" ones that recognise an image by its bytes whatever its name.
IMAGE_DEMUXERS = re.compile(r"image2|.+_pipe")
# The end of a Matroska track as its muxer tags it (FFmpeg writes "00:00:04.004000000").
MATROSKA_DURATION = re.compile(r"(\d+):(\d\d):(\d\d(?:\.\d+)?)")

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
        declared = _declared_duration(stream)
        whole = _container_duration(container)
        rotation = _rotation(first, stream)
        aspect = pixel_aspect(stream)
        codec, format_name = stream.codec_context.name, container.format.name
    source: DurationSource
    if declared is not None:
        duration_s, source = declared, "stream"
    elif stamps and time_base is not None:
        # The last frame lasts one nominal period.
        duration_s, source = float((max(stamps) - min(stamps)) * time_base + 1 / rate), "packets"
    elif whole is not None:
        duration_s, source = whole, "container"
    else:
        duration_s, source = float(_count_frames(path) / rate), "decoded"
    variable = time_base is not None and _varies(stamps, rate, time_base)
    width, height = display_size(first.width, first.height, aspect)
    turned = rotation in (90, 270)
    return VideoInfo(
        duration_s=duration_s,
        duration_source=source,
        source_fps=len(stamps) / duration_s if variable else float(rate),
        width=height if turned else width,
        height=width if turned else height,
        rotation=rotation,
        variable_frame_rate=variable,
        codec=codec,
        container=format_name,
        sample_aspect_ratio=f"{aspect.numerator}:{aspect.denominator}",
    )


def open_video(path: Path) -> av.container.InputContainer:
    try:
        return av.open(str(path))
    except av.FFmpegError as exc:
        # FFmpeg's own wording ("Invalid data found when processing input"), as its tools say it.
        raise VideoDecodeError(f"{path}: {exc.strerror}") from None


def video_stream(path: Path, container: av.container.InputContainer) -> av.VideoStream:
    """The video stream players show: the first marked default, else the first; an attached
    picture (cover art) is no video. A still image is refused."""
    if IMAGE_DEMUXERS.fullmatch(container.format.name):
        codec = container.streams.video[0].codec_context.name if container.streams.video else "?"
        raise VideoDecodeError(f"{path}: a still image ({codec}), not a video")
    playable = [
        stream
        for stream in container.streams.video
        if not stream.disposition & av.stream.Disposition.attached_pic
    ]
    if not playable:
        raise VideoDecodeError(f"{path}: no video stream")
    defaults = [stream for stream in playable if stream.disposition & av.stream.Disposition.default]
    return (defaults or playable)[0]


def pixel_aspect(stream: av.VideoStream) -> Fraction:
    """The sample aspect ratio (a pixel's width over its height): the container's if it
    declares one, else the codec's, as FFmpeg reads them; 1 when neither does."""
    ratio = stream.sample_aspect_ratio
    return Fraction(ratio) if ratio and ratio > 0 else Fraction(1)


def display_size(width: int, height: int, aspect: Fraction) -> tuple[int, int]:
    """The size players show a coded picture at: its width stretched (or narrowed) by the
    pixel aspect, its height kept (720x480 at 8:9 shows as 640x480)."""
    return max(1, math.floor(width * aspect + Fraction(1, 2))), height


def nominal_rate(path: Path, stream: av.VideoStream) -> Fraction:
    # FFmpeg's own guess first: the rate every timestamp fits, or the codec's for a stream
    # without timestamps (whose average rate FFmpeg makes up as 25).
    rate = stream.guessed_rate or stream.average_rate
    if not rate:
        raise VideoDecodeError(f"{path}: video stream has no frame rate")
    return Fraction(rate)


def stream_time_base(stream: av.VideoStream) -> Fraction | None:
    return Fraction(stream.time_base) if stream.time_base else None


def _declared_duration(stream: av.VideoStream) -> float | None:
    """The video stream's own duration, as its header declares it."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    return _matroska_duration(stream)


def _container_duration(container: av.container.InputContainer) -> float | None:
    """The container's duration where it can only be the video's: a container's spans every
    stream (an audio track running past the video included), and its start differs between
    demuxers, so it is read only for a lone stream without timestamps (raw streams)."""
    if container.duration is None or len(container.streams) != 1:
        return None
    return container.duration / av.time_base


def _matroska_duration(stream: av.VideoStream) -> float | None:
    """Matroska keeps no duration per track; FFmpeg's muxer tags each track with the time
    its last frame ends, counted from 0, so the stream's start is taken off."""
    tags = {key.lower(): value for key, value in stream.metadata.items()}
    match = MATROSKA_DURATION.fullmatch(tags.get("duration", ""))
    if match is None or stream.time_base is None:
        return None
    hours, minutes, seconds = match.groups()
    end = int(hours) * 3600 + int(minutes) * 60 + Fraction(seconds)
    start = (stream.start_time or 0) * Fraction(stream.time_base)
    return float(end - start) if end > start else None


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
        return sum(1 for _ in decoded_frames(path, container, video_stream(path, container)))
