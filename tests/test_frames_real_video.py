"""Real video files in the frame pipeline: containers and codecs, variable frame rate, rotation,
duration from metadata, and videos shorter than their annotation.

Every video is encoded here with PyAV; numbered videos show their frame number as two grey
bars (see tests/test_frames.py), so a sampled JPEG tells which source frame it came from.
"""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from streameval.core.frames.cache import FrameCache
from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.probing import probe
from streameval.core.frames.types import ImageRules, VideoInfo
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.core.streams.timeline import TimelineError, qa_timeline
from tests.test_core_run import execute, run_config
from tests.test_frames import (
    NTSC,
    encode_numbered_video,
    encode_video,
    shown_frame_number,
)
from tests.timeline_fixtures import QA, QA_EARLY, write_benchmark, write_video

MP4 = "mov,mp4,m4a,3gp,3g2,mj2"
MATROSKA = "matroska,webm"
HAS_HEVC_ENCODER = "libx265" in av.codecs_available


def info(**fields) -> VideoInfo:
    """A 64x48 upright constant-rate H.264 video's info, with `fields` changed."""
    defaults = {
        "duration_source": "stream",
        "width": 64,
        "height": 48,
        "rotation": 0,
        "variable_frame_rate": False,
        "codec": "h264",
        "container": MP4,
    }
    return VideoInfo(**{**defaults, **fields})


# ----------------------------------------------------------------------------- containers


@pytest.mark.parametrize(
    ("name", "codec", "rate", "expected", "sources"),
    [
        ("a.mp4", "libx264", 30, info(duration_s=4.0, source_fps=30.0), [0, 30, 60, 90]),
        ("a.mov", "libx264", 30, info(duration_s=4.0, source_fps=30.0), [0, 30, 60, 90]),
        # Matroska keeps milliseconds: 29.97 fps frames lie 33 or 34 ms apart, which is
        # rounding, not a variable rate; 4 s rounds to frame 120, past the last (119). Its
        # duration is the track's own (the muxer's duration tag), not the container's.
        (
            "a.mkv",
            "libx264",
            NTSC,
            info(duration_s=4.004, source_fps=float(NTSC), container=MATROSKA),
            [0, 30, 60, 90, 119],
        ),
        (
            "a.webm",
            "libvpx-vp9",
            NTSC,
            info(duration_s=4.004, source_fps=float(NTSC), codec="vp9", container=MATROSKA),
            [0, 30, 60, 90, 119],
        ),
        pytest.param(
            "hevc.mp4",
            "libx265",
            30,
            info(duration_s=4.0, source_fps=30.0, codec="hevc"),
            [0, 30, 60, 90],
            marks=pytest.mark.skipif(
                not HAS_HEVC_ENCODER, reason="the bundled FFmpeg has no HEVC encoder (libx265)"
            ),
        ),
    ],
)
def test_each_container_and_codec_is_probed_and_sampled(
    tmp_path: Path, name: str, codec: str, rate: Fraction | int, expected: VideoInfo, sources
) -> None:
    n_frames = 120
    video_path = encode_numbered_video(tmp_path / name, n_frames, 64, 48, rate, codec=codec)

    assert probe(video_path) == expected
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=1))
    assert [ref.source_index for ref in video.frames] == sources
    assert [shown_frame_number(video.read(ref)) for ref in video.frames] == sources
    assert video.duration_s == pytest.approx(n_frames / float(rate))
    assert video.info == expected


# ----------------------------------------------------------------------------- frame rate

# Frame presentation times (ms) of the variable-rate videos: bursts of 25 fps between pauses.
IRREGULAR_MS = [0, 40, 80, 300, 340, 1000, 1040, 1500, 1540, 1580]


def last_frame_at_or_before(times_ms: list[int], t_ms: float) -> int:
    return max(i for i, shown_ms in enumerate(times_ms) if shown_ms <= t_ms)


