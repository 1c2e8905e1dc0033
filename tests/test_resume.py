"""An interrupted run (the Core killed with SIGKILL) resumes without duplicates or gaps."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from hashlib import sha256

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind

FRAMES_PER_SESSION = {"t:qa:1": 13, "t:qa:2": 7, "t:pro:1": 18}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "streameval.cli", *args]


def wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_killed_run_resumes_without_duplicates_or_losses(
    adapter_env,
    benchmark_path,
    tmp_path,
):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        common = ["--store", url, "--cache-dir", str(tmp_path / "cache")]
        core = subprocess.Popen(
            cli(
                "run",
                "--adapter-url",
                adapter.url,
                "--benchmark",
                str(benchmark_path),
                "--concurrency",
                "1",
                "--pacing",
                "wall_clock",
                "--speed",
                "4",
                "--json",
                *common,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        with Store(url) as store:

            def first_session_finished() -> bool:
                runs = store.list_runs()
                return bool(runs) and any(
                    s.status == "finished" for s in store.sessions(runs[0].run_id)
                )

            wait_for(first_session_finished)
            core.kill()
            core.wait()
            run_id = store.list_runs()[0].run_id
            before = {s.session_id: s for s in store.sessions(run_id)}
            kept_id = next(sid for sid, s in before.items() if s.status == "finished")
            kept_events = list(store.iter_events(run_id, kept_id))
            assert any(s.status != "finished" for s in before.values())

        resumed = subprocess.run(
            cli("run", "--resume", run_id, "--adapter-url", adapter.url, "--json", *common),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert resumed.returncode == 0, resumed.stderr
        summary = json.loads(resumed.stdout)
        assert summary["run_id"] == run_id
        assert summary["kept"] == 1 and summary["failed"] == 0

    with Store(url) as store:
        assert store.get_run(run_id).status == "finished"
        # Bound to its one video's bytes at creation; the unchanged file resumed.
        video = benchmark_path.parent / "v.mp4"
        assert store.video_digests(run_id) == {"v.mp4": sha256(video.read_bytes()).hexdigest()}
        after = {s.session_id: s for s in store.sessions(run_id)}
        assert {sid: s.status for sid, s in after.items()} == dict.fromkeys(
            FRAMES_PER_SESSION, "finished"
        )
        # The finished session is untouched, event for event.
        assert list(store.iter_events(run_id, kept_id)) == kept_events
        assert after[kept_id].attempt == 0
        for session_id, frames in FRAMES_PER_SESSION.items():
            events = list(store.iter_events(run_id, session_id))
            kinds = [e.kind for e in events]
            assert [e.seq for e in events] == list(range(len(events)))
            assert kinds.count(EventKind.FRAME_SENT) == frames
            assert kinds.count(EventKind.SESSION_START) == 1
            assert kinds.count(EventKind.SESSION_FINISHED) == 1
            indices = [e.payload.index for e in events if e.kind == EventKind.FRAME_SENT]
            assert indices == sorted(set(indices))
        redone = [sid for sid, s in before.items() if s.status == "running"]
        assert all(after[sid].attempt == 1 for sid in redone)
