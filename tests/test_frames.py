"""The frame pipeline on real videos encoded with PyAV.

Every test video shows its frame number as two grey bars (high and low base-16 digit), so a
sampled JPEG tells which source frame it came from.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from streameval.core.frames.cache import FrameCache
from streameval.core.frames.entries import INDEX_FORMAT
from streameval.core.frames.errors import ImageRulesError, VideoDecodeError
from streameval.core.frames.types import ImageRules, VideoFrames

NTSC = Fraction(30000, 1001)


def encode_video(
    path: Path,
    pictures: Sequence[np.ndarray],
    rate: Fraction | int,
    *,
    codec: str = "libx264",
    codec_options: dict[str, str] | None = None,
    pts_ms: Sequence[int] | None = None,
    display_rotation: int | None = None,
    tags: dict[str, str] | None = None,
    container_format: str | None = None,
    container_options: dict[str, str] | None = None,
    sample_aspect_ratio: Fraction | None = None,
    first_frame: int = 0,
    audio_s: float = 0.0,
) -> Path:
    """Encode RGB pictures with PyAV. `codec_options` go to the encoder (keyframe spacing
    "g", B-frames "bf", "x264-params"); `pts_ms` (one per picture) gives irregular timestamps;
    `display_rotation` (PyAV's counter-clockwise degrees) is written as a display matrix;
    `tags` go into the stream's metadata; the container follows the suffix unless named.
    `sample_aspect_ratio` gives non-square pixels; `first_frame` starts the timestamps that
    many frame periods after 0; `audio_s` adds a silent Opus track that long."""
    with av.open(
        str(path), "w", format=container_format, options=container_options or {}
    ) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.height, stream.width = pictures[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        if sample_aspect_ratio is not None:
            stream.codec_context.sample_aspect_ratio = sample_aspect_ratio
        if codec_options:
            stream.options = codec_options
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
        if display_rotation is not None:
            stream.set_display_rotation(display_rotation)
        stream.metadata.update(tags or {})
        # Every stream is declared before the first packet is muxed.
        audio = container.add_stream("libopus", rate=48000) if audio_s else None
        for i, pixels in enumerate(pictures):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[i], Fraction(1, 1000)
            elif first_frame:
                frame.pts = first_frame + i
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
        if audio is not None:
            _add_silence(container, audio, audio_s)
    return path


def _add_silence(
    container: av.container.OutputContainer, audio: av.AudioStream, seconds: float
) -> None:
    """`seconds` of silence at 48 kHz mono, in 20 ms frames."""
    for n in range(round(seconds / 0.02)):
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 960), np.float32), "fltp", "mono")
        frame.sample_rate, frame.pts = 48000, n * 960
        container.mux(audio.encode(frame))
    container.mux(audio.encode())


def numbered_picture(i: int, width: int, height: int) -> np.ndarray:
    """A picture showing i as two grey bars (high and low base-16 digit; i < 256)."""
    pixels = np.empty((height, width, 3), np.uint8)
    pixels[:, : width // 2] = (i // 16) * 16 + 8
    pixels[:, width // 2 :] = (i % 16) * 16 + 8
    return pixels


def encode_numbered_video(
    path: Path, n_frames: int, width: int, height: int, rate: Fraction | int, **encoding
) -> Path:
    """A video whose frame i shows i (see `numbered_picture`); `encoding` as `encode_video`."""
    pictures = [numbered_picture(i, width, height) for i in range(n_frames)]
    return encode_video(path, pictures, rate, **encoding)


def shown_frame_number(jpeg: bytes) -> int:
    grey = np.asarray(Image.open(io.BytesIO(jpeg)).convert("L"), dtype=np.float64)
    quarter = grey.shape[1] // 4
    high, low = grey[:, :quarter].mean(), grey[:, -quarter:].mean()
    return int(high // 16) * 16 + int(low // 16)


def expected_sources(n_frames: int, source_fps: float, fps: float) -> list[int]:
    """The spec's rule, written out independently: floor(t * fps_src + 0.5), last frame cap."""
    duration = n_frames / source_fps
    sources = []
    k = 0
    while k / fps < duration:
        sources.append(min(math.floor(k / fps * source_fps + 0.5), n_frames - 1))
        k += 1
    return sources


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("videos")
    return {
        "30": encode_numbered_video(folder / "v30.mp4", 120, 64, 48, 30),
        "25": encode_numbered_video(folder / "v25.mp4", 100, 64, 48, 25),
        "ntsc": encode_numbered_video(folder / "ntsc.mp4", 120, 64, 48, NTSC),
    }


# ----------------------------------------------------------------------------- sampling


@pytest.mark.parametrize(
    ("name", "n_frames", "source_fps"),
    [("30", 120, 30.0), ("25", 100, 25.0), ("ntsc", 120, float(NTSC))],
)
@pytest.mark.parametrize("fps", [1.0, 2.0])
def test_samples_the_source_frame_the_formula_names(
    videos: dict[str, Path], tmp_path: Path, name: str, n_frames: int, source_fps: float, fps: float
) -> None:
    video = FrameCache(tmp_path).get(videos[name], ImageRules(fps=fps))

    sources = expected_sources(n_frames, source_fps, fps)
    assert [ref.source_index for ref in video.frames] == sources
    assert [shown_frame_number(video.read(ref)) for ref in video.frames] == sources
    assert [ref.index for ref in video.frames] == list(range(len(sources)))
    assert [ref.t for ref in video.frames] == [k / fps for k in range(len(sources))]
    assert video.source_fps == source_fps
    assert video.duration_s == pytest.approx(n_frames / source_fps)
    digest = sha256_of(videos[name])
    assert video.video_digest == digest
    assert [ref.frame_id for ref in video.frames] == [f"{digest[:16]}:{s}" for s in sources]


def test_exact_sample_lists(videos: dict[str, Path], tmp_path: Path) -> None:
    cache = FrameCache(tmp_path)
    at_1fps = [r.source_index for r in cache.get(videos["30"], ImageRules(fps=1)).frames]
    at_2fps = [r.source_index for r in cache.get(videos["25"], ImageRules(fps=2)).frames]
    ntsc = [r.source_index for r in cache.get(videos["ntsc"], ImageRules(fps=1)).frames]

    assert at_1fps == [0, 30, 60, 90]
    assert at_2fps == [0, 13, 25, 38, 50, 63, 75, 88]
    # 4 s * 29.97 + 0.5 rounds to frame 120, past the last one (119): the last frame is shown.
    assert ntsc == [0, 30, 60, 90, 119]


def test_between_is_inclusive_and_ordered(videos: dict[str, Path], tmp_path: Path) -> None:
    video = FrameCache(tmp_path).get(videos["30"], ImageRules(fps=2))

    assert [ref.t for ref in video.between(1.0, 2.5)] == [1.0, 1.5, 2.0, 2.5]
    assert [ref.t for ref in video.between(0.1 + 0.2, 0.1 + 0.4)] == [0.5]
    assert video.between(5.0, 9.0) == []
    assert [ref.t for ref in video.between(-1.0, 0.0)] == [0.0]


def test_read_rejects_a_ref_from_other_rules(videos: dict[str, Path], tmp_path: Path) -> None:
    cache = FrameCache(tmp_path)
    one = cache.get(videos["30"], ImageRules(fps=1))
    two = cache.get(videos["30"], ImageRules(fps=2))

    with pytest.raises(ValueError, match="sample 1"):
        one.read(two.frames[1])


# ----------------------------------------------------------------------------- images


def test_width_is_capped_keeping_aspect(tmp_path: Path) -> None:
    video_path = encode_numbered_video(tmp_path / "hd.mp4", 6, 1920, 1080, 30)
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=10))

    assert [(r.width, r.height) for r in video.frames] == [(960, 540)] * 2
    for ref in video.frames:
        jpeg = video.read(ref)
        image = Image.open(io.BytesIO(jpeg))
        assert image.format == "JPEG"
        assert image.size == (960, 540)
        assert ref.nbytes == len(jpeg)
    assert [shown_frame_number(video.read(r)) for r in video.frames] == [0, 3]


