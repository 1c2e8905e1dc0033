"""The causality audit (`streameval audit causality`, core_server/analyses/causality_audit.py): real
adapter processes, the real command in its own process, a real SQLite store, the verdict read
back through the results API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
from fastapi.testclient import TestClient

from streameval.core.analyses.causality_audit import (
    COPIES,
    CUT_S,
    WORDS,
    _said_before,
    _verdict,
    prepare,
)
from streameval.core.benchmark.benchmark_json import load_benchmark_file
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import Event, EventKind
from streameval.scorer.service.api import create_app

pytestmark = pytest.mark.usefixtures("adapter_env")

# Every decision point before T=12 s: the three questions (at 11, 9 and 6 s) and, for each
# instruction given at 2 s, a step after each frame from 2 s to 11 s.
STEPS = [(f"step {n}", float(2 + n)) for n in range(10)]
POINTS_BEFORE_CUT = [
    ("qa-word", "question", 11.0),
    ("qa-colour", "question", 9.0),
    ("qa-count", "question", 6.0),
    *[("watch-word", point, t) for point, t in STEPS],
    *[("watch-count", point, t) for point, t in STEPS],
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: the videos and their frames are made once."""
    return tmp_path_factory.mktemp("audit-cache")


def audit(url: str, cache: Path, store: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streameval.cli", "audit", "causality", "--adapter-url", url]
        + ["--cache-dir", str(cache), "--store", str(store), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_copies_are_the_same_frames_until_the_cut_and_differ_after(cache: Path) -> None:
    benchmark = prepare(cache, seed=0)
    assert prepare(cache, seed=0) == benchmark  # the seed fixes marker, ids and videos
    assert benchmark.marker in WORDS and benchmark.cut_s == CUT_S == 12
    records = {r.record_id: r for r in load_benchmark_file(benchmark.path).records}
    videos = {}
    for task in benchmark.tasks:
        assert set(task.copies) == set(COPIES)
        copies = {copy: records[record_id] for copy, record_id in task.copies.items()}
        # The copies differ in nothing an adapter is told but their (opaque) ids.
        told = {c: r.model_dump(exclude={"record_id", "video_path"}) for c, r in copies.items()}
        assert told["A"] == told["A'"] == told["B"]
        assert copies["A"].video_path == copies["A'"].video_path != copies["B"].video_path
        videos = {"A": copies["A"].video_path, "B": copies["B"].video_path}
        if copies["A"].task == "qa":
            assert not any(benchmark.marker in option for option in copies["A"].options)
    root = benchmark.path.parent
    decoded = {}
    for copy, name in videos.items():
        with av.open(str(root / name)) as container:
            decoded[copy] = [f.to_ndarray(format="gray") for f in container.decode(video=0)]
    assert len(decoded["A"]) == len(decoded["B"]) == 240  # 24 s at 10 fps
    same = [np.array_equal(a, b) for a, b in zip(decoded["A"], decoded["B"], strict=True)]
    assert same == [True] * 120 + [False] * 120
    # The marker is bright text: B's frames after the cut are brighter than A's.
    assert np.mean(decoded["B"][150]) > np.mean(decoded["A"][150]) + 3


def test_the_reference_adapter_passes(cache: Path, tmp_path: Path) -> None:
    store = tmp_path / "audit.db"
    with AdapterProcess("reference") as adapter:
        done = audit(adapter.url, cache, store, "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["verdict"] == "pass"
    assert body["counts"] == {
        "sessions": 15,
        "points": len(POINTS_BEFORE_CUT),
        "marker": 0,
        "differs": 0,
        "nondeterministic": 0,
        "failed_sessions": 0,
    }
    assert body["evidence"] == []
    # What was compared is real output: the reference announces both count changes before
    # the cut (4 s and 8 s) in every copy.
    benchmark = prepare(cache, seed=0)
    watch = next(task for task in benchmark.tasks if task.name == "watch-count")
    with Store(f"sqlite:///{store}") as opened:
        for session in watch.copies.values():
            said = _said_before(opened.iter_events(body["run_id"], session), CUT_S)
            spoken = {(p.point, p.t): items for p, items in said.items() if items[0][0] != "silent"}
            assert spoken == {
                ("step 2", 4.0): [("delta", "2"), ("final", "2")],
                ("step 6", 8.0): [("delta", "3"), ("final", "3")],
            }


def test_the_peeking_adapter_fails_with_evidence_stored_with_the_run(
    cache: Path, tmp_path: Path
) -> None:
    benchmark = prepare(cache, seed=0)
    store = tmp_path / "audit.db"
    options = {"benchmark_dir": str(benchmark.path.parent)}
    with AdapterProcess("tests.peeking_adapter:PeekingAdapter", options=options) as adapter:
        done = audit(adapter.url, cache, store)
    assert done.returncode == 1, done.stderr
    summary, where = done.stdout.splitlines()
    qa_word = next(task for task in benchmark.tasks if task.name == "qa-word")
    assert summary.startswith(
        f"causality: fail (cut T=12s, marker {benchmark.marker}): 23 outputs before T differ "
        "between A and B while A and A' agree; first: task qa-word, question at 11s: "
        f'A ({qa_word.copies["A"]}): "brightness ahead '
    )
    run_id = where.split()[1].rstrip(",")

    with TestClient(create_app(f"sqlite:///{store}")) as client:
        stored = client.get(f"/runs/{run_id}").json()["analyses"]["causality"]
    assert stored["verdict"] == "fail"
    assert stored["marker"] == benchmark.marker and stored["cut_s"] == 12.0
    assert stored["counts"]["differs"] == 23 and stored["counts"]["nondeterministic"] == 0
    assert {e["kind"] for e in stored["evidence"]} == {"differs"}
    # Every step and question before the cut leaks, each named with both sessions.
    found = [(e["task"], e["point"], e["video_t"]) for e in stored["evidence"]]
    assert found == POINTS_BEFORE_CUT
    copies = {task.name: task.copies for task in benchmark.tasks}
    for evidence in stored["evidence"]:
        expected = {c: copies[evidence["task"]][c] for c in ("A", "B")}
        assert evidence["sessions"] == expected
        a, b = (float(evidence["outputs"][c].strip('"').split()[-1]) for c in ("A", "B"))
        assert b > a  # the frame 10 s ahead holds the bright marker in B only


def test_a_nondeterministic_adapter_is_inconclusive_not_failed(cache: Path, tmp_path: Path):
    with AdapterProcess("tests.peeking_adapter:RandomAdapter") as adapter:
        done = audit(adapter.url, cache, tmp_path / "audit.db", "--json")
    assert done.returncode == 1, done.stderr
    body = json.loads(done.stdout)
    assert body["verdict"] == "inconclusive"
    assert body["counts"]["nondeterministic"] > 0 and body["counts"]["marker"] == 0
    first = body["evidence"][0]
    assert first["kind"] == "nondeterministic" and set(first["outputs"]) == {"A", "A'"}
    assert first["outputs"]["A"] != first["outputs"]["A'"]


def test_an_unreachable_adapter_is_one_error_line_and_no_run(cache: Path, tmp_path: Path):
    store = tmp_path / "audit.db"
    done = audit("ws://127.0.0.1:9/ws", cache, store)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: adapter endpoint ws://127.0.0.1:9/ws is not reachable: All connection "
        "attempts failed"
    ]
    with Store(f"sqlite:///{store}") as opened:
        assert opened.list_runs() == []


# ------------------------------------------------------------------ the rules, constructed


def _event(number: int, kind: EventKind, video_t: float, /, **payload) -> Event:
    return Event("r", "s", number, kind, number, video_t, payload)


def test_an_output_counts_before_the_cut_only_if_it_arrived_before_the_frame_at_the_cut():
    """A response begun at the step at 11 s whose rest arrives after the frame at 12 s went
    out (video_t 12; wall-clock pacing lets that happen) may depend on that frame: only its
    first part is compared."""
    events = [
        _event(1, EventKind.STEP_SENT, 11.0, task_id="t", step=9, t=11.0),
        _event(2, EventKind.RESPONSE_START, 11.0, response_id="r1", task_id="t"),
        _event(
            3, EventKind.RESPONSE_DELTA, 11.0, response_id="r1", seq=0, text="Tw", snapshot=False
        ),
        _event(
            5, EventKind.RESPONSE_DELTA, 12.0, response_id="r1", seq=1, text="o", snapshot=False
        ),
        _event(
            6,
            EventKind.RESPONSE_FINAL,
            12.0,
            response_id="r1",
            text="Two",
            output_tokens=None,
            input_tokens=None,
        ),
        _event(7, EventKind.STEP_SENT, 12.0, task_id="t", step=10, t=12.0),
        _event(8, EventKind.SILENT, 12.0, task_id="t", step=10),
    ]
    said = _said_before(events, 12.0)
    assert {(p.point, p.t): items for p, items in said.items()} == {
        ("step 9", 11.0): [("delta", "Tw")]
    }


@pytest.mark.parametrize(
    ("marker", "differs", "nondeterministic", "failed", "expected"),
    [
        (0, 0, 0, 0, ("pass", None)),
        (0, 3, 0, 0, ("fail", "differs")),
        (0, 3, 2, 0, ("inconclusive", "nondeterministic")),
        (1, 3, 2, 0, ("fail", "marker")),  # a nondeterministic adapter that names the marker
        (0, 3, 0, 1, ("inconclusive", "session_failed")),
        (0, 0, 0, 1, ("inconclusive", "session_failed")),
    ],
)
def test_the_verdict_rules(marker, differs, nondeterministic, failed, expected) -> None:
    counts = {
        "marker": marker,
        "differs": differs,
        "nondeterministic": nondeterministic,
        "failed_sessions": failed,
    }
    assert _verdict(counts) == expected
