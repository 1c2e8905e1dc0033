"""Frame sampling cost: our FrameCache against plain PyAV, OpenCV seeking and torchcodec.

Every method produces the same samples: sample k at t = k / fps, width capped (aspect kept),
JPEG-encoded, one file per sample on disk:

- PyAV full decode: decode every frame (PyAV, all cores), convert and resize the sampled
  ones inside PyAV's conversion, JPEG with Pillow: what FrameCache did before it planned;
- OpenCV seek per sample: cv2.CAP_PROP_POS_FRAMES to every sampled frame (each seek decodes
  again from the keyframe before it), INTER_AREA resize, OpenCV JPEG: the TRACE reference;
- torchcodec: VideoDecoder(seek_mode="exact", all cores) get_frames_played_at in chunks,
  resized by torchcodec's own Resize transform where it has one, JPEG with Pillow;
- FrameCache cold build: probe, hash, plan, decode what the samples need, JPEG, index.

Each run is a fresh process; its CPU time (user + system, all threads) and wall time are
measured around the work only. Runs are interleaved (every method on a video, then the next
video, then the next round), so that load from elsewhere spreads over all methods; the
CPU ratio against plain PyAV is taken within each round. The videos (bench/make_video.py)
are encoded once and reused from bench/out/.

    python -m bench.bench_frame_sampling                 # three videos, 1 fps, 2 rounds
    python -m bench.bench_frame_sampling --torchcodec-python /path/to/venv/bin/python

torchcodec runs under --torchcodec-python (default: this interpreter); where it cannot be
imported its rows are left out with the reason. Its PyPI wheel links the CUDA build of torch
(libtorch_cuda, libnvrtc) and loads FFmpeg's shared libraries (4 to 8) from the system: with
a CPU-only torch it runs from a separate venv holding PyPI's torch and torchcodec, with
Debian's libavcodec59 and its siblings installed. The section is printed, and written with
--section-out, or into BENCHMARKS.md with --record.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SECTION_TITLE = "## Frame sampling"
# Mean absolute grey-level difference above which two JPEGs of one sample show different
# source frames (same frame, another resizer and encoder: about 1; neighbouring frames of
# the panning test picture: well over 10).
SAME_FRAME_MAX_DIFF = 4.0
# torchcodec returns a batch of full frames per call: a few dozen at a time bound memory.
TORCHCODEC_CHUNK = 32
# (seconds, width, height, fps, keyframe spacing in frames)
VIDEOS = {
    "720p-10min-gop8s": (600, 1280, 720, 30, 240),
    "1080p-2min-gop2s": (120, 1920, 1080, 30, 60),
    "1080p-2min-gop10s": (120, 1920, 1080, 30, 300),
}
METHODS = ("pyav-full", "opencv-seek", "torchcodec", "framecache")
LABELS = {
    "pyav-full": "PyAV full decode",
    "opencv-seek": "OpenCV seek per sample",
    "torchcodec": "torchcodec (exact seek mode)",
    "framecache": "FrameCache cold build (ours)",
}


@dataclass(frozen=True)
class Job:
    """One method on one video, as handed to a worker process."""

    method: str
    video: str
    out: str
    fps: float
    max_width: int
    quality: int


@dataclass(frozen=True)
class Measured:
    method: str
    video: str
    round: int
    cpu_s: float
    wall_s: float
    samples: int
    note: str = ""


# ----------------------------------------------------------------------------- workers
# Each worker imports only what its method needs: torchcodec's may run in another venv.


def capped_size(width: int, height: int, max_width: int) -> tuple[int, int]:
    if width <= max_width:
        return width, height
    return max_width, max(1, round(height * max_width / width))


def jpeg_name(k: int) -> str:
    return f"{k:06d}.jpg"


def sample_times(duration_s: float, fps: float) -> list[float]:
    count = 0
    while count / fps < duration_s:
        count += 1
    return [k / fps for k in range(count)]


def run_pyav_full(job: Job) -> tuple[int, str]:
    """Decode every frame; the frame numbered floor(t * rate + 0.5) serves sample t."""
    import av
    from av.video.reformatter import VideoReformatter

    out = Path(job.out)
    scaler = VideoReformatter()
    k, last = 0, None
    with av.open(job.video) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        rate, time_base = Fraction(stream.guessed_rate), Fraction(stream.time_base)
        origin = None
        for frame in container.decode(stream):
            origin = frame.pts if origin is None else origin
            number = int((frame.pts - origin) * time_base * rate + Fraction(1, 2))
            while k / job.fps * float(rate) + 0.5 < number:
                _save_pyav(scaler, last, out / jpeg_name(k), job)
                k += 1
            last = frame
        duration_s = (number + 1) / float(rate)
    while k / job.fps < duration_s:
        _save_pyav(scaler, last, out / jpeg_name(k), job)
        k += 1
    return k, ""


def _save_pyav(scaler: Any, frame: Any, path: Path, job: Job) -> None:
    """Resize inside PyAV's conversion to RGB, as FrameCache does, then JPEG with Pillow."""
    from PIL import Image

    width, height = capped_size(frame.width, frame.height, job.max_width)
    rgb = scaler.reformat(frame, width=width, height=height, format="rgb24", interpolation="AREA")
    plane = rgb.planes[0]
    image = Image.frombuffer("RGB", (width, height), plane, "raw", "RGB", plane.line_size, 1)
    image.save(path, "JPEG", quality=job.quality)