def test_narrow_video_is_not_upscaled(tmp_path: Path) -> None:
    video_path = encode_numbered_video(tmp_path / "small.mp4", 30, 320, 180, 30)
    video = FrameCache(tmp_path / "cache").get(video_path, ImageRules(fps=1))

    assert [(r.width, r.height) for r in video.frames] == [(320, 180)]
    assert Image.open(io.BytesIO(video.read(video.frames[0]))).size == (320, 180)


@pytest.mark.parametrize("quality", [90, 40])
def test_jpeg_quality_follows_the_rules(
    videos: dict[str, Path], tmp_path: Path, quality: int
) -> None:
    video = FrameCache(tmp_path).get(videos["30"], ImageRules(jpeg_quality=quality))
    reference = io.BytesIO()
    Image.new("RGB", (8, 8)).save(reference, "JPEG", quality=quality)

    for ref in video.frames:
        tables = Image.open(io.BytesIO(video.read(ref))).quantization
        assert tables == Image.open(reference).quantization


def test_rules_key_is_stable_and_distinct() -> None:
    assert ImageRules().key() == "1.0fps-w960-q90"
    assert ImageRules(fps=0.5, max_width=640, jpeg_quality=80).key() == "0.5fps-w640-q80"
    assert ImageRules(fps=2).key() == ImageRules(fps=2.0).key()


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"fps": 0}, "fps must be a positive"),
        ({"fps": float("nan")}, "fps must be a positive"),
        ({"max_width": 0}, "max_width must be >= 1"),
        ({"jpeg_quality": 101}, "jpeg_quality must be in 1..100"),
    ],
)
def test_bad_rules_are_refused(kwargs: dict, problem: str) -> None:
    with pytest.raises(ImageRulesError, match=problem):
        ImageRules(**kwargs)


