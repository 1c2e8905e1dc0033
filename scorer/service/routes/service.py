"""What the results API says of itself, without the store: liveness (/healthz) and the
scoring profiles it scores under (/profiles)."""

from __future__ import annotations

from fastapi import APIRouter

from streameval.api_docs import Health
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import ProfileReport, profile_report

router = APIRouter()


@router.get("/healthz", response_model=Health, tags=["service"])
def healthz() -> Health:
    """Liveness for health checks."""
    # Says that it serves, not from where: the store URL would name a path or a host.
    return Health()


@router.get("/profiles", response_model=list[ProfileReport], tags=["profiles"])
def profiles() -> list[ProfileReport]:
    """Every scoring profile with all its constants."""
    return [profile_report(profile) for profile in SCORING_PROFILES.values()]