def run_opencv(job: Job) -> tuple[int, str]:
    """Seek to every sampled frame number, read one frame, resize, encode."""
    import cv2

    capture = cv2.VideoCapture(job.video)
    rate = capture.get(cv2.CAP_PROP_FPS)
    n_frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    times = sample_times(n_frames / rate, job.fps)
    for k, t in enumerate(times):
        capture.set(cv2.CAP_PROP_POS_FRAMES, min(int(t * rate + 0.5), n_frames - 1))
        ok, bgr = capture.read()
        if not ok:
            raise RuntimeError(f"OpenCV could not read sample {k} of {job.video}")
        height, width = bgr.shape[:2]
        size = capped_size(width, height, job.max_width)
        if size != (width, height):
            bgr = cv2.resize(bgr, size, interpolation=cv2.INTER_AREA)
        ok, jpeg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, job.quality])
        (Path(job.out) / jpeg_name(k)).write_bytes(jpeg.tobytes())
    capture.release()
    return len(times), ""


def run_torchcodec(job: Job) -> tuple[int, str]:
    """The frames played at each sample time, decoded on all cores, resized by torchcodec."""
    import torchcodec
    from PIL import Image
    from torchcodec.decoders import VideoDecoder

    meta = VideoDecoder(job.video, seek_mode="approximate").metadata  # the header only
    size = capped_size(meta.width, meta.height, job.max_width)
    decoder, note = _torchcodec_decoder(job.video, size)
    times = sample_times(meta.end_stream_seconds - meta.begin_stream_seconds, job.fps)
    times = [meta.begin_stream_seconds + t for t in times]
    for start in range(0, len(times), TORCHCODEC_CHUNK):
        batch = decoder.get_frames_played_at(seconds=times[start : start + TORCHCODEC_CHUNK])
        for offset, chw in enumerate(batch.data):
            image = Image.fromarray(chw.permute(1, 2, 0).contiguous().numpy())
            if image.size != size:
                image = image.resize(size, Image.Resampling.BOX)
            image.save(Path(job.out) / jpeg_name(start + offset), "JPEG", quality=job.quality)
    return len(times), f"torchcodec {torchcodec.__version__} ({_ffmpeg_of_torchcodec()}){note}"


