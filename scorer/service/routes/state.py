"""What the results API's endpoints share, built once per app by create_app: the store
(read-only), the judge, the scored runs, the progress rate meter and the frame cache.
It lives on `app.state.results`; an endpoint names what it uses as a dependency
(`store: StoreDep`), which adds nothing to the OpenAPI schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from streameval.core.store.store import Store
from streameval.scorer.judging.judges import Judge
from streameval.scorer.service.dashboard.frames import RunFrames
from streameval.scorer.service.dashboard.progress import RateMeter
from streameval.scorer.service.score_cache import ScoreCache


@dataclass(frozen=True)
class ResultsState:
    store: Store
    judge: Judge | None  # with the verdict cache (scorer.report.cached)
    scores: ScoreCache
    meter: RateMeter
    frames: RunFrames


def _state(request: Request) -> ResultsState:
    return request.app.state.results


# Async, so that FastAPI calls them on the event loop instead of sending each to a thread.
async def _store(request: Request) -> Store:
    return _state(request).store


async def _judge(request: Request) -> Judge | None:
    return _state(request).judge


async def _scores(request: Request) -> ScoreCache:
    return _state(request).scores


async def _meter(request: Request) -> RateMeter:
    return _state(request).meter


async def _frames(request: Request) -> RunFrames:
    return _state(request).frames


StoreDep = Annotated[Store, Depends(_store)]
JudgeDep = Annotated[Judge | None, Depends(_judge)]
ScoresDep = Annotated[ScoreCache, Depends(_scores)]
MeterDep = Annotated[RateMeter, Depends(_meter)]
FramesDep = Annotated[RunFrames, Depends(_frames)]
