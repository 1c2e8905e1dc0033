"""Paired comparisons of two runs under one scoring profile (/compare)."""

from __future__ import annotations

from fastapi import APIRouter

from streameval.scorer.compare import Comparison, compare_runs
from streameval.scorer.service.routes.params import DEFAULT_PROFILE, ProfileParam
from streameval.scorer.service.routes.state import JudgeDep, StoreDep

router = APIRouter(tags=["metrics"])


@router.get("/compare", response_model=Comparison)
def compare(
    run_a: str,
    run_b: str,
    store: StoreDep,
    judge: JudgeDep,
    profile: ProfileParam = DEFAULT_PROFILE,
) -> Comparison:
    """B - A for every metric over the records both runs share, with paired intervals
    (`notes` says how many records each run leaves out; 422 when they share none)."""
    return compare_runs(store, run_a, run_b, profile, judge)
