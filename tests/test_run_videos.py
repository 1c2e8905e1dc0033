"""A run is bound to its videos (issue 33, item 1): real processes, real encoded videos.

A run records the sha256 of each video when it is created (or when a worker first reads a
video it has none for). A video overwritten with another real video after the run was
SIGKILLed, between frame preparation and a session's start, or before a worker joins a
detached run, is refused: its sessions fail at stage `frames` with cause `input` and one line
naming the file, the other sessions finish, and no frame of the new file is sent or cached.
A video rewritten with the same bytes resumes as before.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind
from tests.faults import cli, wait_for
from tests.timeline_fixtures import PROACTIVE, QA, QA_EARLY, write_benchmark, write_video

# t:pro:1 and t:qa:1 stream v.mp4, t:qa:2 streams w.mp4; with one session at a time the
# queue hands them out in this order (by session id).
ON_W = QA_EARLY.model_copy(update={"video_path": "w.mp4"})
RECORDS = (QA, ON_W, PROACTIVE)
CHANGED = "t:qa:2"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    """The benchmark file; its videos v.mp4 and w.mp4 lie beside it."""
    path = write_benchmark(tmp_path / "bench", RECORDS)
    write_video(path.parent / "w.mp4", seconds=20, fps=8)
    return path


def start_run(adapter_url: str, bench: Path, *options: str) -> subprocess.Popen[str]:
    """`streameval run` of the benchmark, one session at a time, as a process."""
    command = cli(
        "run", "--adapter-url", adapter_url, "--benchmark", str(bench), "--concurrency", "1",
        "--json", *options,
    )  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def detached_run(url: str, bench: Path, cache: Path) -> str:
    """A run created for workers (`run --detach`); its id."""
    command = cli("run", "--detach", "--benchmark", str(bench), "--store", url, "--json")
    created = subprocess.run(
        [*command, "--cache-dir", str(cache)], capture_output=True, text=True, timeout=120
    )
    assert created.returncode == 0, created.stderr
    return json.loads(created.stdout)["run_id"]


def work(url: str, run_id: str, cache: Path) -> dict[str, object]:
    """One `streameval worker` on the run until no session is left; its JSON summary."""
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        command = cli("worker", "--store", url, "--run", run_id, "--adapter-url", adapter.url)
        worked = subprocess.run(
            [*command, "--json", "--cache-dir", str(cache)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert worked.returncode == 0, worked.stderr
    return json.loads(worked.stdout)


def replace_with_another_video(video: Path) -> str:
    """Overwrite `video` in place with another real H.264 video; its sha256."""
    before = sha256_of(video)
    write_video(video, seconds=20, fps=5)
    after = sha256_of(video)
    assert after != before
    return after


def check_refused(store: Store, run_id: str, video: Path, new_digest: str) -> None:
    """The session of the replaced video failed at `frames` with cause `input` and one line
    naming the file; the others finished; no frame of the new file was sent or cached."""
    sessions = {s.session_id: s for s in store.sessions(run_id)}
    assert {sid: s.status for sid, s in sessions.items()} == {
        "t:pro:1": "finished",
        "t:qa:1": "finished",
        CHANGED: "failed",
    }
    failed = sessions[CHANGED]
    assert (failed.failure_stage, failed.failure_cause) == ("frames", "input")
    assert failed.failure_reason.startswith(f"{video}: changed since the run started (sha256 ")
    assert f"{new_digest[:12]}..., the run recorded " in failed.failure_reason
    assert "\n" not in failed.failure_reason
    events = list(store.iter_events(run_id, CHANGED))
    assert [e.kind for e in events] == [EventKind.SESSION_FAILED]
    assert events[0].payload.cause == "input"
    sent = [e.payload.frame_id for e in store.iter_events(run_id) if e.kind == EventKind.FRAME_SENT]
    assert sent and not any(frame_id.startswith(new_digest[:16]) for frame_id in sent)
    frames = Path(store.get_run(run_id).config["cache_dir"]) / "frames"
    assert not list(frames.glob(f"{new_digest[:2]}/{new_digest}-*"))


def test_a_video_replaced_after_a_kill_is_refused_on_resume_and_the_rest_resumes(
    adapter_env, bench: Path, tmp_path: Path
):
    url = f"sqlite:///{tmp_path / 's.db'}"
    common = ["--store", url, "--cache-dir", str(tmp_path / "cache")]
    v, w = bench.parent / "v.mp4", bench.parent / "w.mp4"
    created = {"v.mp4": sha256_of(v), "w.mp4": sha256_of(w)}
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        core = start_run(adapter.url, bench, "--pacing", "wall_clock", "--speed", "4", *common)
        with Store(url) as store:

            def first_session_finished() -> bool:
                runs = store.list_runs()
                return bool(runs) and any(
                    s.status == "finished" for s in store.sessions(runs[0].run_id)
                )

            wait_for(first_session_finished, what="a finished session")
            core.kill()
            core.wait()
            run_id = store.list_runs()[0].run_id
            assert store.video_digests(run_id) == created
            assert {s.session_id: s.status for s in store.sessions(run_id)}[CHANGED] != "finished"

        new_digest = replace_with_another_video(w)
        # v.mp4 rewritten with its own bytes (a new file, a new inode): still the same video.
        shutil.copyfile(v, bench.parent / "v.copy")
        (bench.parent / "v.copy").replace(v)
        resumed = subprocess.run(
            cli("run", "--resume", run_id, "--adapter-url", adapter.url, "--json", *common),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    assert resumed.returncode == 1, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert (summary["kept"], summary["failed"], summary["failed_total"]) == (1, 1, 1)
    assert summary["status"] == "finished"
    refusals = [line for line in resumed.stderr.splitlines() if "changed since" in line]
    assert refusals == [
        f"session {CHANGED} failed (frames, input): {w}: changed since the run started "
        f"(sha256 {new_digest[:12]}..., the run recorded {created['w.mp4'][:12]}...); put "
        "the original file back, or start a new run"
    ]
    with Store(url) as store:
        check_refused(store, run_id, w, new_digest)
        assert store.video_digests(run_id) == created


def test_a_video_replaced_between_frame_preparation_and_its_session_is_refused(
    adapter_env, bench: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    gate = tmp_path / "gate"
    monkeypatch.setenv("STREAMEVAL_TEST_GATE", str(gate))
    url = f"sqlite:///{tmp_path / 's.db'}"
    w = bench.parent / "w.mp4"
    with AdapterProcess("tests.wire_adapters:GatedAdapter") as adapter:
        core = start_run(adapter.url, bench, "--store", url, "--cache-dir", str(tmp_path / "cache"))
        # Sessions start once every video's frames are prepared: the first one is held at
        # the adapter while w.mp4, prepared already, is replaced.
        wait_for(lambda: (adapter_env / "t:pro:1.jsonl").exists(), what="the first session")
        new_digest = replace_with_another_video(w)
        gate.touch()
        stdout, stderr = core.communicate(timeout=300)
    assert core.returncode == 1, stderr
    run_id = json.loads(stdout)["run_id"]
    with Store(url) as store:
        check_refused(store, run_id, w, new_digest)


def test_a_worker_refuses_a_video_replaced_since_the_detached_run_was_created(
    adapter_env, bench: Path, tmp_path: Path
):
    url = f"sqlite:///{tmp_path / 's.db'}"
    w = bench.parent / "w.mp4"
    run_id = detached_run(url, bench, tmp_path / "cache")
    new_digest = replace_with_another_video(w)
    summary = work(url, run_id, tmp_path / "cache")
    assert (summary["claimed"], summary["finished"], summary["failed"]) == (3, 2, 1)
    with Store(url) as store:
        check_refused(store, run_id, w, new_digest)


def test_a_worker_records_a_video_the_run_could_not_read_when_created(
    adapter_env, bench: Path, tmp_path: Path
):
    """A detached run created where a video is missing (its workers bring it) is bound to
    the bytes the first worker reads."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    w = bench.parent / "w.mp4"
    w.rename(tmp_path / "w.mp4")
    run_id = detached_run(url, bench, tmp_path / "cache")
    with Store(url) as store:
        assert store.video_digests(run_id) == {"v.mp4": sha256_of(bench.parent / "v.mp4")}
    (tmp_path / "w.mp4").rename(w)
    assert work(url, run_id, tmp_path / "cache")["finished"] == 3
    with Store(url) as store:
        assert store.video_digests(run_id) == {
            "v.mp4": sha256_of(bench.parent / "v.mp4"),
            "w.mp4": sha256_of(w),
        }