# ----------------------------------------------------------------------------- caching


def test_decodes_once_and_reuses_disk(
    videos: dict[str, Path], tmp_path: Path, decodes: list[str]
) -> None:
    rules = ImageRules(fps=2)
    first = FrameCache(tmp_path).get(videos["25"], rules)
    digest = sha256_of(videos["25"])
    entry = tmp_path / digest[:2] / f"{digest}-{rules.key()}"

    again = FrameCache(tmp_path)
    assert again.get(videos["25"], rules) == first
    assert again.get(videos["25"], rules) == first
    assert decodes == [str(videos["25"])]
    assert first.directory == entry
    assert sorted(p.name for p in entry.iterdir()) == [
        *(f"{k:06d}.jpg" for k in range(8)),
        "index.json",
    ]


def test_same_bytes_under_another_name_share_the_entry(
    videos: dict[str, Path], tmp_path: Path, decodes: list[str]
) -> None:
    copy = tmp_path / "copy.mp4"
    copy.write_bytes(videos["30"].read_bytes())
    cache = FrameCache(tmp_path / "cache")

    assert cache.get(copy, ImageRules()).frames == cache.get(videos["30"], ImageRules()).frames
    assert decodes == [str(copy)]


async def test_concurrent_sessions_decode_once(
    videos: dict[str, Path], tmp_path: Path, decodes: list[str]
) -> None:
    cache = FrameCache(tmp_path)
    results = await asyncio.gather(*(cache.aget(videos["ntsc"], ImageRules()) for _ in range(8)))

    assert decodes == [str(videos["ntsc"])]
    assert all(isinstance(r, VideoFrames) and r == results[0] for r in results)
    assert len(results[0].frames) == 5


def test_concurrent_threads_decode_once(
    videos: dict[str, Path], tmp_path: Path, decodes: list[str]
) -> None:
    cache = FrameCache(tmp_path)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: cache.get(videos["25"], ImageRules()), range(4)))

    assert decodes == [str(videos["25"])]
    assert all(r == results[0] for r in results)


def test_half_written_entry_is_rebuilt(
    videos: dict[str, Path], tmp_path: Path, decodes: list[str]
) -> None:
    rules = ImageRules(fps=1)
    built = FrameCache(tmp_path).get(videos["30"], rules)
    # A killed builder: frames partly there, one of them garbage, no index.json.
    (built.directory / "index.json").unlink()
    (built.directory / "000002.jpg").write_bytes(b"half a jpeg")

    rebuilt = FrameCache(tmp_path).get(videos["30"], rules)

    assert len(decodes) == 2
    assert rebuilt == built
    assert [shown_frame_number(rebuilt.read(r)) for r in rebuilt.frames] == [0, 30, 60, 90]


