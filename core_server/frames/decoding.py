"""Feeding the decoder: every frame of the stream in presentation order, or only the packets
a plan names.

Decoding to a plan checks every frame out of the decoder against it (timestamps in
presentation order, none missing); any difference raises PlanMismatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import av

from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.planning import Plan, PlanMismatch, Run


def decoded_frames(
    path: Path, container: av.container.InputContainer, stream: av.VideoStream
) -> Iterator[av.VideoFrame]:
    """Every frame of the video stream in presentation order, decoded on all cores."""
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


@dataclass
class DecodeStats:
    """What building one entry decoded (tests and benchmarks read it)."""

    packets_decoded: int = 0  # packets sent to the decoder (= frames, when decoding all)
    planned: bool = False  # decoded to a plan; False: every frame decoded


Deliver = Callable[[int, av.VideoFrame], None]


def decode_to_plan(
    container: av.container.InputContainer,
    stream: av.VideoStream,
    plan: Plan,
    deliver: Deliver,
    stats: DecodeStats,
) -> None:
    """Feed the decoder the planned packets only, delivering each wanted frame (by rank) as
    it comes out; PlanMismatch when anything differs from the plan."""
    stream.thread_type = "AUTO"
    codec = stream.codec_context
    runs = iter(plan.runs)
    following, current = next(runs, None), None
    n_packets = 0
    for index, packet in enumerate(_demuxed(container, stream)):
        n_packets = index + 1
        if index >= len(plan.pts) or packet.pts != plan.pts[index]:
            raise PlanMismatch(f"packet {index} differs from the first read")
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
                raise PlanMismatch(f"{current.came_out} frames of {len(current.expected)} came out")
            current = None
    if n_packets != len(plan.pts) or current is not None or following is not None:
        raise PlanMismatch(f"{n_packets} packets where the first read found {len(plan.pts)}")


def _demuxed(container: av.container.InputContainer, stream: av.VideoStream) -> Iterator[av.Packet]:
    try:
        for packet in container.demux(stream):
            if packet.size:  # not the empty packet PyAV adds after the last one
                yield packet
    except av.FFmpegError as exc:
        raise PlanMismatch(f"demuxing failed ({exc.strerror})") from None


def _decode(codec: av.CodecContext, packet: av.Packet | None) -> list[av.VideoFrame]:
    """The frames one packet brings out (None: drain the decoder)."""
    try:
        return codec.decode(packet)
    except av.FFmpegError as exc:
        raise PlanMismatch(f"decoding failed ({exc.strerror})") from None


def _take(frames: list[av.VideoFrame], run: Run, plan: Plan, deliver: Deliver) -> None:
    """Check each frame out of the decoder against the plan and deliver the wanted ones."""
    for frame in frames:
        if frame.pts is None:
            raise PlanMismatch("a frame came out without a timestamp")
        if run.accept_from is not None and frame.pts < run.accept_from:
            continue
        if run.came_out >= len(run.expected) or frame.pts != run.expected[run.came_out]:
            raise PlanMismatch(f"the frame at pts {frame.pts} came out out of order")
        run.came_out += 1
        rank = plan.ranks[frame.pts]
        if rank in run.wanted:
            deliver(rank, frame)
