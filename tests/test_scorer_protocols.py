"""Scoring profiles and the protocol profiles they are meant for: recorded with the scores,
and a note whenever a run of another protocol is scored."""

from __future__ import annotations

import pytest

from streameval.core.config import PROTOCOL_PROFILES as PROTOCOLS
from streameval.scorer.eventlog import memory_source
from streameval.scorer.profiles import SCORING_PROFILES, is_frame_level, scoring_profile_for
from streameval.scorer.report import evaluate_source, scores_of
from tests.test_scorer_report import mixed_logs, mixed_records


def test_every_protocol_has_the_scoring_profile_that_reproduces_it() -> None:
    assert {protocol: scoring_profile_for(protocol) for protocol in PROTOCOLS} == {
        "trace": "trace-paper-v1",
        "trace-full-prefix": "trace-paper-v1",
        "trace-autonomous": "trace-paper-v1",
        "realstream": "realstream",
        "ovo-offline": "ovo-offline",
        "streamingbench-polling": "streamingbench",
    }
    named = {protocol for profile in SCORING_PROFILES.values() for protocol in profile.protocols}
    assert named <= set(PROTOCOLS)
    assert [name for name in PROTOCOLS if is_frame_level(name)] == ["realstream"]
    assert not is_frame_level(None)


def scored(profile: str, config: dict):
    records = mixed_records()
    source = memory_source(records, mixed_logs("run", records, ("B", "C", "B"), "one"))
    source.run["config"] = config
    return scores_of(evaluate_source(source, profile))


@pytest.mark.parametrize("profile", list(SCORING_PROFILES))
def test_the_protocol_is_recorded_and_a_mismatch_noted(profile: str) -> None:
    meant = SCORING_PROFILES[profile].protocols
    for protocol in PROTOCOLS:
        scores = scored(profile, {"profile": protocol, "pacing": "logical"})
        assert scores.protocol == protocol
        assert scores.profile.protocols == list(meant)
        mismatch = [note for note in scores.notes if note.startswith("scoring profile")]
        assert len(mismatch) == (protocol not in meant), (profile, protocol)
    unrecorded = scored(profile, {})
    assert unrecorded.protocol is None
    assert not any(note.startswith("scoring profile") for note in unrecorded.notes)