def test_unreadable_index_is_rebuilt(
    videos: dict[str, Path], tmp_path: Path, decodes: list[str]
) -> None:
    built = FrameCache(tmp_path).get(videos["25"], ImageRules())
    (built.directory / "index.json").write_text('{"format": 1, "fra')

    assert FrameCache(tmp_path).get(videos["25"], ImageRules()) == built
    assert len(decodes) == 2
    assert json.loads((built.directory / "index.json").read_text())["format"] == INDEX_FORMAT == 3


def test_an_entry_of_an_older_format_is_rebuilt(
    videos: dict[str, Path], tmp_path: Path, decodes: list[str]
) -> None:
    # Format 2 entries were sampled without the pixel aspect or TRACE's tie rule.
    built = FrameCache(tmp_path).get(videos["25"], ImageRules())
    index = json.loads((built.directory / "index.json").read_text())
    index["format"] = 2
    (built.directory / "index.json").write_text(json.dumps(index))

    assert FrameCache(tmp_path).get(videos["25"], ImageRules()) == built
    assert len(decodes) == 2
    assert json.loads((built.directory / "index.json").read_text())["format"] == 3


def test_stale_partial_folders_are_cleaned(videos: dict[str, Path], tmp_path: Path) -> None:
    rules = ImageRules()
    digest = sha256_of(videos["30"])
    entry = tmp_path / digest[:2] / f"{digest}-{rules.key()}"
    entry.parent.mkdir(parents=True)
    stale = entry.with_name(entry.name + ".partial-1-dead")
    live = entry.with_name(entry.name + ".partial-2-busy")
    for folder in (stale, live):
        folder.mkdir()
        (folder / "000000.jpg").write_bytes(b"x")
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))

    FrameCache(tmp_path).get(videos["30"], rules)

    # The build lock's file stays beside its entry (frames/build_lock.py).
    names = [entry.name, f"{entry.name}.lock", live.name]
    assert sorted(p.name for p in entry.parent.iterdir()) == names


# ----------------------------------------------------------------------------- bad videos


def assert_one_line(error: pytest.ExceptionInfo[VideoDecodeError], *parts: str) -> None:
    message = str(error.value)
    assert "\n" not in message
    for part in parts:
        assert part in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path).get(tmp_path / "nope.mp4", ImageRules())
    assert_one_line(error, "nope.mp4", "video file not found")


def test_folder_instead_of_a_file(tmp_path: Path) -> None:
    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path).get(tmp_path, ImageRules())
    assert_one_line(error, str(tmp_path), "not a regular file")


def test_truncated_mp4(videos: dict[str, Path], tmp_path: Path) -> None:
    cut = tmp_path / "cut.mp4"
    data = videos["30"].read_bytes()
    cut.write_bytes(data[: len(data) // 2])

    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path / "cache").get(cut, ImageRules())
    assert_one_line(error, "cut.mp4: Invalid data found when processing input")
    assert not any((tmp_path / "cache").rglob("*.jpg"))


def test_truncated_mkv_is_caught_against_its_declared_duration(tmp_path: Path) -> None:
    whole = encode_numbered_video(tmp_path / "whole.mkv", 150, 160, 90, 30)
    cut = tmp_path / "cut.mkv"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])

    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path / "cache").get(cut, ImageRules())
    assert_one_line(error, "cut.mkv", "truncated video", "of the 5.00s its header declares")
    # Nothing half-built is left behind.
    assert not any((tmp_path / "cache").rglob("*.jpg"))


def test_random_bytes(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(np.random.default_rng(7).bytes(4096))

    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path / "cache").get(junk, ImageRules())
    assert_one_line(error, "junk.mp4: Invalid data found when processing input")


def test_audio_only_file_has_no_video_stream(tmp_path: Path) -> None:
    audio = tmp_path / "tone.wav"
    with av.open(str(audio), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        samples = av.AudioFrame.from_ndarray(
            np.zeros((1, 8000), np.int16), format="s16", layout="mono"
        )
        samples.sample_rate = 8000
        container.mux(stream.encode(samples))
        container.mux(stream.encode())

    with pytest.raises(VideoDecodeError) as error:
        FrameCache(tmp_path / "cache").get(audio, ImageRules())
    assert_one_line(error, "tone.wav", "no video stream")
