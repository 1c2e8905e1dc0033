"""Processes sharing a frame cache decode each video once (core_server/frames/build_lock.py):
one builds while the others wait for its entry, and decoding ahead leaves a video another
process is decoding."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from streameval.core.frames import build_lock
from streameval.core.frames.build_lock import entry_build_lock
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.entries import entry_dir
from streameval.core.frames.types import ImageRules
from tests.test_frames import encode_numbered_video

RULES = ImageRules(fps=2.0, max_width=448, jpeg_quality=90)

# A process asking the cache for the video: prints whether it decoded it, and its frames.
ASK = """
import json, sys
from pathlib import Path
import streameval.core.frames.cache as cache
from streameval.core.frames.types import ImageRules

built = []
build = cache.build_entry
cache.build_entry = lambda *args: built.append(1) or build(*args)
rules = ImageRules(fps=2.0, max_width=448, jpeg_quality=90)
frames = getattr(cache.FrameCache(Path(sys.argv[1])), sys.argv[3])(Path(sys.argv[2]), rules)
print(json.dumps({"built": len(built), "frames": None if frames is None else len(frames.frames)}))
"""


def ask(root: Path, video: Path, how: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", ASK, str(root), str(video), how]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def answer(process: subprocess.Popen[str]) -> dict:
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    return json.loads(out)


def hold_build_lock(entry: Path) -> subprocess.Popen[str]:
    """A process that takes `entry`'s build lock, prints `held` and keeps it for 10 minutes."""
    hold = (
        "import sys, time\nfrom pathlib import Path\n"
        "from streameval.core.frames.build_lock import entry_build_lock\n"
        "with entry_build_lock(Path(sys.argv[1]), wait=True):\n"
        "    print('held', flush=True)\n    time.sleep(600)\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", hold, str(entry)], stdout=subprocess.PIPE, text=True
    )


def test_processes_waiting_for_one_entry_decode_it_once(tmp_path: Path) -> None:
    video = encode_numbered_video(tmp_path / "v.mp4", 60, 64, 48, 30)
    root = tmp_path / "cache"
    final = entry_dir(root / "frames", FrameCache(root / "frames").digest(video), RULES)
    with entry_build_lock(final, wait=True) as mine:
        assert mine
        # All three ask while the lock is held: each either waits for it already or will.
        askers = [ask(root / "frames", video, "get") for _ in range(3)]
        time.sleep(1.0)
        assert [process.poll() for process in askers] == [None, None, None]
    answers = [answer(process) for process in askers]
    assert sorted(a["built"] for a in answers) == [0, 0, 1]
    assert [a["frames"] for a in answers] == [4, 4, 4]  # 2 s of video at 2 fps


def test_decoding_ahead_leaves_a_video_another_process_decodes(tmp_path: Path) -> None:
    video = encode_numbered_video(tmp_path / "v.mp4", 60, 64, 48, 30)
    root = tmp_path / "cache" / "frames"
    final = entry_dir(root, FrameCache(root).digest(video), RULES)
    with entry_build_lock(final, wait=True):
        busy = answer(ask(root, video, "get_unless_busy"))
    assert busy == {"built": 0, "frames": None}
    free = answer(ask(root, video, "get_unless_busy"))
    assert free == {"built": 1, "frames": 4}
    # Built now: this process loads it whether or not anyone holds the lock.
    with entry_build_lock(final, wait=True):
        assert len(FrameCache(root).get_unless_busy(video, RULES).frames) == 4


def test_a_lock_held_by_a_killed_process_is_free(tmp_path: Path) -> None:
    video = encode_numbered_video(tmp_path / "v.mp4", 60, 64, 48, 30)
    root = tmp_path / "cache" / "frames"
    final = entry_dir(root, FrameCache(root).digest(video), RULES)
    holder = hold_build_lock(final)
    try:
        assert holder.stdout.readline() == "held\n"
        assert answer(ask(root, video, "get_unless_busy"))["frames"] is None
    finally:
        holder.kill()
        holder.wait()
    assert answer(ask(root, video, "get")) == {"built": 1, "frames": 4}


def test_a_waiter_builds_itself_once_a_stopped_builder_goes_silent(tmp_path, monkeypatch):
    """A builder stopped without dying (SIGSTOP) keeps its flock; after SILENT_BUILDER_S
    without a new file in its partial folder, the waiter decodes the video itself."""
    video = encode_numbered_video(tmp_path / "v.mp4", 60, 64, 48, 30)
    root = tmp_path / "cache" / "frames"
    final = entry_dir(root, FrameCache(root).digest(video), RULES)
    monkeypatch.setattr(build_lock, "SILENT_BUILDER_S", 1.0)
    holder = hold_build_lock(final)
    try:
        assert holder.stdout.readline() == "held\n"
        holder.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        frames = FrameCache(root).get(video, RULES)
        waited = time.monotonic() - started
        assert holder.poll() is None  # it still holds the lock
    finally:
        holder.kill()
        holder.wait()
    assert len(frames.frames) == 4
    assert waited >= 1.0
