"""Frame sampling speed: our decode-once FrameCache against OpenCV random access.

Both sides produce the same samples (same source frames, width cap, JPEG quality, one file
per sample on disk): (a) FrameCache decodes the video once, sequentially; (b) the TRACE
reference approach seeks with cv2.CAP_PROP_POS_FRAMES to every sampled index, reads one
frame, resizes it with INTER_AREA and JPEG-encodes it with OpenCV. Each seek decodes again
from the previous keyframe, which is what the comparison measures.

    python -m bench.bench_frame_sampling            # 10-minute 1280x720 30 fps video, 1 fps

The video is encoded once and reused from bench/out/. Results are printed and written to
the "Frame sampling" section of BENCHMARKS.md (--no-record to skip).
"""

from __future__ import annotations

import argparse
import datetime
import io
import multiprocessing
import os
import platform
import re
import resource
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np
import PIL
from PIL import Image

from bench.make_video import cached_video
from streameval.core.frames import FrameCache, ImageRules, VideoFrames, capped_size

REPO = Path(__file__).resolve().parent.parent
SECTION_TITLE = "## Frame sampling"
# The options that change what is measured (the rest only say where files go).
MEASUREMENT_OPTIONS = (
    "seconds",
    "width",
    "height",
    "source_fps",
    "gop",
    "preset",
    "fps",
    "max_width",
    "quality",
    "repeat",
)
# Mean absolute grey-level difference above which two JPEGs of one sample show different
# source frames (same frame, different resizer and encoder: about 1; neighbouring frames of
# the panning test picture: well over 10).
SAME_FRAME_MAX_DIFF = 4.0


@dataclass(frozen=True)
class Timing:
    method: str
    seconds: float
    frames: int


def run_ours(video: Path, rules: ImageRules, cache_dir: Path) -> tuple[Timing, int]:
    """Time (a) in a fresh process: nothing memoised, and its peak RSS is (a)'s alone."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as child:
        seconds, n_frames, peak_rss = child.submit(_sample_once, video, rules, cache_dir).result()
    return Timing("FrameCache (decode once, PyAV)", seconds, n_frames), peak_rss


def _sample_once(video: Path, rules: ImageRules, cache_dir: Path) -> tuple[float, int, int]:
    started = time.perf_counter()
    frames = FrameCache(cache_dir).get(video, rules)
    elapsed = time.perf_counter() - started
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return elapsed, len(frames.frames), peak_rss


def run_opencv(video: Path, ours: VideoFrames, rules: ImageRules, out: Path) -> Timing:
    """The reference approach: seek to each sampled source frame, read, resize, encode."""
    out.mkdir(parents=True)
    started = time.perf_counter()
    capture = cv2.VideoCapture(str(video))
    for ref in ours.frames:
        capture.set(cv2.CAP_PROP_POS_FRAMES, ref.source_index)
        ok, bgr = capture.read()
        if not ok:
            raise RuntimeError(f"OpenCV could not read frame {ref.source_index} of {video}")
        height, width = bgr.shape[:2]
        size = capped_size(width, height, rules.max_width)
        if size != (width, height):
            bgr = cv2.resize(bgr, size, interpolation=cv2.INTER_AREA)
        ok, jpeg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, rules.jpeg_quality])
        (out / f"{ref.index:06d}.jpg").write_bytes(jpeg.tobytes())
    capture.release()
    return Timing(
        "OpenCV seek per sample (CAP_PROP_POS_FRAMES)",
        time.perf_counter() - started,
        len(ours.frames),
    )


def count_same_frames(ours: VideoFrames, opencv_dir: Path) -> int:
    """How many OpenCV samples show the same source frame as ours (a check on equal work)."""
    same = 0
    for ref in ours.frames:
        a = _grey(ours.read(ref))
        b = _grey((opencv_dir / f"{ref.index:06d}.jpg").read_bytes())
        if a.shape == b.shape and float(np.abs(a - b).mean()) <= SAME_FRAME_MAX_DIFF:
            same += 1
    return same


def _grey(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("L"), dtype=np.float32)


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.MULTILINE)
        model = found.group(1).strip() if found else model
    return (
        f"{model}, {len(os.sched_getaffinity(0))} cores, {platform.system()} {platform.release()}"
    )


def versions() -> str:
    ffmpeg = av.library_versions.get("libavcodec", ())
    return (
        f"PyAV {av.__version__} (libavcodec {'.'.join(map(str, ffmpeg))}), "
        f"OpenCV {cv2.__version__}, Pillow {PIL.__version__}"
    )


def table(timings: list[Timing]) -> str:
    slowest = max(t.seconds for t in timings)
    rows = [
        "| method | seconds | sampled frames/s | speed-up |",
        "|---|---:|---:|---:|",
    ]
    for t in timings:
        rows.append(
            f"| {t.method} | {t.seconds:.1f} | {t.frames / t.seconds:.1f} | "
            f"{slowest / t.seconds:.2f}x |"
        )
    return "\n".join(rows)


def section(args: argparse.Namespace, video: Path, timings: list[Timing], notes: list[str]) -> str:
    lines = [
        SECTION_TITLE,
        "",
        f"Measured {datetime.date.today().isoformat()} on {machine()}; {versions()}.",
        "",
        f"Video: {args.seconds:g} s, {args.width}x{args.height}, {args.source_fps} fps H.264 "
        f"(libx264 preset {args.preset}, keyframe every {args.gop} frames, "
        f"{video.stat().st_size * 8 / args.seconds / 1e6:.1f} Mbit/s, moving synthetic picture). "
        f"Sampling at {args.fps:g} fps, width capped at {args.max_width}, JPEG q{args.quality}, "
        "one file per sample on disk, both methods.",
        "",
        table(timings),
        "",
        *(f"- {note}" for note in notes),
        "",
        f"Rerun: `{rerun_command(args)}` from the repository root "
        "(the video is reused from bench/out/).",
        "",
    ]
    return "\n".join(lines)


def rerun_command(args: argparse.Namespace) -> str:
    """The command line that repeats this measurement (options that differ from defaults)."""
    defaults = vars(parser().parse_args([]))
    words = ["python -m bench.bench_frame_sampling"]
    for name in MEASUREMENT_OPTIONS:
        value = getattr(args, name)
        if value != defaults[name]:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            words.append(f"--{name.replace('_', '-')} {shown}")
    return " ".join(words)


def record(text: str, path: Path) -> None:
    """Replace this benchmark's section of BENCHMARKS.md, keeping every other section."""
    current = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION_TITLE)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text + "\n", current, count=1)
    else:
        updated = current.rstrip("\n") + "\n\n" + text
    path.write_text(updated.rstrip("\n") + "\n")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=600.0, help="video length")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--source-fps", type=int, default=30, help="frame rate of the video")
    p.add_argument("--gop", type=int, default=250, help="keyframe spacing in frames")
    p.add_argument("--preset", default="ultrafast", help="libx264 preset for the test video")
    p.add_argument("--fps", type=float, default=1.0, help="sampling rate")
    p.add_argument("--max-width", type=int, default=960)
    p.add_argument("--quality", type=int, default=90, help="JPEG quality")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out", help="video folder")
    p.add_argument("--benchmarks", type=Path, default=REPO / "BENCHMARKS.md")
    p.add_argument("--repeat", type=int, default=1, help="runs of each method; the best counts")
    p.add_argument("--no-record", action="store_true", help="print only")
    return p