@pytest.mark.parametrize(
    ("name", "codec", "duration_source", "codec_name", "container"),
    [
        ("vfr.mp4", "libx264", "stream", "h264", MP4),
        ("vfr.mov", "libx264", "stream", "h264", MP4),
        ("vfr.mkv", "libx264", "stream", "h264", MATROSKA),
        ("vfr.webm", "libvpx-vp9", "stream", "vp9", MATROSKA),
    ],
)
def test_variable_rate_shows_the_last_frame_at_or_before_each_sample(
    tmp_path: Path, name: str, codec: str, duration_source: str, codec_name: str, container: str
) -> None:
    video_path = encode_numbered_video(
        tmp_path / name, len(IRREGULAR_MS), 64, 48, 25, codec=codec, pts_ms=IRREGULAR_MS
    )
    # The last frame starts at 1.58 s and lasts one 25 fps period.
    duration_s = 1.62
    expected_info = info(
        duration_s=duration_s,
        duration_source=duration_source,
        source_fps=len(IRREGULAR_MS) / duration_s,
        variable_frame_rate=True,
        codec=codec_name,
        container=container,
    )

    assert probe(video_path) == expected_info
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=10))
    sample_ms = [k * 100 for k in range(17)]  # every 0.1 s before 1.62 s
    expected = [last_frame_at_or_before(IRREGULAR_MS, t) for t in sample_ms]
    assert expected == [0, 2, 2, 3, 4, 4, 4, 4, 4, 4, 5, 6, 6, 6, 6, 7, 9]
    assert [ref.t for ref in video.frames] == [t / 1000 for t in sample_ms]
    assert [ref.source_index for ref in video.frames] == expected
    assert [shown_frame_number(video.read(ref)) for ref in video.frames] == expected
    assert video.duration_s == pytest.approx(duration_s)
    assert video.info == expected_info


@pytest.mark.parametrize(
    ("name", "pts_ms", "variable"),
    [
        ("steady.mkv", [40 * i for i in range(10)], False),
        # One frame missing: the gap is two periods, beyond any rounding.
        ("dropped.mp4", [0, 40, 80, 160, 200, 240, 280, 320, 360], True),
        ("one-ms-late.mkv", [0, 40, 80, 121, 160, 200], False),
        ("two-ms-late.mkv", [0, 40, 80, 122, 160, 200], True),
    ],
)
def test_variable_rate_means_gaps_beyond_rounding(
    tmp_path: Path, name: str, pts_ms: list[int], variable: bool
) -> None:
    video_path = encode_numbered_video(tmp_path / name, len(pts_ms), 64, 48, 25, pts_ms=pts_ms)

    assert probe(video_path).variable_frame_rate is variable


# ----------------------------------------------------------------------------- rotation


def corner_picture() -> np.ndarray:
    """A 64x32 black picture with a white 16x16 square in its top-left corner."""
    pixels = np.zeros((32, 64, 3), np.uint8)
    pixels[:16, :16] = 255
    return pixels


def bright_corner(jpeg: bytes) -> str:
    grey = np.asarray(Image.open(io.BytesIO(jpeg)).convert("L"), dtype=np.float64)
    corners = {
        "top-left": grey[:8, :8],
        "top-right": grey[:8, -8:],
        "bottom-left": grey[-8:, :8],
        "bottom-right": grey[-8:, -8:],
    }
    (bright,) = [name for name, area in corners.items() if area.mean() > 200]
    assert all(area.mean() < 50 for name, area in corners.items() if name != bright)
    return bright


@pytest.mark.parametrize(
    ("name", "encoding", "rotation", "size", "corner"),
    [
        ("none.mp4", {}, 0, (64, 32), "top-left"),
        # PyAV's display rotation is counter-clockwise: -90 is what a phone held upright
        # writes (ffprobe: "rotation of -90.00 degrees"), shown turned a quarter clockwise.
        ("cw90.mp4", {"display_rotation": -90}, 90, (32, 64), "top-right"),
        ("cw180.mp4", {"display_rotation": 180}, 180, (64, 32), "bottom-right"),
        ("cw270.mp4", {"display_rotation": 90}, 270, (32, 64), "bottom-left"),
        ("cw90.mov", {"display_rotation": -90}, 90, (32, 64), "top-right"),
        ("cw90.webm", {"display_rotation": -90, "codec": "libvpx-vp9"}, 90, (32, 64), "top-right"),
        # The legacy tag counts clockwise.
        ("tag90.mkv", {"tags": {"rotate": "90"}}, 90, (32, 64), "top-right"),
        ("tag270.mkv", {"tags": {"rotate": "270"}}, 270, (32, 64), "bottom-left"),
    ],
)
def test_frames_are_delivered_upright(
    tmp_path: Path, name: str, encoding: dict, rotation: int, size: tuple[int, int], corner: str
) -> None:
    video_path = encode_video(tmp_path / name, [corner_picture()] * 3, 10, **encoding)

    found = probe(video_path)
    assert (found.rotation, found.width, found.height) == (rotation, *size)
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=10))
    assert len(video.frames) == 3
    for ref in video.frames:
        jpeg = video.read(ref)
        assert (ref.width, ref.height) == Image.open(io.BytesIO(jpeg)).size == size
        assert bright_corner(jpeg) == corner


