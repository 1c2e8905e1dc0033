"""A run's metrics under one scoring profile (overall, per task type, per source benchmark),
from the scored runs the API keeps."""

from __future__ import annotations

from fastapi import APIRouter

from streameval.scorer.report import RunScores
from streameval.scorer.service.routes.params import DEFAULT_PROFILE, ProfileParam
from streameval.scorer.service.routes.state import ScoresDep

router = APIRouter(tags=["metrics"])


@router.get("/runs/{run_id}/metrics", response_model=RunScores, response_model_exclude={"records"})
def metrics(run_id: str, scores: ScoresDep, profile: ProfileParam = DEFAULT_PROFILE) -> RunScores:
    """Overall, per task type and per source benchmark metrics under one profile."""
    return scores.get(run_id, profile)
