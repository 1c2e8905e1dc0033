"""The causality audit (`streameval audit causality`, core_server/analyses/causality_audit.py): real
adapter processes, the real command in its own process, a real SQLite store, the verdict read
back through the results API; the decision rule's false-accusation rate over real audits of
a flaky honest adapter and in simulation (test_causality_rule.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
from fastapi.testclient import TestClient

from streameval.core.analyses.causality_audit import said_before
from streameval.core.analyses.causality_streams import CUT_S, GROUPS, WORDS, new_seed, prepare
from streameval.core.benchmark.synthetic import GENERATOR_VERSION
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
ORDINARY_ID = re.compile(r"synthetic:(qa|proactive):\d{3}")


def audit(url: str, cache: Path, store: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streameval.cli", "audit", "causality", "--adapter-url", url]
        + ["--cache-dir", str(cache), "--store", str(store), *extra],
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_the_streams_look_like_an_ordinary_runs_and_differ_only_after_the_cut(tmp_path: Path):
    streams = prepare(tmp_path, seed=5)
    # Nothing on disk but the two videos, named as the synthetic benchmark's count videos.
    folder = streams.folder
    assert folder.parent == tmp_path / "synthetic" and re.fullmatch(r"[0-9a-f]{12}", folder.name)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "videos/v3_count.mp4",
        "videos/v4_count.mp4",
    ]
    records = {r.record_id: r for group in GROUPS for r in streams.groups[group].records}
    assert len(records) == 45 and all(ORDINARY_ID.fullmatch(rid) for rid in records)
    for benchmark in streams.groups.values():
        assert (benchmark.name, benchmark.version) == ("synthetic", f"{GENERATOR_VERSION}+seed.5")
    assert {r.source_benchmark for r in records.values()} == {"synthetic"}
    assert {tuple(sorted(r.metadata)) for r in records.values()} == {
        ("generator_version", "seed", "video")
    }
    videos: dict[str, str] = {}
    for task in streams.tasks:
        assert sorted(task.copies) == sorted(f"{g}{n}" for g in GROUPS for n in (1, 2, 3))
        copies = {label: records[rid] for label, rid in task.copies.items()}
        # The copies differ in nothing an adapter is told but their ids.
        told = {
            label: r.model_dump(exclude={"record_id", "video_path", "source_id"})
            for label, r in copies.items()
        }
        assert len({json.dumps(t, sort_keys=True) for t in told.values()}) == 1
        videos = {label[:-1]: r.video_path for label, r in copies.items()}
        assert videos["A"] == videos["A+"] != videos["B"]
        if copies["A1"].task == "qa":
            assert not any(streams.marker in option for option in copies["A1"].options)
    decoded = {}
    for group in ("A", "B"):
        with av.open(str(folder / videos[group])) as container:
            decoded[group] = [f.to_ndarray(format="gray") for f in container.decode(video=0)]
    assert len(decoded["A"]) == len(decoded["B"]) == 240  # 24 s at 10 fps
    same = [np.array_equal(a, b) for a, b in zip(decoded["A"], decoded["B"], strict=True)]
    assert same == [True] * 120 + [False] * 120
    # The marker is bright text: B's frames after the cut are brighter than A's.
    assert np.mean(decoded["B"][150]) > np.mean(decoded["A"][150]) + 3

    # The seed reproduces an audit (in a new folder); another seed makes other videos.
    again, other = prepare(tmp_path, seed=5), prepare(tmp_path, seed=6)
    assert again.folder != folder and (again.marker, again.tasks) == (streams.marker, streams.tasks)
    plain = (folder / videos["A"]).read_bytes()
    assert (again.folder / videos["A"]).read_bytes() == plain
    assert all((other.folder / v).read_bytes() != plain for v in set(videos.values()))
    assert new_seed() != new_seed()


def test_the_reference_adapter_passes_and_no_file_holds_an_answer(tmp_path: Path) -> None:
    cache, store = tmp_path / "cache", tmp_path / "audit.db"
    with AdapterProcess("reference") as adapter:
        done = audit(adapter.url, cache, store, "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["verdict"] == "pass"
    assert body["counts"] == {
        "sessions": 45,
        "points": len(POINTS_BEFORE_CUT),
        "marker": 0,
        "differs": 0,
        "memory": 0,
        "nondeterministic": 0,
        "failed_sessions": 0,
    }
    assert body["evidence"] == []
    rule = body["rule"]
    assert (rule["repeats"], rule["p0"], rule["alpha"], rule["threshold"]) == (3, 0.02, 0.01, 1)
    assert rule["false_accusation"] == pytest.approx(7.359e-4, rel=1e-3)
    assert rule["statement"].endswith("P(fail | honest, p <= 0.02) <= 7.4e-04")
    # A new seed for this audit, recorded; the videos are gone, and no file in the cache
    # names the marker or holds the answers (only the store does).
    assert isinstance(body["seed"], int) and body["seed"] >= 0
    assert list((cache / "synthetic").iterdir()) == []
    for path in cache.rglob("*"):
        if path.is_file():
            assert body["marker"].encode() not in path.read_bytes()
            assert b"No word is shown" not in path.read_bytes()
    with Store(f"sqlite:///{store}") as opened:
        records = [r for run_id in body["runs"].values() for r in opened.records(run_id)]
        assert len(records) == 45 and all(ORDINARY_ID.fullmatch(r["record_id"]) for r in records)
        assert {r["answer"] for r in records if r["task_type"] == "qa-word"} <= set("ABCDE")
        # What was compared is real output: the reference announces the count changes
        # before the cut in every copy, at the step of the change.
        watch = [r for r in records if r["task_type"] == "watch-count"]
        changes = {
            (f"step {round(t['point_s']) - 2}", t["point_s"]): t["answer"]
            for t in watch[0]["triggers"]
            if t["point_s"] < CUT_S
        }
        assert changes  # every scene changes its count before the cut
        for record in watch:
            run_id = next(run for run in body["runs"].values() if record in opened.records(run))
            said = said_before(opened.iter_events(run_id, record["record_id"]), CUT_S)
            spoken = {(p.point, p.t): items for p, items in said.items() if items[0][0] != "silent"}
            assert spoken == {at: (("delta", n), ("final", n)) for at, n in changes.items()}


def test_the_peeking_adapter_fails_with_evidence_stored_with_every_run(tmp_path: Path) -> None:
    cache, store = tmp_path / "cache", tmp_path / "audit.db"
    options = {"store": f"sqlite:///{store}"}
    with AdapterProcess("tests.peeking_adapter:PeekingAdapter", options=options) as adapter:
        done = audit(adapter.url, cache, store, "--seed", "3")
    assert done.returncode == 1, done.stderr
    summary, rule, where = done.stdout.splitlines()
    assert rule == (
        "rule: fail if >= 1 of 23 points show unanimous A and B (or A and A+) apart over 3 "
        "repeats each; P(fail | honest, p <= 0.02) <= 7.4e-04"
    )
    marker = WORDS[int(np.random.default_rng([3, 2]).integers(len(WORDS)))]
    assert summary.startswith(
        f"causality: fail (cut T=12s, marker {marker}): 23 points before T differ between A "
        "and B, each group unanimous; first: task qa-word, question at 11s: A (synthetic:qa:"
    )
    run_ids = where.removeprefix("runs ").split(", store ")[0].split(", ")
    assert len(run_ids) == 3

    with TestClient(create_app(f"sqlite:///{store}")) as client:
        stored = [client.get(f"/runs/{run}").json()["analyses"]["causality"] for run in run_ids]
    assert stored[0] == stored[1] == stored[2]
    verdict = stored[0]
    assert verdict["verdict"] == "fail" and verdict["seed"] == 3
    assert verdict["marker"] == marker and verdict["cut_s"] == 12.0
    assert list(verdict["runs"].values()) == run_ids
    assert verdict["counts"]["differs"] == 23 and verdict["counts"]["memory"] == 0
    assert verdict["counts"]["nondeterministic"] == 0
    assert {e["kind"] for e in verdict["evidence"]} == {"differs"}
    # Every step and question before the cut leaks, each with all six sessions.
    found = [(e["task"], e["point"], e["video_t"]) for e in verdict["evidence"]]
    assert found == POINTS_BEFORE_CUT
    for evidence in verdict["evidence"]:
        assert [len(s.split(", ")) for s in evidence["sessions"].values()] == [3, 3]
        a, b = (float(evidence["outputs"][g].strip('"').split()[-1]) for g in ("A", "B"))
        assert b > a  # the frame 10 s ahead holds the bright marker in B only


def test_an_adapter_that_remembers_an_earlier_sessions_future_fails(tmp_path: Path) -> None:
    """It reads no file: it recognises the stream's first frame among earlier runs' and says
    whether it remembers bright text ahead. A and B agree (neither run had seen the marked
    future); A+ comes after B."""
    with AdapterProcess("tests.peeking_adapter:RememberingAdapter") as adapter:
        done = audit(adapter.url, tmp_path / "cache", tmp_path / "audit.db", "--json")
    assert done.returncode == 1, done.stderr
    body = json.loads(done.stdout)
    assert body["verdict"] == "fail"
    assert body["counts"]["memory"] == 23
    assert body["counts"]["differs"] == body["counts"]["nondeterministic"] == 0
    first = body["evidence"][0]
    assert (first["kind"], first["task"], first["point"]) == ("memory", "qa-word", "question")
    assert first["outputs"] == {"A": '"nothing ahead"', "A+": '"text ahead"'}


def test_a_nondeterministic_adapter_is_inconclusive_not_failed(tmp_path: Path) -> None:
    with AdapterProcess("tests.peeking_adapter:RandomAdapter") as adapter:
        done = audit(adapter.url, tmp_path / "cache", tmp_path / "audit.db", "--json")
    assert done.returncode == 1, done.stderr
    body = json.loads(done.stdout)
    assert body["verdict"] == "inconclusive"
    assert body["counts"]["nondeterministic"] > body["rule"]["nondeterminism_limit"] == 9
    assert body["counts"]["marker"] == 0
    first = body["evidence"][0]
    # The three copies of one group (A, unless its random outputs happened to agree there).
    copies = set(first["outputs"])
    groups = {label.rstrip("0123456789") for label in copies}
    assert first["kind"] == "nondeterministic" and len(groups) == 1
    assert copies == {f"{group}{n}" for group in groups for n in (1, 2, 3)}
    assert len(set(first["outputs"].values())) > 1


def test_a_flaky_honest_adapter_is_not_accused_over_real_audits(tmp_path: Path) -> None:
    """The reference adapter with each output replaced at random with p = 0.02: over real
    audits it is never failed, while its outputs really do differ."""
    verdicts, replaced = [], 0
    with AdapterProcess("tests.peeking_adapter:FlakyAdapter", options={"p": 0.02}) as adapter:
        for n in range(4):
            store = tmp_path / f"audit-{n}.db"
            done = audit(adapter.url, tmp_path / "cache", store, "--json")
            assert done.returncode in (0, 1), done.stderr
            body = json.loads(done.stdout)
            verdicts.append(body["verdict"])
            with Store(f"sqlite:///{store}") as opened:
                replaced += sum(
                    e.kind == EventKind.RESPONSE_FINAL and e.payload.text == "not sure"
                    for run in body["runs"].values()
                    for s in opened.sessions(run)
                    for e in opened.iter_events(run, s.session_id)
                )
    assert "fail" not in verdicts, verdicts
    assert replaced > 0  # about 8 replaced outputs per audit of ~400


def test_an_unreachable_adapter_is_one_error_line_and_no_run(tmp_path: Path) -> None:
    cache, store = tmp_path / "cache", tmp_path / "audit.db"
    done = audit("ws://127.0.0.1:9/ws", cache, store)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: adapter endpoint ws://127.0.0.1:9/ws is not reachable: All connection "
        "attempts failed"
    ]
    with Store(f"sqlite:///{store}") as opened:
        assert opened.list_runs() == []
    assert list((cache / "synthetic").iterdir()) == []  # its videos are discarded too


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
    said = said_before(events, 12.0)
    assert {(p.point, p.t): items for p, items in said.items()} == {
        ("step 9", 11.0): (("delta", "Tw"),)
    }