@pytest.mark.parametrize(("max_width", "size"), [(960, (720, 1280)), (360, (360, 640))])
def test_the_width_cap_applies_to_the_upright_picture(
    tmp_path: Path, max_width: int, size: tuple[int, int]
) -> None:
    # Coded 1280x720, shown 720x1280: a cap applied before turning would give 540x960.
    landscape = np.zeros((720, 1280, 3), np.uint8)
    video_path = encode_video(tmp_path / "portrait.mp4", [landscape] * 2, 10, display_rotation=-90)

    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=10, max_width=max_width))
    assert [(ref.width, ref.height) for ref in video.frames] == [size, size]
    assert Image.open(io.BytesIO(video.read(video.frames[0]))).size == size


# ----------------------------------------------------------------------------- duration


def test_probe_reads_the_duration_without_decoding_the_file(tmp_path: Path) -> None:
    # A "faststart" mp4 declares its duration up front; cutting its second half off leaves a
    # file whose declared duration only a full decode would contradict.
    whole = encode_numbered_video(
        tmp_path / "whole.mp4", 150, 160, 90, 30, container_options={"movflags": "faststart"}
    )
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])

    assert probe(cut) == info(duration_s=5.0, source_fps=30.0, width=160, height=90)
    with pytest.raises(VideoDecodeError, match=r"cut\.mp4: truncated video: decoded 0\.\d\ds of"):
        FrameCache(tmp_path / "cache").get(cut, ImageRules())


def test_without_a_declared_duration_the_packet_timestamps_give_it(tmp_path: Path) -> None:
    # A live Matroska stream is written without a duration in its header.
    video_path = encode_numbered_video(
        tmp_path / "live.mkv",
        60,
        64,
        48,
        25,
        container_format="matroska",
        container_options={"live": "1"},
    )

    expected = info(duration_s=2.4, duration_source="packets", source_fps=25.0, container=MATROSKA)
    assert probe(video_path) == expected
    assert FrameCache(tmp_path / "cache").get(video_path, ImageRules()).duration_s == 2.4


def test_a_raw_stream_without_timestamps_is_measured_by_decoding(tmp_path: Path) -> None:
    # A raw H.264 stream has neither a duration nor timestamps; its own rate (30, from the
    # bitstream) is used, not the 25 FFmpeg reports as its average.
    video_path = encode_numbered_video(
        tmp_path / "raw.h264", 60, 64, 48, 30, container_format="h264"
    )

    assert probe(video_path) == info(
        duration_s=2.0, duration_source="decoded", source_fps=30.0, container="h264"
    )
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=2))
    assert [shown_frame_number(video.read(ref)) for ref in video.frames] == [0, 15, 30, 45]


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda folder: folder / "absent.mp4", "absent.mp4: video file not found"),
        (lambda folder: folder, "not a regular file"),
    ],
)
def test_probe_refuses_what_is_not_a_video_file(tmp_path: Path, make, problem: str) -> None:
    with pytest.raises(VideoDecodeError, match=problem):
        probe(make(tmp_path))


# ----------------------------------------------------------------------------- short videos


def test_a_video_shorter_than_its_annotation_fails_the_question_past_its_end(
    tmp_path: Path,
) -> None:
    video_path = tmp_path / "v.mp4"
    write_video(video_path, seconds=10)  # QA asks at 17 s, QA_EARLY at 6.4 s

    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=1))
    assert (video.duration_s, video.info.duration_s, len(video.frames)) == (10.0, 10.0, 10)
    with pytest.raises(TimelineError) as error:
        qa_timeline(QA, video, history_s=10.0)
    assert str(error.value) == "t:qa:1: the question at 17s lies past the end of the video (10.00s)"
    assert qa_timeline(QA_EARLY, video, history_s=10.0).frame_count == 7


def test_a_run_records_the_short_video_as_a_failed_frames_session(
    adapter_env: Path,
    tmp_path: Path,
    decodes: list[str],
) -> None:
    benchmark_path = write_benchmark(tmp_path / "bench")
    video_path = tmp_path / "bench" / "v.mp4"
    write_video(video_path, seconds=15)  # three records; only QA's question (17 s) is past it
    with (
        AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        summary = execute(run_config(benchmark_path, tmp_path, adapter.url), store)
        sessions = {s.session_id: s for s in store.sessions(summary.run_id)}
        run_status = store.get_run(summary.run_id).status

    assert (summary.finished, summary.failed, run_status) == (2, 1, "finished")
    failed = sessions["t:qa:1"]
    assert (failed.status, failed.failure_stage, failed.failure_reason) == (
        "failed",
        "frames",
        "t:qa:1: the question at 17s lies past the end of the video (15.00s)",
    )
    assert {sessions[s].status for s in ("t:qa:2", "t:pro:1")} == {"finished"}
    # The three records of the video share one decode and one cache entry.
    assert decodes == [str(video_path)]
    entries = [p for p in (tmp_path / "cache" / "frames").glob("*/*") if p.is_dir()]
    assert len(entries) == 1
