"""What streaming a video's sound costs the Core (issue 37).

    python bench/bench_audio.py            # print the section
    python bench/bench_audio.py --write    # and put it into BENCHMARKS.md

Decoding: a 10-minute video's 48 kHz stereo AAC track decoded and resampled to 16 kHz mono
PCM (`decode_audio`), then read back from the cache (`audio_track`). Streaming: the logical
pacing throughput run of bench_harness.py (full prefix of the same 10-minute video at 1 fps,
the no-op `silent` adapter, every event stored in SQLite), once with video alone and once
with video and sound (a 0.5 s chunk, acknowledged, between the frames).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import av
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_harness import (  # noqa: E402
    OUT,
    THROUGHPUT_IN_FLIGHT,
    load_average,
    measured_run,
    qa_benchmark,
    throughput_video,
)
from bench.report import update_section  # noqa: E402
from streameval.core.frames.audio_track import audio_track, decode_audio  # noqa: E402
from streameval.core.frames.digest import video_digest  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import EventKind  # noqa: E402

SESSIONS = 16
SOURCE_RATE = 48_000


def with_sound(video: Path) -> Path:
    """The video with a 48 kHz stereo AAC track of noise bursts, its picture copied as is."""
    path = video.with_name(video.stem + "-aac.mp4")
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    with av.open(str(video)) as source, av.open(str(path), "w") as target:
        picture = target.add_stream_from_template(source.streams.video[0])
        sound = target.add_stream("aac", rate=SOURCE_RATE, layout="stereo")
        for packet in source.demux(source.streams.video[0]):
            if packet.dts is not None:
                packet.stream = picture
                target.mux(packet)
        seconds = float(source.streams.video[0].duration * source.streams.video[0].time_base)
        size, first = 1024, 0
        while first < seconds * SOURCE_RATE:
            block = (rng.standard_normal((1, 2 * size)) * 3000).astype(np.int16)
            frame = av.AudioFrame.from_ndarray(block, format="s16", layout="stereo")
            frame.sample_rate, frame.pts = SOURCE_RATE, first
            target.mux(sound.encode(frame))
            first += size
        target.mux(sound.encode())
    return path


def bench_decode(video: Path) -> str:
    started = time.perf_counter()
    track = decode_audio(video, 16_000)
    decoded_s = time.perf_counter() - started
    digest = video_digest(video)
    with tempfile.TemporaryDirectory() as cache:
        audio_track(Path(cache), video, digest, 16_000)  # builds the entry
        started = time.perf_counter()
        audio_track(Path(cache), video, digest, 16_000)
        cached_s = time.perf_counter() - started
    minutes = track.samples / 16_000 / 60
    return (
        f"| decode + resample ({minutes:.0f} min, 48 kHz stereo AAC -> 16 kHz mono) | "
        f"{decoded_s:.2f} s | {minutes * 60 / decoded_s:,.0f}x real time |\n"
        f"| read back from the cache ({len(track.pcm) / 2**20:.1f} MiB) | "
        f"{cached_s * 1000:.1f} ms | |\n"
    )


def streaming_row(benchmark: Path, label: str, modalities: str) -> str:
    summary, elapsed, _, store_url = measured_run(
        "silent",
        benchmark,
        f"audio-{modalities.replace(',', '-')}",
        "--concurrency",
        str(THROUGHPUT_IN_FLIGHT),
        "--qa-history",
        "0",
        "--modalities",
        modalities,
        watch_memory=False,
    )
    with Store(store_url) as store:
        events = list(store.iter_events(summary["run_id"]))
    frames = [e.runtime_ns for e in events if e.kind == EventKind.FRAME_SENT]
    chunks = sum(1 for e in events if e.kind == EventKind.AUDIO_SENT)
    streaming_s = (max(frames) - min(frames)) / 1e9
    return (
        f"| {label} | {len(frames)} | {chunks} | {len(events)} | {elapsed:.2f} | "
        f"{streaming_s:.2f} | {len(frames) / streaming_s:,.0f} | {summary['core_cpu_s']:.2f} |\n"
    )


def section() -> str:
    video = with_sound(throughput_video())
    benchmark = qa_benchmark(video, [599.0] * SESSIONS, "audio")
    decode = bench_decode(video)
    before = load_average()
    rows = streaming_row(benchmark, "video", "video") + streaming_row(
        benchmark, "video + audio", "video,audio"
    )
    return (
        f"Measured {date.today()} on {platform.machine()}, rerun: "
        "`python bench/bench_audio.py --write`.\n\n"
        "| sound | time | rate |\n|---|---|---|\n"
        f"{decode}\n"
        f"Logical pacing, {SESSIONS} sessions x 600 frames (the full prefix of a 10-minute "
        f"320x180 video at 1 fps), {THROUGHPUT_IN_FLIGHT} in flight, the no-op adapter "
        "(`silent`, which takes sound and ignores it), every event committed to SQLite; "
        "with sound, two 0.5 s chunks (16 kHz mono, 16 KB each) go out before each frame, "
        "each waiting for its acknowledgement (logical pacing's rule for every message). "
        "Streaming: first to last frame sent.\n\n"
        "| | frames | audio chunks | events stored | whole process (s) | streaming (s) | "
        "frames/s | Core CPU (s) |\n|---|---|---|---|---|---|---|---|\n"
        f"{rows}\n1/5/15-minute load average before: {before}, after: {load_average()}.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    body = section()
    print(body)
    if args.write:
        update_section("Streaming sound", body)


if __name__ == "__main__":
    main()