def main() -> None:
    args = parser().parse_args()
    rules = ImageRules(fps=args.fps, max_width=args.max_width, jpeg_quality=args.quality)
    video = cached_video(
        args.out, args.seconds, args.width, args.height, args.source_fps, args.gop, args.preset
    )
    work = Path(tempfile.mkdtemp(prefix="bench-frames-", dir=args.out))
    load_before = os.getloadavg()[0]
    ours_runs: list[Timing] = []
    opencv_runs: list[Timing] = []
    try:
        for attempt in range(args.repeat):
            print(f"(a) FrameCache, run {attempt + 1} ...", flush=True)
            timing, peak_rss = run_ours(video, rules, work / f"cache-{attempt}")
            ours_runs.append(timing)
            ours = FrameCache(work / f"cache-{attempt}").get(video, rules)
            print(f"(b) OpenCV seeking, run {attempt + 1} ...", flush=True)
            opencv_dir = work / f"opencv-{attempt}"
            opencv_runs.append(run_opencv(video, ours, rules, opencv_dir))
            same = count_same_frames(ours, opencv_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # The fastest run of each is the one least disturbed by other work on the machine.
    ours_timing = min(ours_runs, key=lambda t: t.seconds)
    opencv_timing = min(opencv_runs, key=lambda t: t.seconds)
    timings = [opencv_timing, ours_timing]
    notes = [
        f"Speed-up of FrameCache over OpenCV seeking: "
        f"{opencv_timing.seconds / ours_timing.seconds:.2f}x (target: at least 3x).",
        f"Best of {args.repeat} run(s) each; all runs (s): FrameCache "
        f"{', '.join(f'{t.seconds:.1f}' for t in ours_runs)}; OpenCV "
        f"{', '.join(f'{t.seconds:.1f}' for t in opencv_runs)}.",
        f"Peak RSS of the process that ran (a): {peak_rss / 2**20:.0f} MiB.",
        f"OpenCV samples showing the same source frame as ours: {same} of {len(ours.frames)}.",
        # Other work on the machine slows either side; the load says whether it was quiet.
        f"1-minute load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after.",
    ]
    text = section(args, video, timings, notes)
    print()
    print(text)
    if not args.no_record:
        record(text, args.benchmarks)
        print(f"recorded in {args.benchmarks}")


if __name__ == "__main__":
    main()
