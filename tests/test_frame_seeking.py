"""Decoding only what the samples need: the planned path against the decode-all path.

The planned path skips keyframe intervals (GOPs) without a sample and the tail of each GOP
after its last sample. It must give exactly what decoding every frame gives: the same
source frames, the same JPEG bytes, the same duration, for constant and variable frame
rates, short and long GOPs, B-frames, open GOPs and rotated videos.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streameval.core.frames import decoding, planning, sampling
from streameval.core.frames.decoding import DecodeStats
from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.timing import Timing
from streameval.core.frames.types import ImageRules
from tests.test_frames import encode_video, numbered_picture, shown_frame_number

HAS_HEVC_ENCODER = "libx265" in av.codecs_available


def x264(gop: int, b_frames: int = 0, open_gop: bool = False) -> dict[str, str]:
    """Encoder options: a keyframe exactly every `gop` frames (no scene-cut keyframes)."""
    params = f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes={b_frames}"
    return {"x264-params": params + (":open-gop=1" if open_gop else "")}


def x265(gop: int, b_frames: int) -> dict[str, str]:
    """HEVC with open GOPs (CRA keyframes whose leading frames reference the GOP before)."""
    params = f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes={b_frames}:open-gop=1"
    return {"x265-params": params + ":log-level=error"}


def numbered(n_frames: int, width: int = 64, height: int = 48) -> list[np.ndarray]:
    return [numbered_picture(i % 256, width, height) for i in range(n_frames)]


def bursts_ms(n_frames: int) -> list[int]:
    """Irregular presentation times: runs of 25 fps frames between pauses of various length."""
    times, t = [], 0
    for i in range(n_frames):
        times.append(t)
        t += 40 if i % 7 else 40 + 97 * (i % 5)
    return times


def sample_both(
    video: Path, rules: ImageRules, tmp_path: Path
) -> tuple[tuple, DecodeStats, tuple, DecodeStats]:
    """(info, duration, frames) and the decoding statistics of the planned path, then of the
    decode-all path, each writing into its own folder."""
    results = []
    for mode in ("planned", "all"):
        folder = tmp_path / mode
        folder.mkdir()
        stats = DecodeStats()
        sampled = sampling.sample_video(
            video, "0" * 64, rules, folder, decode_all=mode == "all", stats=stats
        )
        results += [sampled, stats]
    return tuple(results)  # type: ignore[return-value]


def assert_same_samples(planned: tuple, decode_all: tuple, tmp_path: Path) -> None:
    assert planned == decode_all  # info, duration and every FrameRef (source index, size...)
    for ref in planned[2]:
        name = f"{ref.index:06d}.jpg"
        assert (tmp_path / "planned" / name).read_bytes() == (
            tmp_path / "all" / name
        ).read_bytes(), f"sample {ref.index} differs"
    # Nothing else was left in the folder (a sample written twice, a stray file).
    assert sorted(p.name for p in (tmp_path / "planned").iterdir()) == sorted(
        f"{ref.index:06d}.jpg" for ref in planned[2]
    )


VIDEOS = {
    # name: (file name, frames, rate, encode_video keywords)
    "cfr-short-gop": ("v.mp4", 150, 30, {"codec_options": x264(10)}),
    "cfr-long-gop": ("v.mp4", 300, 30, {"codec_options": x264(120)}),
    "b-frames": ("v.mp4", 200, 30, {"codec_options": x264(24, b_frames=3)}),
    "open-gop": ("v.mp4", 200, 30, {"codec_options": x264(24, b_frames=3, open_gop=True)}),
    "open-gop-mkv": ("v.mkv", 200, 25, {"codec_options": x264(20, b_frames=2, open_gop=True)}),
    "ntsc-mkv": ("v.mkv", 180, Fraction(30000, 1001), {"codec_options": x264(15, b_frames=2)}),
    "vfr-mp4": ("v.mp4", 120, 25, {"codec_options": x264(8, b_frames=2)}),
    "vfr-mkv": ("v.mkv", 120, 25, {"codec_options": x264(12, b_frames=3, open_gop=True)}),
    "rotated": (
        "v.mp4",
        90,
        30,
        {"codec_options": x264(10, b_frames=2), "display_rotation": -90},
    ),
    "vp9-webm": ("v.webm", 90, 30, {"codec": "libvpx-vp9", "codec_options": {"g": "10"}}),
    "hevc-open-gop": ("v.mp4", 150, 30, {"codec": "libx265", "codec_options": x265(24, 3)}),
}


def make(name: str, folder: Path) -> Path:
    file_name, n_frames, rate, keywords = VIDEOS[name]
    if name.startswith("vfr"):
        keywords = {**keywords, "pts_ms": bursts_ms(n_frames)}
    pictures = numbered(n_frames, 64, 32 if name == "rotated" else 48)
    return encode_video(folder / file_name, pictures, rate, **keywords)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=pytest.mark.skipif(
                name.startswith("hevc") and not HAS_HEVC_ENCODER,
                reason="the bundled FFmpeg has no HEVC encoder (libx265)",
            ),
        )
        for name in VIDEOS
    ],
)
@pytest.mark.parametrize("fps", [1.0, 3.75, 7.0, 0.3])
def test_planned_decoding_gives_the_samples_of_decoding_every_frame(
    tmp_path: Path, name: str, fps: float
) -> None:
    video = make(name, tmp_path)

    planned, planned_stats, decode_all, all_stats = sample_both(
        video, ImageRules(fps=fps), tmp_path
    )

    assert planned_stats.planned  # the plan was followed, not given up for decoding all
    assert not all_stats.planned
    assert planned[0].variable_frame_rate is name.startswith("vfr")
    assert_same_samples(planned, decode_all, tmp_path)
    if name != "rotated":  # a turned picture puts the frame number's bars elsewhere
        shown = [
            shown_frame_number((tmp_path / "planned" / f"{r.index:06d}.jpg").read_bytes())
            for r in planned[2]
        ]
        assert shown == [r.source_index % 256 for r in planned[2]]
    assert planned_stats.packets_decoded <= all_stats.packets_decoded


def leading_frames(video: Path) -> list[int]:
    """The frames (in presentation order) shown before their GOP's keyframe: an open GOP's
    leading frames, decoded after the keyframe but referencing the GOP before it."""
    with av.open(str(video)) as container:
        packets = planning.scan_packets(container, container.streams.video[0])
    assert packets is not None
    rank = {pts: r for r, pts in enumerate(sorted(packets.pts))}
    starts = packets.keyframes
    ends = [*starts[1:], len(packets.pts)]
    return sorted(
        rank[pts]
        for start, end in list(zip(starts, ends, strict=True))[1:]
        for pts in packets.pts[start:end]
        if pts < packets.pts[start]
    )


@pytest.mark.parametrize(
    "name",
    [
        "open-gop",
        "open-gop-mkv",
        pytest.param(
            "hevc-open-gop",
            marks=pytest.mark.skipif(not HAS_HEVC_ENCODER, reason="no HEVC encoder (libx265)"),
        ),
    ],
)
def test_a_sample_shown_before_an_open_gops_keyframe_is_decoded_from_the_gop_before(
    tmp_path: Path, name: str
) -> None:
    video = make(name, tmp_path)
    first_leading = leading_frames(video)[0]
    rate = VIDEOS[name][2]
    # Sample 1 shows the first leading frame.
    rules = ImageRules(fps=rate / first_leading)

    planned, stats, decode_all, _ = sample_both(video, rules, tmp_path)

    assert planned[2][1].source_index == first_leading
    assert stats.planned
    assert_same_samples(planned, decode_all, tmp_path)


def test_gops_without_a_sample_are_not_decoded(tmp_path: Path) -> None:
    # 20 s at 30 fps, a keyframe every second, one sample every 10 s: the GOPs of frames 0
    # and 300 are decoded up to their first frame (then drained), the last GOP in full (it
    # gives the duration); the 17 others not at all.
    video = encode_video(tmp_path / "v.mp4", numbered(600), 30, codec_options=x264(30))

    planned, stats, decode_all, all_stats = sample_both(video, ImageRules(fps=0.1), tmp_path)

    assert [r.source_index for r in planned[2]] == [0, 300]
    assert_same_samples(planned, decode_all, tmp_path)
    assert all_stats.packets_decoded == 600
    assert stats.packets_decoded == 1 + 1 + 30


def test_the_tail_of_a_gop_after_its_last_sample_is_not_decoded(tmp_path: Path) -> None:
    # A keyframe every 2 s, a sample every second: every GOP holds samples (at its frames 0
    # and 30), so only the frames after frame 30 of each GOP but the last can be skipped.
    video = encode_video(tmp_path / "v.mp4", numbered(600), 30, codec_options=x264(60))

    planned, stats, decode_all, all_stats = sample_both(video, ImageRules(fps=1), tmp_path)

    assert [r.source_index for r in planned[2]] == [30 * k for k in range(20)]
    assert_same_samples(planned, decode_all, tmp_path)
    assert all_stats.packets_decoded == 600
    assert stats.packets_decoded == 9 * 31 + 60


def test_with_b_frames_the_tail_is_skipped_too(tmp_path: Path) -> None:
    # The same with B-frames: a sampled frame coded as a B-frame comes after the P-frame it
    # references (at most three frames later in presentation order), a P-frame before the
    # B-frames shown before it.
    video = encode_video(tmp_path / "v.mp4", numbered(600), 30, codec_options=x264(60, b_frames=3))

    planned, stats, decode_all, _ = sample_both(video, ImageRules(fps=1), tmp_path)

    assert_same_samples(planned, decode_all, tmp_path)
    assert stats.planned
    assert stats.packets_decoded <= 9 * (31 + 3) + 60


def test_a_packet_that_differs_on_the_second_read_falls_back_to_decoding_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    video = encode_video(tmp_path / "v.mp4", numbered(90), 30, codec_options=x264(10))
    real_scan = planning.scan_packets

    def scan_with_a_wrong_timestamp(container, stream):
        packets = real_scan(container, stream)
        packets.pts[45] += 1
        return packets

    monkeypatch.setattr(sampling, "scan_packets", scan_with_a_wrong_timestamp)
    planned, stats, decode_all, _ = sample_both(video, ImageRules(fps=7), tmp_path)

    assert not stats.planned
    assert_same_samples(planned, decode_all, tmp_path)


def test_a_frame_the_decoder_does_not_bring_out_falls_back_to_decoding_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    video = encode_video(tmp_path / "v.mp4", numbered(90), 30, codec_options=x264(10, b_frames=2))
    real_decode = decoding._decode

    def decode_losing_a_frame(codec, packet):
        return [frame for frame in real_decode(codec, packet) if frame.pts != 41 * 512]

    monkeypatch.setattr(decoding, "_decode", decode_losing_a_frame)
    planned, stats, decode_all, _ = sample_both(video, ImageRules(fps=7), tmp_path)

    assert not stats.planned
    assert_same_samples(planned, decode_all, tmp_path)


@pytest.mark.parametrize(
    ("name", "encoding"),
    [
        # Without timestamps there is nothing to plan on.
        ("raw.h264", {"container_format": "h264"}),
        # Two packets with one timestamp (a broken muxer): no presentation order to trust.
        ("same-pts.mkv", {"pts_ms": [0, 40, 80, 80, 160, 200]}),
    ],
)
def test_streams_without_a_usable_plan_are_decoded_in_full(
    tmp_path: Path, name: str, encoding: dict
) -> None:
    n_frames = len(encoding.get("pts_ms", range(30)))
    video = encode_video(tmp_path / name, numbered(n_frames), 25, **encoding)

    try:
        planned, stats, decode_all, _ = sample_both(video, ImageRules(fps=5), tmp_path)
    except VideoDecodeError:
        pytest.skip("this FFmpeg refuses the file outright")
    assert not stats.planned
    assert_same_samples(planned, decode_all, tmp_path)


def test_a_truncated_video_is_still_refused(tmp_path: Path) -> None:
    whole = encode_video(tmp_path / "whole.mkv", numbered(150, 160, 90), 30, codec_options=x264(30))
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])

    for decode_all in (False, True):
        folder = tmp_path / f"out-{decode_all}"
        folder.mkdir()
        with pytest.raises(VideoDecodeError, match="truncated video: decoded"):
            sampling.sample_video(cut, "0" * 64, ImageRules(), folder, decode_all=decode_all)


def test_the_plan_places_samples_as_the_decode_all_loop_does() -> None:
    # Two frames 1 ms apart round to one source number at a constant rate: the later one is
    # shown, as when decoding every frame.
    timing = Timing(False, Fraction(25), Fraction(1, 1000))
    packets = planning.Packets(pts=[0, 40, 41, 120, 160], keyframes=[0, 3])

    plan = planning.make_plan(packets, timing, fps=25.0)

    assert [place for place, _ in plan.placements] == [0, 1, 1, 3, 4]
    # Samples 0..3 (frames 0, 1, 2, 3 by number) show ranks 0, 2, 2, 3; sample 4 and later
    # show the last frame, once its duration is known.
    assert plan.n_samples == 4
    assert plan.shown_by == {0: [0], 2: [1, 2], 3: [3]}
    # GOP 0 up to the packet of rank 2 (41), then GOP 1 through the end.
    assert [(run.first, run.last) for run in plan.runs] == [(0, 2), (3, 4)]
    assert [run.expected for run in plan.runs] == [[0, 40, 41], [120, 160]]


def test_samples_of_an_irregular_stream(tmp_path: Path) -> None:
    """A variable-rate video with long pauses, checked against the rule written out."""
    pts_ms = bursts_ms(60)
    video = encode_video(
        tmp_path / "v.mkv", numbered(60), 25, pts_ms=pts_ms, codec_options=x264(6, b_frames=2)
    )

    planned, stats, decode_all, _ = sample_both(video, ImageRules(fps=4), tmp_path)

    assert stats.planned
    assert_same_samples(planned, decode_all, tmp_path)
    expected = [last_at_or_before(pts_ms, ref.t * 1000) for ref in planned[2]]
    assert [ref.source_index for ref in planned[2]] == expected


def last_at_or_before(times_ms: Sequence[int], t_ms: float) -> int:
    return max(i for i, shown_ms in enumerate(times_ms) if shown_ms <= t_ms + 1e-6)
