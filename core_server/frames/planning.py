"""The decode plan, made from the packets alone, read without decoding (timestamps and
keyframe flags).

The timestamps tell which frame each sample shows, so the decoder is fed only the keyframe
intervals (GOPs) holding a shown frame, each from its keyframe up to the packet of its last
shown frame, then drained (decoding order puts a frame's references before it). GOPs without
a sample and the tail of a GOP after its last sample are skipped (the demuxer reads past
them; the decoder never sees them); the last GOP is always decoded to the end, as its last
frame gives the duration. A frame shown before its GOP's keyframe (an open GOP's leading
frame, which references the GOP before) is decoded on from the previous GOP. A stream the
plan cannot describe (packets without timestamps, discarded or duplicate ones) gets no plan.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import av

from streameval.core.frames.timing import Position, Timing


class PlanMismatch(Exception):
    """The demuxer or decoder did not give what the plan was made from: every frame is
    decoded instead."""


@dataclass(frozen=True)
class Packets:
    """The video stream's packets in decoding order, as read without decoding them."""

    pts: list[int]
    keyframes: list[int]  # indices of the keyframe packets, where each GOP starts


@dataclass
class Run:
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
class Plan:
    pts: list[int]  # of the packets, in decoding order
    ranks: dict[int, int]  # timestamp -> place in presentation order
    placements: list[tuple[int, Position]]  # by rank: (source index, position)
    shown_by: dict[int, list[int]]  # rank -> the samples showing it (those before the last)
    n_samples: int  # samples placed before the last frame; the rest show the last frame
    runs: list[Run]
    last_rank: int


def scan_packets(container: av.container.InputContainer, stream: av.VideoStream) -> Packets | None:
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
    return Packets(pts, keyframes)


def make_plan(packets: Packets, timing: Timing, fps: float) -> Plan:
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
    return Plan(packets.pts, ranks, placements, shown_by, len(shows), runs, last)


def _shown_frames(positions: list[Position], timing: Timing, fps: float) -> list[int]:
    """The rank of the frame each sample placed before the last frame shows: the decode-all
    loop of `_sample_everything`, run on the positions alone."""
    shows: list[int] = []
    for rank in range(1, len(positions)):
        while timing.sample_at(len(shows), fps) < positions[rank]:
            shows.append(rank - 1)
    return shows


def _plan_runs(
    packets: Packets, in_order: list[int], ranks: dict[int, int], needed: set[int]
) -> list[Run]:
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


def _run(packets: Packets, ranks: dict[int, int], needed: set[int], first: int, last: int) -> Run:
    accept_from = None if first == 0 else packets.pts[first]
    fed = packets.pts[first : last + 1]
    expected = sorted(pts for pts in fed if accept_from is None or pts >= accept_from)
    wanted = {ranks[pts] for pts in expected} & needed
    return Run(first, last, accept_from, expected, wanted)