def _ffmpeg_of_torchcodec() -> str:
    try:
        import torch
        from torchcodec._core import get_ffmpeg_library_versions

        ffmpeg = get_ffmpeg_library_versions()["ffmpeg_version"]
        return f"torch {torch.__version__}, FFmpeg {ffmpeg}"
    except (ImportError, KeyError):
        return "FFmpeg version unknown"


def _torchcodec_decoder(video: str, size: tuple[int, int]):
    from torchcodec.decoders import VideoDecoder

    try:
        from torchcodec.transforms import Resize

        resize = Resize(size=(size[1], size[0]))
        return (
            VideoDecoder(video, seek_mode="exact", num_ffmpeg_threads=0, transforms=[resize]),
            ", resized by its Resize transform",
        )
    except (ImportError, TypeError):
        return VideoDecoder(video, seek_mode="exact", num_ffmpeg_threads=0), ", Pillow resize"


def run_framecache(job: Job) -> tuple[int, str]:
    """A cold FrameCache build (probe, hash, plan, decode, JPEG, index), then its JPEGs are
    copied out for the comparison."""
    from streameval.core.frames import entries
    from streameval.core.frames.cache import FrameCache
    from streameval.core.frames.decoding import DecodeStats
    from streameval.core.frames.types import ImageRules

    rules = ImageRules(fps=job.fps, max_width=job.max_width, jpeg_quality=job.quality)
    stats = DecodeStats()
    real_sample = entries.sample_video

    def counted(*args: Any, **kwargs: Any) -> Any:
        return real_sample(*args, **kwargs, stats=stats)

    # Only this worker process: the statistics of the one build it runs.
    entries.sample_video = counted
    built = FrameCache(Path(job.out) / "cache").get(Path(job.video), rules)
    for ref in built.frames:
        shutil.copyfile(
            built.directory / jpeg_name(ref.index), Path(job.out) / jpeg_name(ref.index)
        )
    plan = "planned" if stats.planned else "decoded all"
    return len(built.frames), f"{plan}, {stats.packets_decoded} packets decoded"


# Imported before the clock starts: a run measures the work, not loading libraries.
IMPORTS = {
    "pyav-full": ("av", "av.video.reformatter", "PIL.Image"),
    "opencv-seek": ("cv2",),
    "torchcodec": ("torchcodec.decoders", "torchcodec.transforms", "PIL.Image"),
    "framecache": ("streameval.core.frames.cache",),
}
RUNNERS: dict[str, Callable[[Job], tuple[int, str]]] = {
    "pyav-full": run_pyav_full,
    "opencv-seek": run_opencv,
    "torchcodec": run_torchcodec,
    "framecache": run_framecache,
}


def worker(job: Job) -> dict:
    """Run one job in this process: CPU time of every thread, wall time."""
    for module in IMPORTS[job.method]:
        importlib.import_module(module)
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    samples, note = RUNNERS[job.method](job)
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": cpu_s, "wall_s": wall_s, "samples": samples, "note": note}


def warm_lookup_worker(video: str, cache: str, fps: float, max_width: int, quality: int) -> dict:
    """A new process finding a built entry: only the lookup itself is timed."""
    from streameval.core.frames.cache import FrameCache
    from streameval.core.frames.types import ImageRules

    rules = ImageRules(fps=fps, max_width=max_width, jpeg_quality=quality)
    started = time.perf_counter()
    frames = FrameCache(Path(cache)).lookup(Path(video), rules)
    return {"wall_s": time.perf_counter() - started, "found": frames is not None}


# ----------------------------------------------------------------------------- driver


