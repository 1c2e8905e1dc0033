"""Videos as players show them: the video stream's own duration and start in every container,
the pixel aspect applied, the default video stream chosen, still images refused, truncation
judged by a fixed margin, corruption told from truncation, and TRACE's frame at a tie.

The videos are generated with PyAV (tests/test_frames.py's encoder, whose numbered
pictures let a JPEG say which source frame it shows); broken ones are cut or overwritten.
"""

from __future__ import annotations

import io
import math
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from streameval.core.frames.cache import FrameCache
from streameval.core.frames.completeness import TRUNCATION_MARGIN_S
from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.probing import probe
from streameval.core.frames.timing import source_index
from streameval.core.frames.types import ImageRules
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from tests.test_core_run import execute, run_config
from tests.test_frames import (
    NTSC,
    encode_numbered_video,
    encode_video,
    numbered_picture,
    shown_frame_number,
)
from tests.timeline_fixtures import PROACTIVE, QA, QA_EARLY, write_benchmark

RECORDS = (QA, QA_EARLY, PROACTIVE)

MATROSKA = "matroska,webm"


def one_line(error: pytest.ExceptionInfo[VideoDecodeError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


# ----------------------------------------------------------------------------- duration


@pytest.mark.parametrize("name", ["a.mkv", "a.webm", "a.mp4", "a.ts"])
@pytest.mark.parametrize(
    "layout",
    [
        # An audio track 3 s longer than the video: the container's duration is the audio's
        # (5 s), which a decoded 2 s video used to fall short of as "truncated".
        {"audio_s": 5.0},
        # Timestamps starting at 5 s: a Matroska container's duration then ends at 7 s.
        {"first_frame": 150},
    ],
)
def test_the_duration_is_the_video_streams_own(tmp_path: Path, name: str, layout: dict) -> None:
    codec = "libvpx-vp9" if name.endswith(".webm") else "libx264"
    video_path = encode_numbered_video(tmp_path / name, 60, 64, 48, 30, codec=codec, **layout)

    found = probe(video_path)
    assert (found.duration_s, found.duration_source) == (2.0, "stream")
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=2))
    assert video.duration_s == 2.0
    assert [ref.source_index for ref in video.frames] == [0, 15, 30, 45]
    assert [shown_frame_number(video.read(ref)) for ref in video.frames] == [0, 15, 30, 45]


@pytest.mark.parametrize("layout", [{"audio_s": 25.0}, {"first_frame": 50}])
def test_a_run_streams_every_session_of_such_a_webm(
    adapter_env: Path, tmp_path: Path, layout: dict
) -> None:
    # The timeline fixtures' 20 s video at 10 fps, as WebM with 5 s of audio past its end
    # or timestamps from 5 s: before, each of its three sessions failed as "truncated".
    records = [record.model_copy(update={"video_path": "v.webm"}) for record in RECORDS]
    benchmark_path = write_benchmark(tmp_path / "bench", records)
    webm = tmp_path / "bench" / "v.webm"
    encode_numbered_video(webm, 200, 64, 48, 10, codec="libvpx-vp9", **layout)
    with (
        AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        summary = execute(run_config(benchmark_path, tmp_path, adapter.url), store)
        sessions = store.sessions(summary.run_id)

    assert (summary.finished, summary.failed) == (3, 0)
    assert {session.status for session in sessions} == {"finished"}


# ----------------------------------------------------------------------------- pixel aspect


def block_picture(width: int, height: int, block: tuple[int, int]) -> np.ndarray:
    """A black picture with a white block (width, height) in its top-left corner."""
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[: block[1], : block[0]] = 255
    return pixels


def white_block(jpeg: bytes) -> tuple[int, int]:
    """The size of the bright area in a JPEG: (width, height)."""
    grey = np.asarray(Image.open(io.BytesIO(jpeg)).convert("L"))
    rows, columns = np.nonzero(grey > 128)
    return int(columns.max()) + 1, int(rows.max()) + 1


@pytest.mark.parametrize(
    ("coded", "aspect", "max_width", "rotation", "shown", "block"),
    [
        # An NTSC DVD: 720x480 coded, 8:9 pixels, shown 4:3 at 640x480; a 90x80 block of
        # coded pixels is an 80x80 square on screen.
        ((720, 480), Fraction(8, 9), 960, None, (640, 480), (80, 80)),
        # The width cap applies to the display size: 640 capped to 320.
        ((720, 480), Fraction(8, 9), 320, None, (320, 240), (40, 40)),
        # Pixels twice as wide as high are stretched, not squeezed.
        ((64, 48), Fraction(2, 1), 960, None, (128, 48), (80, 40)),
        # Turned upright after the aspect is applied: 640x480 shown as 480x640.
        ((720, 480), Fraction(8, 9), 960, -90, (480, 640), None),
    ],
)
def test_non_square_pixels_are_shown_at_the_display_aspect(
    tmp_path: Path,
    coded: tuple[int, int],
    aspect: Fraction,
    max_width: int,
    rotation: int | None,
    shown: tuple[int, int],
    block: tuple[int, int] | None,
) -> None:
    coded_block = (90, 80) if aspect < 1 else (40, 40)
    picture = block_picture(*coded, coded_block)
    video_path = encode_video(
        tmp_path / "dvd.mkv",
        [picture] * 2,
        10,
        sample_aspect_ratio=aspect,
        display_rotation=rotation,
    )

    found = probe(video_path)
    expected_aspect = f"{aspect.numerator}:{aspect.denominator}"
    assert found.sample_aspect_ratio == expected_aspect
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=10, max_width=max_width))
    jpeg = video.read(video.frames[0])
    assert (video.frames[0].width, video.frames[0].height) == shown
    assert Image.open(io.BytesIO(jpeg)).size == shown
    if block is not None:
        assert (found.width, found.height) == (640 if aspect < 1 else 128, coded[1])
        assert white_block(jpeg) == pytest.approx(block, abs=2)


