"""Frozen runs score exactly as they did when they were recorded (tests/golden_runs.py).

Every scoring profile's complete results (the demo's per-record results too) must equal
the stored ones: a refactoring that changes a number fails here, and one that changes them
on purpose records the runs again and says why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streameval.scorer.profiles import SCORING_PROFILES
from tests.golden_runs import RUNS, SAMPLE, golden_scores, scores


@pytest.mark.parametrize("name", RUNS)
def test_a_frozen_run_scores_as_recorded(name: str, tmp_path: Path) -> None:
    if name == "trace_sample" and not SAMPLE.is_dir():
        pytest.skip(f"the TRACE release sample is not at {SAMPLE}")
    expected = golden_scores(name)
    assert sorted(expected) == sorted(SCORING_PROFILES)
    for profile in SCORING_PROFILES:
        assert scores(name, profile, tmp_path) == expected[profile], profile