def in_new_process(python: str, payload: dict, timeout_s: float) -> dict:
    done = subprocess.run(
        [python, str(Path(__file__).resolve()), "--worker", json.dumps(payload)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def torchcodec_problem(python: str) -> str | None:
    """Why torchcodec cannot run under `python` (None: it can)."""
    done = subprocess.run(
        [python, "-c", "import torchcodec.decoders"], capture_output=True, text=True, timeout=120
    )
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


def grey(path: Path):
    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(path).convert("L"), dtype=np.float32)


def same_frames(ours: Path, theirs: Path, count: int) -> tuple[int, int]:
    """How many samples show the same source frame in both folders, and how many of those
    are the same JPEG bytes."""
    same = identical = 0
    for k in range(count):
        a, b = ours / jpeg_name(k), theirs / jpeg_name(k)
        if not (a.exists() and b.exists()):
            continue
        if a.read_bytes() == b.read_bytes():
            same, identical = same + 1, identical + 1
            continue
        x, y = grey(a), grey(b)
        if x.shape == y.shape and float(abs(x - y).mean()) <= SAME_FRAME_MAX_DIFF:
            same += 1
    return same, identical


def video_path(args: argparse.Namespace, name: str) -> Path:
    from bench.make_video import cached_video

    seconds, width, height, fps, gop = VIDEOS[name]
    return cached_video(args.out, seconds, width, height, fps, gop)


def schedule(args: argparse.Namespace) -> Iterator[tuple[int, str, str]]:
    """(round, video, method), interleaved: every method on a video, round after round."""
    for round_ in range(args.repeat):
        for name in args.videos:
            for method in args.methods:
                if method == "opencv-seek" and round_ >= args.opencv_repeat:
                    continue
                yield round_, name, method


def measure(args: argparse.Namespace, work: Path) -> tuple[list[Measured], dict]:
    videos = {name: video_path(args, name) for name in args.videos}
    skipped: dict[str, str] = {}
    if "torchcodec" in args.methods:
        problem = torchcodec_problem(args.torchcodec_python)
        if problem:
            skipped["torchcodec"] = problem
    results: list[Measured] = []
    loads = [os.getloadavg()[0]]
    for round_, name, method in schedule(args):
        if method in skipped:
            continue
        out = work / f"{name}-{method}-{round_}"
        out.mkdir(parents=True)
        job = Job(method, str(videos[name]), str(out), args.fps, args.max_width, args.quality)
        python = args.torchcodec_python if method == "torchcodec" else sys.executable
        print(f"round {round_ + 1}: {name} {method} ...", flush=True)
        found = in_new_process(python, {"job": job.__dict__}, args.timeout)
        results.append(
            Measured(
                method,
                name,
                round_,
                found["cpu_s"],
                found["wall_s"],
                found["samples"],
                found["note"],
            )
        )
        print(f"  cpu {found['cpu_s']:.1f} s, wall {found['wall_s']:.1f} s", flush=True)
        if round_ > 0:  # the first round's samples are kept for the comparison
            shutil.rmtree(out, ignore_errors=True)
        loads.append(os.getloadavg()[0])
    same = compare_with_ours(args, work)
    warm = warm_lookup(args, videos, work)
    return results, {"skipped": skipped, "same": same, "loads": loads, "warm": warm}


def compare_with_ours(args: argparse.Namespace, work: Path) -> dict[tuple[str, str], tuple]:
    """(same frame, same bytes) counts of each method's first-round samples against ours."""
    same = {}
    for name in args.videos:
        ours = work / f"{name}-framecache-0"
        count = len(list(ours.glob("*.jpg")))
        for method in args.methods:
            theirs = work / f"{name}-{method}-0"
            if method != "framecache" and ours.exists() and theirs.exists():
                same[(name, method)] = same_frames(ours, theirs, count)
    return same


def warm_lookup(args: argparse.Namespace, videos: dict[str, Path], work: Path) -> dict | None:
    """The longest video's entry, looked up by a new process (memo of its digest on disk)."""
    name = max(args.videos, key=lambda n: VIDEOS[n][0])
    cache = work / f"{name}-framecache-0" / "cache"
    if not cache.exists():
        return None
    payload = {
        "warm": [str(videos[name]), str(cache), args.fps, args.max_width, args.quality],
    }
    runs = [in_new_process(sys.executable, payload, 120) for _ in range(3)]
    return {"video": name, "runs": runs}


# ----------------------------------------------------------------------------- report


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.MULTILINE)
        model = found.group(1).strip() if found else model
    return (
        f"{model}, {len(os.sched_getaffinity(0))} cores, {platform.system()} {platform.release()}"
    )


