"""`streameval plan`: the LPT schedule's arithmetic on known durations, the service-time model
on a small benchmark file, measured costs from a stored run, and its one-line errors."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from streameval.core.analyses.makespan_plan import PlanError, lpt_makespan
from streameval.core.benchmark.records import Benchmark, QARecord
from streameval.core.store import models
from streameval.core.store.store import Store
from tests.test_scale_out import streameval


def test_lpt_lays_the_longest_first_on_the_slot_free_first():
    # LPT is not optimal here (3+3 | 2+2+2 = 6): it gives 3 | 3, then 2, 2 and 2 -> 7.
    assert lpt_makespan([2, 3, 2, 3, 2], 2) == 7
    assert lpt_makespan([7, 5, 4, 3, 3, 2], 2) == 12
    assert lpt_makespan([4, 1], 8) == 4  # more slots than sessions
    with pytest.raises(PlanError, match="at least one GPU slot"):
        lpt_makespan([1.0], 0)


def _benchmark(tmp_path: Path, question_times: list[float]) -> Path:
    records = [
        QARecord(
            record_id=f"p:{i}",
            source_id=f"p:{i}",
            source_benchmark="plan",
            task_type="t",
            video_path="v.mp4",
            question="Which?",
            options=("A. a", "B. b"),
            answer="A",
            question_time_s=t,
            evidence_anchor_s=0.0,
        )  # fmt: skip
        for i, t in enumerate(question_times)
    ]
    path = tmp_path / "benchmark.json"
    benchmark = Benchmark(name="plan", version="1", video_root=".", records=records)
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path


def _plan(*args: str) -> dict:
    done = streameval("plan", "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_wall_clock_sessions_take_their_streamed_length_over_speed_plus_answers(tmp_path):
    path = _benchmark(tmp_path, [40, 30, 20, 20, 20])
    # --qa-history 0: each streams 0..question; at speed 10 that is 4, 3, 2, 2, 2 s, plus
    # one answer of 1 s each: 5, 4, 3, 3, 3 -> on 2 GPUs LPT gives 5+3 | 4+3+3 = 10.
    out = _plan(
        "--benchmark", str(path), "--qa-history", "0", "--speed", "10",
        "--per-answer-s", "1", "--gpus", "2", "--gpus", "5",
    )  # fmt: skip
    two, five = out["plans"]
    assert (two["gpus"], two["sessions"], two["total_s"], two["longest_s"]) == (2, 5, 18, 5)
    assert (two["ideal_s"], two["makespan_s"]) == (9, 10)
    assert (five["ideal_s"], five["makespan_s"]) == (5, 5)


def test_a_per_frame_cost_above_real_time_sets_the_session_time(tmp_path):
    path = _benchmark(tmp_path, [40, 30])
    # 1 fps from 0 to 40 s: 41 frames x 0.5 s = 20.5 s, more than 40 s / speed 4 = 10 s;
    # 31 frames x 0.5 = 15.5 s. Under logical pacing only the frames count, as well.
    common = ("--benchmark", str(path), "--qa-history", "0", "--fps", "1", "--per-frame-s", "0.5")
    wall = _plan(*common, "--speed", "4", "--gpus", "1")["plans"][0]
    assert (wall["total_s"], wall["makespan_s"]) == (36, 36)
    logical = _plan(*common, "--pacing", "logical", "--gpus", "2")["plans"][0]
    assert (logical["longest_s"], logical["makespan_s"]) == (20.5, 20.5)


def test_from_run_measures_the_overhead_per_session(tmp_path):
    from tests.timeline_fixtures import write_benchmark

    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    benchmark = write_benchmark(tmp_path / "bench")
    done = streameval(
        "run", "--store", store_url, "--benchmark", str(benchmark), "--detach", "--json",
        "--pacing", "wall_clock", "--speed", "2", "--task", "qa",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    refused = streameval("plan", "--store", store_url, "--from-run", run_id, "--gpus", "1")
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        == f"error: run {run_id} has no finished session to measure costs from"
    )
    # Profile trace, speed 2: t:qa:1 streams 5..17 s (6 s), t:qa:2 0..6.4 s (3.2 s). Their
    # stored wall times, 8 s and 4.2 s, leave 2 s and 1 s of overhead: 1.5 s on average
    # while nothing tells a slot's first session from its later ones.
    with Store(store_url) as store, store.transaction("test") as conn:
        sessions = store.sessions(run_id)
        start = store.get_run(run_id).created_at

        def ran(session_id: str, worker: str, at_s: float, wall_s: float) -> None:
            conn.execute(
                update(models.sessions)
                .where(models.sessions.c.session_id == session_id)
                .values(
                    status="finished",
                    worker_id=worker,
                    endpoint="ws://gpu/ws",
                    started_at=start + timedelta(seconds=at_s),
                    finished_at=start + timedelta(seconds=at_s + wall_s),
                )
            )

        ran("t:qa:1", "w1", 0.0, 8.0)
        ran("t:qa:2", "w2", 0.0, 4.2)
    assert len(sessions) == 2
    out = _plan("--store", store_url, "--from-run", run_id, "--gpus", "1")
    assert (out["overhead_s"], out["start_s"]) == (pytest.approx(1.5), 0.0)
    assert out["plans"][0]["makespan_s"] == pytest.approx(6 + 3.2 + 2 * 1.5)

    # One slot ran both, t:qa:1 first: its 2 s are 1 s of start beside t:qa:2's 1 s of
    # overhead; on 2 GPUs each slot pays the start once, before the longer session.
    with Store(store_url) as store, store.transaction("test") as conn:
        ran("t:qa:2", "w1", 9.0, 4.2)
    out = _plan("--store", store_url, "--from-run", run_id, "--gpus", "1", "--gpus", "2")
    assert (out["overhead_s"], out["start_s"]) == (pytest.approx(1.0), pytest.approx(1.0))
    one, two = out["plans"]
    assert one["makespan_s"] == pytest.approx(1 + (6 + 1) + (3.2 + 1))
    assert two["makespan_s"] == pytest.approx(1 + 6 + 1)
    given = _plan(
        "--store", store_url, "--from-run", run_id, "--gpus", "2", "--start-s", "0"
    )  # fmt: skip
    assert (given["overhead_s"], given["start_s"]) == (pytest.approx(1.0), 0.0)
    assert given["plans"][0]["makespan_s"] == pytest.approx(6 + 1)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--gpus", "0"), "error: --gpus and --concurrency must be at least 1, got 0 and 1"),
        (
            ("--gpus", "2", "--concurrency", "0"),
            "error: --gpus and --concurrency must be at least 1, got 2 and 0",
        ),
        (
            ("--gpus", "2", "--speed", "0"),
            "error: speed: Input should be greater than or equal to 0.01",
        ),
    ],
)
def test_bad_options_get_one_line(args, line, tmp_path):
    done = streameval("plan", "--benchmark", str(_benchmark(tmp_path, [10])), *args)
    assert done.returncode == 2
    assert (done.stdout, done.stderr.strip()) == ("", line)
