"""The results API over a real SQLite store populated through Store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streameval.core.benchmark.records import QARecord
from streameval.core.store.store import Store
from streameval.scorer.eventlog import store_run
from streameval.scorer.metrics.explain import explain
from streameval.scorer.service.api import create_app
from tests.test_scorer_report import mixed_run


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store(url) as store:
        mixed_run(store, "run-a")
        mixed_run(store, "run-b", answers=("C", "The answer is B", "B"), said="one")
    with TestClient(create_app(url)) as test_client:
        yield test_client


def test_runs_are_listed_with_their_conditions_and_paginated(client: TestClient) -> None:
    page = client.get("/runs", params={"limit": 1}).json()
    assert (page["total"], page["offset"], page["limit"], len(page["items"])) == (2, 0, 1, 1)
    assert page["items"][0]["run_id"] == "run-b"  # newest first
    assert page["items"][0]["pacing"] == "logical"
    second = client.get("/runs", params={"limit": 1, "offset": 1}).json()
    assert second["items"][0]["run_id"] == "run-a"
    detail = client.get("/runs/run-a").json()
    assert detail["sessions"] == {"finished": 4, "failed": 1}
    assert detail["events"] > 0
    assert client.get("/runs", params={"limit": 0}).status_code == 422


def test_metrics_per_profile(client: TestClient) -> None:
    metrics = client.get("/runs/run-a/metrics").json()
    assert metrics["profile"]["name"] == "trace-paper-v1"
    assert metrics["overall"]["qa"]["accuracy"]["value"] == pytest.approx(2 / 3)
    assert "records" not in metrics
    assert "EPM" in metrics["by_task_type"]
    realstream = client.get("/runs/run-a/metrics", params={"profile": "realstream"}).json()
    assert realstream["overall"]["realstream"]["score"]["value"] == pytest.approx(100.0)
    bad = client.get("/runs/run-a/metrics", params={"profile": "paper"})
    assert bad.status_code == 400
    assert "unknown scoring profile 'paper'" in bad.json()["detail"]
    missing = client.get("/runs/nope/metrics")
    assert missing.status_code == 404
    assert "unknown run id 'nope'" in missing.json()["detail"]


def test_records_are_paginated_and_filtered(client: TestClient) -> None:
    page = client.get("/runs/run-a/records", params={"limit": 2}).json()
    assert page["total"] == 5
    assert [r["record_id"] for r in page["items"]] == ["pro-REC", "pro-SSR"]
    failed = client.get("/runs/run-a/records", params={"status": "failed"}).json()
    assert [(r["record_id"], r["failure_stage"]) for r in failed["items"]] == [("qa-2", "response")]
    qa = client.get("/runs/run-a/records", params={"task": "qa", "offset": 1}).json()
    assert (qa["total"], [r["record_id"] for r in qa["items"]]) == (3, ["qa-1", "qa-2"])
    one = client.get("/runs/run-a/records/qa-1").json()
    assert one["qa"]["parsed"] == "B" and one["qa"]["correct"] is True
    assert client.get("/runs/run-a/records/nope").status_code == 404


def test_timeline(client: TestClient) -> None:
    timeline = client.get("/runs/run-b/records/pro-REC/timeline").json()
    assert timeline["task"] == "proactive" and timeline["pacing"] == "logical"
    assert [f["t"] for f in timeline["frames"]] == [float(t) for t in range(15)]
    assert [(w["start"], w["end"], w["assignment"], w["score"]) for w in timeline["windows"]] == [
        (5.0, 9.0, "in_window", 0.0),  # "one" is not "1"
        (9.0, 12.0, "in_window", 1.0),
    ]
    episodes = [
        (e["onset_t"], e["text"], e["assignment"], e["trigger"]) for e in timeline["episodes"]
    ]
    assert episodes == [(6.0, "one", "in_window", 0), (10.0, "2", "in_window", 1)]
    assert not any(e["false_alarm"] for e in timeline["episodes"])
    assert len(timeline["steps_t"]) == 15
    qa = client.get("/runs/run-a/records/qa-0/timeline").json()
    assert qa["episodes"][0]["answered"] is True and qa["windows"] == []
    assert client.get("/runs/run-a/records/nope/timeline").status_code == 404


def test_compare_and_profiles(client: TestClient) -> None:
    comparison = client.get("/compare", params={"run_a": "run-a", "run_b": "run-b"}).json()
    assert comparison["paired_records"] == 5
    assert comparison["overall"]["proactive"]["in_window_accuracy"]["diff"] == -0.5
    profiles = client.get("/profiles").json()
    assert [p["name"] for p in profiles] == [
        "trace-paper-v1",
        "trace-strict",
        "trace-extended",
        "realstream",
        "readiness",
        "ovo-offline",
        "ovo-extended",
        "streamingbench",
        "streamingbench-extended",
    ]
    assert profiles[0]["constants"]["tolerance_s"] == 5.0


def test_metrics_drawn_from_one_video_have_no_interval(client: TestClient) -> None:
    # The proactive records are all on one video; the QA records on two.
    overall = client.get("/runs/run-a/metrics").json()["overall"]
    assert overall["qa"]["accuracy"]["ci95"] == [0.5, 1.0]
    assert overall["proactive"]["in_window_accuracy"]["ci95"] is None
    compared = client.get("/compare", params={"run_a": "run-a", "run_b": "run-b"}).json()
    assert compared["overall"]["proactive"]["in_window_accuracy"]["ci95"] is None


def other_question() -> QARecord:
    return QARecord(
        record_id="other-1",
        source_id="w",
        source_benchmark="other",
        task_type="OCR",
        video_path="w.mp4",
        question="Which digit?",
        options=("A. 1", "B. 2"),
        answer="A",
        question_time_s=3.0,
        evidence_anchor_s=2.0,
    )


def test_compare_of_runs_sharing_no_record_is_a_422_naming_both(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store(url) as store:
        mixed_run(store, "run-a")
        mixed_run(store, "run-c", keep={"qa-0"})
        store_run(store, "other", [other_question()], [], benchmark="other@2")
    with TestClient(create_app(url)) as client:
        refused = client.get("/compare", params={"run_a": "run-a", "run_b": "other"})
        assert refused.status_code == 422
        assert refused.json() == {
            "detail": "runs run-a (benchmark handwritten) and other (benchmark other@2) share "
            "no record: nothing to compare"
        }
        partial = client.get("/compare", params={"run_a": "run-a", "run_b": "run-c"}).json()
    assert partial["paired_records"] == 1
    assert partial["notes"] == [
        "the runs share 1 of their records, which are compared; left out: 4 of the 5 of run "
        "run-a and 0 of the 1 of run run-c",
        # run-a's SSR answers fall back to exact match, which TRACE counts as incomplete.
        "judge-incomplete: TRACE's judge rules mark semantic task types scored by exact match "
        "(no judge endpoint) as incomplete",
    ]


def test_metric_help_explains_every_metric_a_profile_reports(client: TestClient) -> None:
    entries = client.get("/metrics/help").json()
    by_name = {(e["family"], e["name"]): e for e in entries}
    assert len(by_name) == len(entries)  # a name once per family
    for profile in ("trace-paper-v1", "realstream", "readiness"):
        overall = client.get("/runs/run-a/metrics", params={"profile": profile}).json()["overall"]
        for family, metrics in overall.items():
            for name in metrics:
                help = explain(f"{family}.{name}")
                assert help is not None, (family, name)
                assert by_name[family, name] == {"family": family, **asdict(help)}
    # One name, a meaning per family.
    assert by_name["qa", "accuracy"]["meaning"] != by_name["readiness", "accuracy"]["meaning"]
    # The columns beside every value, without a family.
    assert {name for family, name in by_name if family is None} == {"95% CI", "coverage"}
    assert by_name[None, "coverage"]["scale"] == "observed/population"


def test_openapi_documents_every_endpoint(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths) >= {
        "/runs",
        "/runs/{run_id}",
        "/runs/{run_id}/metrics",
        "/runs/{run_id}/records",
        "/runs/{run_id}/records/{record_id}",
        "/runs/{run_id}/records/{record_id}/timeline",
        "/compare",
        "/profiles",
        "/metrics/help",
    }
    assert all(set(methods) == {"get"} for methods in paths.values())
    glossary = paths["/metrics/help"]["get"]["responses"]["200"]["content"]["application/json"]
    assert glossary["schema"]["items"]["$ref"] == "#/components/schemas/MetricHelpEntry"
