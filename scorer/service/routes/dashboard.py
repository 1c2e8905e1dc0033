"""The dashboard's pages around the static app (mounted under /ui/ by create_app): / leads
there, /favicon.ico is its icon, /metrics/help is the metric glossary behind its hover text."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from streameval.scorer.service.dashboard import STATIC_DIR
from streameval.scorer.service.dashboard.help import MetricHelpEntry, metric_help

router = APIRouter()


# HEAD as well as GET for what a browser or a link checker opens (the dashboard under
# /ui/ is StaticFiles, which answers both).
@router.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
def home() -> RedirectResponse:
    return RedirectResponse("ui/")


@router.get("/metrics/help", response_model=list[MetricHelpEntry], tags=["metrics"])
def metrics_help() -> list[MetricHelpEntry]:
    """What every metric means, in its unit and on its scale (the dashboard's hover text):
    `{"family": "qa", "name": "accuracy", "unit": "fraction (0-1)", "scale": "0-1, higher
    is better", "meaning": "QA records answered with the right option / QA records ..."}`.
    """
    return metric_help()


@router.api_route("/favicon.ico", methods=["GET", "HEAD"], include_in_schema=False)
def favicon() -> FileResponse:
    # Browsers ask for /favicon.ico whatever a page links: the dashboard's icon answers.
    return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")