def test_the_first_digest_recorded_for_a_video_wins(store: Store):
    store.create_run("r", "synthetic", {})
    assert store.bind_video("r", "a.mp4", "1" * 64) == "1" * 64
    assert store.bind_video("r", "a.mp4", "2" * 64) == "1" * 64
    assert store.bind_video("r", "b.mp4", "3" * 64) == "3" * 64
    assert store.video_digests("r") == {"a.mp4": "1" * 64, "b.mp4": "3" * 64}


def test_frames_of_a_video_rewritten_while_it_was_decoded_are_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The file is overwritten with another real video right after its frames were decoded
    (before the entry is published): the entry, named by the old bytes' digest, would hold
    frames of either version, so it is refused and not published; the next read decodes the
    new file under its own digest."""
    from streameval.core.frames import entries
    from streameval.core.frames.cache import FrameCache
    from streameval.core.frames.errors import VideoChangedError
    from streameval.core.frames.types import ImageRules

    video = tmp_path / "v.mp4"
    write_video(video, seconds=4, fps=10)
    old_digest = sha256_of(video)
    real_sample = entries.sample_video
    rewrites: list[str] = []

    def sample_then_rewrite(path, *args, **kwargs):
        sampled = real_sample(path, *args, **kwargs)
        if not rewrites:
            rewrites.append(replace_with_another_video(Path(path)))
        return sampled

    monkeypatch.setattr(entries, "sample_video", sample_then_rewrite)
    cache, rules = FrameCache(tmp_path / "frames"), ImageRules(fps=2.0)
    with pytest.raises(VideoChangedError) as refused:
        cache.get(video, rules)
    assert str(refused.value) == (
        f"{video}: the file changed while its frames were extracted; they are not kept "
        "(run again once the file stays as it is)"
    )
    assert refused.value.cause == "input"
    # No entry and no partial folder kept; only the entry's empty build lock stays.
    kept = (tmp_path / "frames").rglob(f"{old_digest}-*")
    assert [path.suffix for path in kept] == [".lock"]
    frames = cache.get(video, rules)
    assert frames.video_digest == rewrites[0] != old_digest
    assert frames.frames[0].frame_id.startswith(rewrites[0][:16])
