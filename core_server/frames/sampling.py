"""Sampling a video into a folder: decode what the samples need, write each sample's JPEG.

Decoding follows the plan (streameval.core.frames.planning); on any difference from it, or
a stream the plan cannot describe, every frame is decoded instead, which gives the same
samples. Seeking anew for each sample would decode each GOP again and again
(bench/bench_frame_sampling.py compares the approaches). A video that decodes shorter than
its header declares is truncated or corrupt (streameval.core.frames.completeness).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import av

from streameval.core.frames.completeness import check_complete
from streameval.core.frames.decoding import DecodeStats, decode_to_plan, decoded_frames
from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.jpeg_writer import DecodeProgress, JpegWriter, ProgressTicker
from streameval.core.frames.planning import PlanMismatch, make_plan, scan_packets
from streameval.core.frames.probing import (
    nominal_rate,
    open_video,
    probe,
    stream_time_base,
    video_stream,
)
from streameval.core.frames.timing import Placed, Timing
from streameval.core.frames.types import FrameRef, ImageRules, VideoInfo

log = logging.getLogger(__name__)


def _timing(path: Path, info: VideoInfo, stream: av.VideoStream) -> Timing:
    return Timing(info.variable_frame_rate, nominal_rate(path, stream), stream_time_base(stream))


def sample_video(
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
    ticker = None if on_progress is None else ProgressTicker(on_progress, info.duration_s)
    writer = JpegWriter(folder, rules, digest, info, ticker)
    if not decode_all:
        try:
            sampled = _sample_planned(path, info, rules, writer, stats)
        except PlanMismatch as exc:
            log.info("%s: %s; decoding every frame", path, exc)
            _remove_samples(folder)
            sampled = None
        if sampled is not None:
            return info, *sampled
    return info, *_sample_everything(path, info, rules, writer, stats)


def _sample_planned(
    path: Path, info: VideoInfo, rules: ImageRules, writer: JpegWriter, stats: DecodeStats
) -> tuple[float, list[FrameRef]] | None:
    """Sample by decoding only what the plan names; None when the packets allow no plan."""
    with open_video(path) as container:
        stream = video_stream(path, container)
        timing = _timing(path, info, stream)
        packets = None if timing.time_base is None else scan_packets(container, stream)
    if packets is None:
        return None
    plan = make_plan(packets, timing, rules.fps)
    refs: dict[int, FrameRef] = {}
    last: list[Placed] = []

    def deliver(rank: int, frame: av.VideoFrame) -> None:
        placed = Placed(*plan.placements[rank], frame)
        for k in plan.shown_by.get(rank, ()):
            refs[k] = writer.write(k, placed)
        if rank == plan.last_rank:
            last.append(placed)

    stats.packets_decoded = 0
    with open_video(path) as container:
        decode_to_plan(container, video_stream(path, container), plan, deliver, stats)
        if len(refs) != plan.n_samples or not last:
            raise PlanMismatch("a planned frame was not delivered")
        ordered = [refs[k] for k in range(plan.n_samples)]
        duration_s = _finish(path, info, timing, rules, writer, ordered, last[0])
    stats.planned = True
    return duration_s, ordered


def _sample_everything(
    path: Path, info: VideoInfo, rules: ImageRules, writer: JpegWriter, stats: DecodeStats
) -> tuple[float, list[FrameRef]]:
    """Sample by decoding every frame in presentation order."""
    refs: list[FrameRef] = []
    stats.packets_decoded, stats.planned = 0, False
    with open_video(path) as container:
        stream = video_stream(path, container)
        timing = _timing(path, info, stream)
        shown: Placed | None = None
        for placed in timing.place(decoded_frames(path, container, stream)):
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
    timing: Timing,
    rules: ImageRules,
    writer: JpegWriter,
    refs: list[FrameRef],
    last: Placed,
) -> float:
    """Check the decoded length against the header, then add the samples from the last
    frame on (at a constant rate, also those within its last half frame, which round past
    the end): they show the last frame. Returns the duration."""
    duration_s = timing.end_s(last)
    check_complete(path, duration_s, info)
    while len(refs) / rules.fps < duration_s:
        refs.append(writer.write(len(refs), last))
    return duration_s


def _remove_samples(folder: Path) -> None:
    for jpeg in folder.glob("*.jpg"):
        with contextlib.suppress(OSError):
            jpeg.unlink()
