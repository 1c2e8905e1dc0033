"""A run is bound to its inputs (issue 13, items 3 and 9).

A real benchmark file edited between a killed run and its resume is refused with a short
diff summary (changed records with their fields, removed and added records), and the run is
left as it was; with the original file back the resume completes. Records that cannot be
stored (a NaN or Infinity timestamp) are refused before any run is created, and a run whose
creation never completed (no sessions) is refused on resume instead of being marked
finished with nothing in it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "streameval.cli", *args]


def lines_of(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.strip()]


def test_a_benchmark_edited_between_run_and_resume_is_refused_with_a_diff(
    adapter_env, benchmark_path: Path, tmp_path: Path
):
    url = f"sqlite:///{tmp_path / 's.db'}"
    common = ["--store", url, "--cache-dir", str(tmp_path / "cache")]
    original = benchmark_path.read_text()
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        core = subprocess.Popen(
            cli(
                "run", "--adapter-url", adapter.url, "--benchmark", str(benchmark_path),
                "--concurrency", "1", "--pacing", "wall_clock", "--speed", "4", "--json",
                *common,
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        with Store(url) as store:
            deadline = time.monotonic() + 60
            while not (
                store.list_runs()
                and any(s.status == "finished" for s in store.sessions(store.list_runs()[0].run_id))
            ):
                assert time.monotonic() < deadline, "no session finished"
                time.sleep(0.05)
            core.kill()
            core.wait()
            run_id = store.list_runs()[0].run_id
            before = [(s.session_id, s.status, s.attempt) for s in store.sessions(run_id)]

        # Edit the file: one question reworded, one record gone, one new record.
        data = json.loads(original)
        by_id = {r["record_id"]: r for r in data["records"]}
        by_id["t:qa:2"]["question"] = "Which one, really?"
        removed = by_id.pop("t:pro:1")
        added = {**by_id["t:qa:1"], "record_id": "t:qa:3", "source_id": "t:qa:3"}
        data["records"] = [*by_id.values(), added]
        benchmark_path.write_text(json.dumps(data))

        resume = cli("run", "--resume", run_id, "--adapter-url", adapter.url, "--json", *common)
        refused = subprocess.run(resume, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stderr
        assert lines_of(refused.stderr) == [
            f"error: run {run_id}: the benchmark {benchmark_path} changed since the run was "
            "created (1 changed: t:qa:2 (question); 1 removed: t:pro:1; 1 added: t:qa:3); "
            "resume with the file the run was created from, or start a new run"
        ]
        with Store(url) as store:
            assert [(s.session_id, s.status, s.attempt) for s in store.sessions(run_id)] == before
            assert store.get_run(run_id).status != "finished"
        assert removed["record_id"] == "t:pro:1"

        # The original file back: the resume runs what the run stored.
        benchmark_path.write_text(original)
        resumed = subprocess.run(resume, capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stderr
    with Store(url) as store:
        assert {s.status for s in store.sessions(run_id)} == {"finished"}
        assert store.get_run(run_id).status == "finished"


def test_a_non_finite_timestamp_is_refused_before_the_run_is_created(
    adapter_env, benchmark_path: Path, tmp_path: Path
):
    url = f"sqlite:///{tmp_path / 's.db'}"
    text = benchmark_path.read_text().replace('"question_time_s": 6.4', '"question_time_s": NaN')
    assert "NaN" in text
    benchmark_path.write_text(text)
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        done = subprocess.run(
            cli(
                "run", "--adapter-url", adapter.url, "--benchmark", str(benchmark_path),
                "--store", url, "--cache-dir", str(tmp_path / "cache"),
            ),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    lines = lines_of(done.stderr)
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "t:qa:2" in lines[0] and ("NaN" in lines[0] or "finite" in lines[0]), lines[0]
    with Store(url) as store:
        assert store.list_runs() == []  # nothing half-created to resume or score


CONFIG = {"benchmark": "synthetic", "endpoints": [{"url": "ws://127.0.0.1:9/ws"}]}


def test_resuming_a_run_whose_creation_never_completed_is_refused(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store(url) as store:  # as a Core that failed between creating the run and its sessions
        store.create_run("half0000000", benchmark="synthetic@1", config=CONFIG)
    done = subprocess.run(
        cli("run", "--resume", "half0000000", "--store", url, "--adapter-url", "ws://127.0.0.1:9/ws"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert lines_of(done.stderr) == [
        "error: run half0000000 has no sessions: its creation did not complete, so there is "
        "nothing to resume; start a new run"
    ]
    with Store(url) as store:
        assert store.get_run("half0000000").status == "created"