# ----------------------------------------------------------------------------- streams


def encode_two_streams(path: Path, default: int | None) -> Path:
    """Two video streams: 0 numbered (64x48), 1 plain grey (32x32), frames at 10 fps;
    `default`: the stream marked default (None: neither)."""
    with av.open(str(path), "w") as container:
        streams = []
        for width, height in ((64, 48), (32, 32)):
            stream = container.add_stream("libx264", rate=10)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            streams.append(stream)
        for index, stream in enumerate(streams):
            is_default = index == default
            stream.disposition = av.stream.Disposition.default if is_default else 0
        for i in range(5):
            pictures = (numbered_picture(i, 64, 48), np.full((32, 32, 3), 200, np.uint8))
            for stream, pixels in zip(streams, pictures, strict=True):
                frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
                frame.pts = i
                container.mux(stream.encode(frame))
        for stream in streams:
            container.mux(stream.encode())
    return path


@pytest.mark.parametrize("name", ["two.mkv", "two.mp4"])
@pytest.mark.parametrize(("default", "size"), [(1, (32, 32)), (0, (64, 48)), (None, (64, 48))])
def test_the_default_video_stream_is_the_one_shown(
    tmp_path: Path, name: str, default: int | None, size: tuple[int, int]
) -> None:
    video_path = encode_two_streams(tmp_path / name, default)

    assert (probe(video_path).width, probe(video_path).height) == size
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=10))
    assert [(ref.width, ref.height) for ref in video.frames] == [size] * 5
    jpegs = [video.read(ref) for ref in video.frames]
    if size == (32, 32):
        grey = [np.asarray(Image.open(io.BytesIO(j)).convert("L")).mean() for j in jpegs]
        assert grey == pytest.approx([200] * 5, abs=3)
    else:
        assert [shown_frame_number(jpeg) for jpeg in jpegs] == [0, 1, 2, 3, 4]


# ----------------------------------------------------------------------------- images


@pytest.mark.parametrize(("image_format", "codec"), [("PNG", "png"), ("JPEG", "mjpeg")])
def test_an_image_renamed_as_a_video_is_refused(
    tmp_path: Path, image_format: str, codec: str
) -> None:
    video_path = tmp_path / "photo.mp4"
    Image.new("RGB", (64, 48), "white").save(video_path, image_format)

    with pytest.raises(VideoDecodeError) as error:
        probe(video_path)
    assert one_line(error) == f"{video_path}: a still image ({codec}), not a video"
    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path / "cache").get(video_path, ImageRules())
    assert one_line(error) == f"{video_path}: a still image ({codec}), not a video"


# ----------------------------------------------------------------------------- broken files


