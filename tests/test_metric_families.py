"""Metric families declare themselves: the registry is all the scorer knows of them.

The toy family of docs/metrics.md, registered by a fixture alone, is evaluated, aggregated
overall and per slice, and shown per record; the built-in families' declarations agree with
the profiles and with what their records contribute.
"""

from __future__ import annotations

import re
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import pytest

from streameval.core.benchmark.records import ProactiveRecord, QARecord, Trigger
from streameval.scorer.errors import ScoreError
from streameval.scorer.eventlog import SessionLog, asked_session, memory_source
from streameval.scorer.metrics.aggregate import CONSTANTS as AGGREGATION_CONSTANTS
from streameval.scorer.metrics.family import MetricFamily
from streameval.scorer.metrics.record import fields
from streameval.scorer.metrics.registry import FAMILIES, evaluated, judges_content
from streameval.scorer.profiles import SCORING_PROFILES, ProfileError, ScoringProfile
from streameval.scorer.report import evaluate_source, scores_of

PAPER = SCORING_PROFILES["trace-paper-v1"]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"


def documented_family() -> MetricFamily[Any]:
    """The example of docs/metrics.md's "Adding a metric family", run as written."""
    section = DOCS.read_text().split("## Adding a metric family", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the section has no example"
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), f"{DOCS}:example", "exec"), namespace)
    return namespace["ANSWERED"]


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> ScoringProfile:
    """The documented toy family (whether a record's own task got any answer), registered;
    a profile that reports it besides TRACE's families."""
    family = documented_family()
    monkeypatch.setitem(FAMILIES, family.name, family)
    return PAPER.with_overrides(families=(*PAPER.families, family.name))


def question(record_id: str, task_type: str, video: str) -> QARecord:
    return QARecord(
        record_id=record_id,
        source_id=video,
        source_benchmark="handwritten",
        task_type=task_type,
        video_path=f"{video}.mp4",
        question="Which colour?",
        options=("A. red", "B. blue"),
        answer="B",
        question_time_s=3.0,
        evidence_anchor_s=2.0,
    )


def test_a_family_registered_alone_is_aggregated_overall_and_per_task_type(
    answered: ScoringProfile,
) -> None:
    said = {"q1": "B", "q2": "wait", "q3": "A", "q4": None}  # wait: silence; None: declined
    records = [
        question("q1", "EPM", "v1"),
        question("q2", "EPM", "v2"),
        question("q3", "ASI", "v3"),
        question("q4", "ASI", "v4"),
    ]
    logs = [asked_session(record, said[record.record_id], [1, 2, 3]) for record in records]
    scores = scores_of(evaluate_source(memory_source(records, logs), answered))

    overall = scores.overall["answered"]["answered_rate"]
    assert (overall.value, overall.population, overall.unit) == (0.5, 4, "records")
    assert overall.ci95 is not None  # four videos: the bootstrap ran over the toy's fields
    by_type = {
        name: f["answered"]["answered_rate"].value for name, f in scores.by_task_type.items()
    }
    assert by_type == {"ASI": 0.5, "EPM": 0.5}
    assert scores.by_source_benchmark["handwritten"]["answered"]["answered_rate"].value == 0.5
    # The built-in families are untouched, and each record shows the toy's entry.
    assert scores.overall["qa"]["accuracy"].value == 0.25
    shown = {record.record_id: record.model_dump()["answered"] for record in scores.records}
    assert shown == {
        "q1": {"answered": True},
        "q2": {"answered": False},
        "q3": {"answered": True},
        "q4": {"answered": False},
    }
    assert scores.to_json(include_records=True)["records"][0]["answered"] == {"answered": True}


def test_a_registered_family_a_profile_does_not_report_is_not_evaluated(
    answered: ScoringProfile,
) -> None:
    record = question("q1", "EPM", "v1")
    source = memory_source([record], [asked_session(record, "B", [1, 2, 3])])
    scores = scores_of(evaluate_source(source, PAPER))
    assert "answered" not in scores.overall
    assert scores.records[0].model_dump()["answered"] is None


def test_an_unknown_family_is_a_profile_error_when_the_profile_is_used() -> None:
    profile = PAPER.with_overrides(families=("qa", "nonesuch"))
    with pytest.raises(ProfileError, match="unknown metric family 'nonesuch'"):
        evaluated(profile)
    record = question("q1", "EPM", "v1")
    source = memory_source([record], [asked_session(record, "B", [1, 2, 3])])
    with pytest.raises(ScoreError, match="nonesuch"):
        evaluate_source(source, profile)


def test_every_profile_reports_registered_families() -> None:
    for profile in SCORING_PROFILES.values():
        assert set(profile.families) <= set(FAMILIES), profile.name


def test_a_family_comes_after_the_families_it_reads() -> None:
    order = list(FAMILIES)
    for position, (name, family) in enumerate(FAMILIES.items()):
        assert family.name == name
        for required in family.requires:
            assert required in order[:position], f"{name} requires {required}"


def test_every_constant_is_read_by_a_declared_reader() -> None:
    """A family's constants exist, and every constant of a profile is read by some family
    or by the aggregation (a constant nobody declares would change no number)."""
    known = {field.name for field in dataclass_fields(ScoringProfile)}
    declared = set(AGGREGATION_CONSTANTS)
    for family in FAMILIES.values():
        assert set(family.constants) <= known, family.name
        declared |= set(family.constants)
    constants = set(PAPER.constants()) - {"families"}
    assert constants - declared == set()


def test_headlines_and_timing_metrics_are_metrics_of_their_family() -> None:
    both_clocks = SCORING_PROFILES["trace-extended"]  # reports every timing metric
    for family in FAMILIES.values():
        names = set(family.statistics(both_clocks))
        assert family.headline is None or family.headline in names, family.name
        assert family.timing <= names, family.name


def test_judgements_are_asked_only_by_profiles_with_a_judged_family() -> None:
    asked = {name: judges_content(profile) for name, profile in SCORING_PROFILES.items()}
    assert asked == {
        "trace-paper-v1": True,
        "trace-strict": True,
        "trace-extended": True,
        "realstream": True,
        "readiness": True,  # through the proactive windows it requires
        "ovo-offline": False,
        "ovo-extended": False,
        "streamingbench": False,
        "streamingbench-extended": False,
    }


def test_every_result_contributes_its_family_member_field() -> None:
    qa = question("q1", "EPM", "v1")
    proactive = ProactiveRecord(
        record_id="p1",
        source_id="v2",
        source_benchmark="handwritten",
        task_type="REC",
        video_path="v2.mp4",
        instruction="Count the claps.",
        instruction_time_s=0.0,
        triggers=(Trigger(trigger_type="event_onset", answer="1", point_s=2.0),),
    )
    log = SessionLog("run", "p1").start()
    for t in range(5):
        log.frame(float(t))
    log.instruction(proactive)
    log.respond("1", onset_t=2.0)
    log.finish()
    source = memory_source([qa, proactive], [asked_session(qa, "B", [1, 2, 3]), log])
    seen = set()
    for profile in SCORING_PROFILES.values():
        run = evaluate_source(source, profile)
        for evaluation in run.evaluations:
            scalars, _ = fields(evaluation, profile)
            for name in evaluation.results:
                assert scalars.get(FAMILIES[name].member) == 1.0, (profile.name, name)
            seen |= set(evaluation.results)
    assert seen == set(FAMILIES)