def versions(notes: dict[str, str]) -> str:
    import av
    import cv2
    import PIL

    ffmpeg = ".".join(map(str, av.library_versions.get("libavcodec", ())))
    words = [f"PyAV {av.__version__} (libavcodec {ffmpeg})", f"OpenCV {cv2.__version__}"]
    if "torchcodec" in notes:
        words.append(notes["torchcodec"])
    words.append(f"Pillow {PIL.__version__}")
    return ", ".join(words)


def video_line(args: argparse.Namespace, name: str) -> str:
    seconds, width, height, fps, gop = VIDEOS[name]
    size = video_path(args, name).stat().st_size
    return (
        f"- `{name}`: {width}x{height}, {fps} fps, {seconds:g} s, keyframe every {gop} frames "
        f"({gop / fps:g} s), H.264 libx264 ultrafast (no B-frames), "
        f"{size * 8 / seconds / 1e6:.1f} Mbit/s, {size / 1e6:.0f} MB"
    )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(args: argparse.Namespace, results: list[Measured], extra: dict) -> list[str]:
    rows = [
        "| video | method | runs | CPU s | wall s | CPU vs PyAV full | wall vs PyAV full "
        "| same frame as ours |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in args.videos:
        for method in args.methods:
            runs = [r for r in results if r.video == name and r.method == method]
            if not runs:
                continue
            cpu_ratio, wall_ratio = ratios(results, name, method)
            shown_same = same_cell(extra["same"].get((name, method)), runs[0].samples)
            cpu_s, wall_s = median([r.cpu_s for r in runs]), median([r.wall_s for r in runs])
            rows.append(
                f"| {name} | {LABELS[method]} | {len(runs)} | {cpu_s:.1f} | {wall_s:.1f} "
                f"| {cpu_ratio} | {wall_ratio} | {shown_same} |"
            )
    return rows


def same_cell(same: tuple[int, int] | None, samples: int) -> str:
    if same is None:
        return "-"
    frames, identical = same
    return f"{frames} of {samples} ({identical} same bytes)"


def ratios(results: list[Measured], name: str, method: str) -> tuple[str, str]:
    """Median over rounds of this method's CPU and wall time over plain PyAV's, same round."""
    cpu, wall = [], []
    for run in (r for r in results if r.video == name and r.method == method):
        base = [
            r
            for r in results
            if r.video == name and r.method == "pyav-full" and r.round == run.round
        ]
        if base:
            cpu.append(run.cpu_s / base[0].cpu_s)
            wall.append(run.wall_s / base[0].wall_s)
    if not cpu:
        return "-", "-"
    return f"{median(cpu):.2f}x", f"{median(wall):.2f}x"


def per_round(results: list[Measured], name: str, method: str, field: str) -> str:
    return ", ".join(
        f"{getattr(r, field):.1f}" for r in results if r.video == name and r.method == method
    )


def section(args: argparse.Namespace, results: list[Measured], extra: dict) -> str:
    notes = {r.method: r.note for r in results if r.note}
    lines = [
        SECTION_TITLE,
        "",
        f"Measured {datetime.date.today().isoformat()} on {machine()}; {versions(notes)}.",
        "",
        f"Sampling at {args.fps:g} fps, width capped at {args.max_width}, JPEG q{args.quality}, "
        "one file per sample on disk, every method. Each run is a new process; CPU s is its "
        "user + system time over all threads for the work alone, wall s its elapsed time; "
        "medians over the runs. The ratios against PyAV full decode are taken within each "
        f"round (runs interleaved: every method on a video, then the next video; {args.repeat} "
        f"rounds, OpenCV in the first {args.opencv_repeat}).",
        "",
        *(video_line(args, name) for name in args.videos),
        "",
        *table(args, results, extra),
        "",
    ]
    for name in args.videos:
        runs = [r for r in results if r.video == name and r.method == "framecache"]
        if runs:
            lines.append(f"- FrameCache on `{name}`: {runs[0].note}.")
    for method, why in extra["skipped"].items():
        lines.append(f"- {LABELS[method]}: not measured ({why}).")
    for name in args.videos:
        for method in args.methods:
            cpu = per_round(results, name, method, "cpu_s")
            if cpu:
                wall = per_round(results, name, method, "wall_s")
                lines.append(f"- `{name}` {LABELS[method]}, every run: CPU {cpu} s; wall {wall} s.")
    warm = extra["warm"]
    if warm:
        times = ", ".join(f"{run['wall_s'] * 1000:.1f} ms" for run in warm["runs"])
        found = all(run["found"] for run in warm["runs"])
        lines.append(
            f"- Warm lookup of `{warm['video']}`'s entry in a new process (digest from the "
            f"on-disk memo, the video not read): {times}"
            f"{'' if found else ' (entry NOT found)'}; target <= 50 ms."
        )
    loads = extra["loads"]
    lines += [
        f"- 1-minute load average: {loads[0]:.2f} before, {max(loads):.2f} at most, "
        f"{loads[-1]:.2f} after (other work on the machine slows every method; the "
        "interleaved CPU ratios are the figures to compare).",
        "",
        f"Rerun: `{rerun_command(args)}` from the repository root "
        "(the videos are reused from bench/out/).",
        "",
    ]
    return "\n".join(lines)


def rerun_command(args: argparse.Namespace) -> str:
    defaults = vars(parser().parse_args([]))
    words = ["python -m bench.bench_frame_sampling"]
    for name in ("fps", "max_width", "quality", "repeat", "opencv_repeat"):
        value = getattr(args, name)
        if value != defaults[name]:
            words.append(f"--{name.replace('_', '-')} {value:g}")
    if args.videos != defaults["videos"]:
        words += ["--videos", *args.videos]
    if args.methods != defaults["methods"]:
        words += ["--methods", *args.methods]
    if args.torchcodec_python != defaults["torchcodec_python"]:
        words += ["--torchcodec-python", "PYTHON"]
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
    p.add_argument("--fps", type=float, default=1.0, help="sampling rate")
    p.add_argument("--max-width", type=int, default=960)
    p.add_argument("--quality", type=int, default=90, help="JPEG quality")
    p.add_argument("--repeat", type=int, default=2, help="rounds of interleaved runs")
    p.add_argument("--opencv-repeat", type=int, default=1, help="rounds that run OpenCV (slow)")
    p.add_argument("--videos", nargs="+", choices=list(VIDEOS), default=list(VIDEOS))
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument(
        "--torchcodec-python", default=sys.executable, help="interpreter with torchcodec"
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for one run")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out", help="video folder")
    p.add_argument("--section-out", type=Path, help="write the markdown section here")
    p.add_argument("--record", action="store_true", help="replace the section of BENCHMARKS.md")
    p.add_argument("--benchmarks", type=Path, default=REPO / "BENCHMARKS.md")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = parser().parse_args()
    if args.worker:
        payload = json.loads(args.worker)
        if "warm" in payload:
            print(json.dumps(warm_lookup_worker(*payload["warm"])))
        else:
            print(json.dumps(worker(Job(**payload["job"]))))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-frames-", dir=args.out))
    try:
        results, extra = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = section(args, results, extra)
    print()
    print(text)
    if args.section_out:
        args.section_out.write_text(text)
    if args.record:
        record(text, args.benchmarks)
        print(f"recorded in {args.benchmarks}")


if __name__ == "__main__":
    main()