def test_a_long_video_missing_more_than_the_fixed_margin_is_truncated(tmp_path: Path) -> None:
    # 60 s at 2 fps, its header up front ("faststart"), cut where its last 4 frames begin:
    # 2 s lost, which the old margin (5% of the length: 3 s) let through.
    up_front = {"codec_options": {"bf": "0"}, "container_options": {"movflags": "faststart"}}
    whole = encode_numbered_video(tmp_path / "whole.mp4", 120, 32, 32, 2, **up_front)
    with av.open(str(whole)) as container:
        last_four_at = container.streams.video[0].index_entries[116].pos
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[:last_four_at])

    assert probe(cut).duration_s == 60.0 > 2.0 > TRUNCATION_MARGIN_S
    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path / "cache").get(cut, ImageRules())
    assert one_line(error) == (
        f"{cut}: truncated video: decoded 58.00s of the 60.00s its header declares, "
        "2.00s missing (the file ends early)"
    )


def test_a_video_within_the_margin_is_accepted(tmp_path: Path) -> None:
    # The last frame's own length is all that a whole file may lack: none here.
    video_path = encode_numbered_video(tmp_path / "whole.mp4", 120, 32, 32, 2)

    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules())
    assert (video.duration_s, len(video.frames)) == (60.0, 60)


def damaged_matroska(folder: Path) -> tuple[bytes, Path]:
    video_path = encode_numbered_video(folder / "v.mkv", 150, 64, 48, 30, codec_options={"g": "30"})
    return video_path.read_bytes(), video_path


def test_a_matroska_file_damaged_mid_file_is_called_corrupt(tmp_path: Path) -> None:
    data, video_path = damaged_matroska(tmp_path)
    middle = len(data) // 2
    video_path.write_bytes(data[:middle] + bytes(2000) + data[middle + 2000 :])

    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path / "cache").get(video_path, ImageRules())
    message = one_line(error)
    start = f"{video_path}: corrupt video data: the stream stops at 1.90s of the 5.00s its"
    assert message.startswith(f"{start} header declares, with ")
    unread = int(message.split(", with ")[1].removesuffix(" bytes of the file unread"))
    # The demuxer read up to the damage (its last packet ends just before it) and no further.
    assert middle - 100 < len(data) - unread <= middle


def test_a_matroska_file_cut_short_is_called_truncated(tmp_path: Path) -> None:
    data, video_path = damaged_matroska(tmp_path)
    video_path.write_bytes(data[: len(data) // 2])

    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path / "cache").get(video_path, ImageRules())
    assert one_line(error) == (
        f"{video_path}: truncated video: decoded 1.90s of the 5.00s its header declares, "
        "3.10s missing (the file ends early)"
    )


# ----------------------------------------------------------------------------- timing


def trace_frame(k: int, fps: float, source_fps: float) -> int:
    """TRACE's sampler (om-ai-lab/trace-bench, open_stream_bench/sampling.py), written out:
    the sample time rounded to 9 decimals, then floor(t * fps_src + 0.5)."""
    return math.floor(round(0.0 + k / fps, 9) * source_fps + 0.5)


def test_a_tie_goes_to_the_frame_trace_chooses(tmp_path: Path) -> None:
    # At 6 samples a second over 15 fps, sample 5 (5/6 s) lies exactly 12.5 frame periods
    # in: TRACE's 0.833333333 s picks frame 12; exact half-up would pick 13, and
    # 5 / 6 * 15 in floating point is 12.5, which picked 13 before.
    assert (trace_frame(5, 6, 15.0), math.floor(5 / 6 * 15.0 + 0.5)) == (12, 13)
    video_path = encode_numbered_video(tmp_path / "v15.mp4", 30, 64, 48, 15)

    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=6))
    expected = [min(trace_frame(k, 6, 15.0), 29) for k in range(12)]
    assert expected[5] == 12
    assert [ref.source_index for ref in video.frames] == expected
    assert [shown_frame_number(video.read(ref)) for ref in video.frames] == expected


@pytest.mark.parametrize(("fps", "source_fps"), [(1.0, float(NTSC)), (2.0, 25.0), (6.0, 15.0)])
def test_a_frame_starts_at_most_half_a_period_after_its_sample(
    fps: float, source_fps: float
) -> None:
    # The causality bound docs/protocol.md states: the nearest frame, never more than half
    # a source frame period after t (16.7 ms at 29.97 fps).
    lateness = [source_index(k / fps, source_fps) / source_fps - k / fps for k in range(3600)]
    assert max(lateness) <= 0.5 / source_fps + 1e-9
    assert max(lateness) > 0.4 / source_fps  # the bound is reached, not just respected
