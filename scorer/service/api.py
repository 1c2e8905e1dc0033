"""The read-only results API: runs with their declared conditions, metrics per profile,
per-record results and timelines, and run comparisons, as JSON with OpenAPI docs (/docs).
Served by `streameval results-api`.

Scores are computed on request and kept (a few runs per profile) until the run gains events
or changes status, so a dashboard can page through records without rescoring. Scoring locks
one (run, profile) pair, never the whole API: while one run scores, every other run answers.

Nothing it answers names the store or a path on the server (/healthz, error bodies).

The same app serves the dashboard (scorer/service/dashboard/static) under /ui/, and / leads there.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from pathlib import Path as FilePath
from typing import Annotated, Any, Generic, TypeVar

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from streameval.api_docs import Health, add_offline_docs
from streameval.core.benchmark.records import Record
from streameval.core.store.store import RunInfo, Store, StoreError
from streameval.scorer.compare import Comparison, compare_runs
from streameval.scorer.errors import ScoreError
from streameval.scorer.judging.judges import Judge
from streameval.scorer.profiles import SCORING_PROFILES, ProfileError
from streameval.scorer.report import (
    ProfileReport,
    RecordResult,
    RunScores,
    cached,
    profile_report,
    score_run,
)
from streameval.scorer.service.dashboard import STATIC_DIR
from streameval.scorer.service.dashboard.frames import (
    FrameIndex,
    FramesUnavailable,
    RunFrames,
    thumbnail,
)
from streameval.scorer.service.dashboard.help import MetricHelpEntry, metric_help
from streameval.scorer.service.dashboard.progress import RateMeter, RunProgress, run_progress
from streameval.scorer.service.timeline import RecordTimeline, record_timeline
from streameval.scorer.source import store_source

T = TypeVar("T")
DEFAULT_PROFILE = "trace-paper-v1"
_KEPT_SCORES = 8  # scored (run, profile) pairs kept in memory
ProfileParam = Annotated[str, Query(description=f"scoring profile: {', '.join(SCORING_PROFILES)}")]
Offset = Annotated[int, Query(ge=0)]
Limit = Annotated[int, Query(ge=1, le=1000)]
ThumbnailWidth = Annotated[int, Query(ge=16, le=960, description="maximum width in pixels")]


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int


class RunSummary(BaseModel):
    run_id: str
    created_at: datetime
    finished_at: datetime | None
    status: str
    benchmark: str
    config_hash: str
    profile: str | None
    pacing: str | None
    conditions: dict[str, Any]


class RunDetail(RunSummary):
    config: dict[str, Any]
    versions: dict[str, str]
    events: int
    sessions: dict[str, int]
    # Analyses stored with the run, by name: a capacity search's curve, a causality audit.
    analyses: dict[str, Any] = {}


def _summary(info: RunInfo) -> dict[str, Any]:
    return {
        "run_id": info.run_id,
        "created_at": info.created_at,
        "finished_at": info.finished_at,
        "status": info.status,
        "benchmark": info.benchmark,
        "config_hash": info.config_hash,
        "profile": info.config.get("profile"),
        "pacing": info.config.get("pacing"),
        "conditions": info.conditions,
    }


def run_detail(store: Store, run_id: str) -> dict[str, Any]:
    """A run with its configuration, library versions, event count and sessions per status."""
    info = store.get_run(run_id)
    statuses: dict[str, int] = {}
    for session in store.sessions(run_id):
        statuses[session.status] = statuses.get(session.status, 0) + 1
    return {
        **_summary(info),
        "config": info.config,
        "versions": info.versions,
        "events": store.count_events(run_id),
        "sessions": statuses,
        "analyses": store.analyses(run_id),
    }


def stored_record(store: Store, run_id: str, record_id: str) -> dict[str, Any]:
    """The benchmark record as the run stored it (question, options, answer, triggers)."""
    for data in store.records(run_id):
        if data["record_id"] == record_id:
            return data
    raise HTTPException(404, f"run {run_id!r} has no record {record_id!r}")


class _PairLock:
    """The lock of one (run, profile) pair and how many requests hold or wait for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class _Scores:
    """Scored runs, keyed by what would change them (event count and run status).

    Two requests for the same (run, profile) score it once (the second waits for the
    first); requests for other pairs never wait: `_lock` guards only the dictionaries, and
    is never held while scoring."""

    def __init__(self, store: Store, judge: Judge | None) -> None:
        self._store = store
        self._judge = judge
        self._kept: OrderedDict[tuple, RunScores] = OrderedDict()
        self._lock = threading.Lock()
        self._pairs: dict[tuple[str, str], _PairLock] = {}

    def _cached(self, key: tuple) -> RunScores | None:
        with self._lock:
            scores = self._kept.get(key)
            if scores is not None:
                self._kept.move_to_end(key)
            return scores

    def get(self, run_id: str, profile: str) -> RunScores:
        info = self._store.get_run(run_id)
        key = (run_id, profile, info.status, self._store.count_events(run_id))
        if (scores := self._cached(key)) is not None:
            return scores
        with self._lock:
            pair = self._pairs.setdefault((run_id, profile), _PairLock())
            pair.users += 1
        try:
            with pair.lock:
                # Whoever held the pair's lock before may have scored it meanwhile.
                if (scores := self._cached(key)) is not None:
                    return scores
                scores = score_run(self._store, run_id, profile, self._judge)
                with self._lock:
                    self._kept[key] = scores
                    while len(self._kept) > _KEPT_SCORES:
                        self._kept.popitem(last=False)
                return scores
        finally:
            # Dropped with its last user, so unknown profiles or runs leave nothing behind.
            with self._lock:
                pair.users -= 1
                if pair.users == 0:
                    del self._pairs[(run_id, profile)]


def _store_names(store_url: str, store: Store) -> list[str]:
    """How an error line may name the store: its URL, and a SQLite file's path."""
    names = [store.url, store_url]
    try:
        database = make_url(store_url).database
    except ArgumentError:
        database = None
    if database and store_url.startswith("sqlite"):
        names += [database, str(FilePath(database).resolve())]
    # Longest first, so that a URL is replaced before the path inside it.
    return sorted({name for name in names if name}, key=len, reverse=True)


def _without_store(message: str, names: list[str]) -> str:
    """An error line with the store's URL or path (a server path, a database host) taken out."""
    for name in names:
        message = message.replace(name, "the store")
    return message


def _page(items: list, offset: int, limit: int) -> dict[str, Any]:
    return {
        "items": items[offset : offset + limit],
        "total": len(items),
        "offset": offset,
        "limit": limit,
    }


def create_app(store_url: str, judge: Judge | None = None) -> FastAPI:
    """The API over one store (opened read-only, once). Raises StoreError if it cannot."""
    store = Store(store_url, read_only=True)
    hidden = _store_names(store_url, store)
    judge = cached(judge)
    scores = _Scores(store, judge)
    meter = RateMeter()
    frames = RunFrames(store)
    app = FastAPI(
        title="streameval results API",
        version="1",
        description=(
            "Read-only access to scored runs: declared conditions, metrics per scoring "
            "profile (with population, coverage and 95% bootstrap intervals clustered by "
            "video), per-record results and timelines, and paired run comparisons. "
            "Metric definitions: docs/metrics.md."
        ),
        # FastAPI's own pages load from a CDN: add_offline_docs serves them from the package.
        docs_url=None,
        redoc_url=None,
    )
    add_offline_docs(app)

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, exc: StoreError) -> JSONResponse:
        message = str(exc)
        if message.startswith("unknown run id"):
            # "unknown run id 'x' in store sqlite:////path": the run, not where it was looked.
            detail = _without_store(message, hidden).removesuffix(" in store the store")
            return JSONResponse(status_code=404, content={"detail": detail})
        return JSONResponse(status_code=503, content={"detail": _without_store(message, hidden)})

    @app.exception_handler(ScoreError)
    async def _score_error(_: Request, exc: ScoreError) -> JSONResponse:
        status = 400 if isinstance(exc, ProfileError) else 422
        return JSONResponse(status_code=status, content={"detail": str(exc)})

    @app.get("/healthz", response_model=Health, tags=["service"])
    def healthz() -> Health:
        """Liveness for health checks."""
        # Says that it serves, not from where: the store URL would name a path or a host.
        return Health()

    @app.get("/profiles", response_model=list[ProfileReport], tags=["profiles"])
    def profiles() -> list[ProfileReport]:
        """Every scoring profile with all its constants."""
        return [profile_report(profile) for profile in SCORING_PROFILES.values()]

    @app.get("/runs", response_model=Page[RunSummary], tags=["runs"])
    def runs(offset: Offset = 0, limit: Limit = 50) -> dict[str, Any]:
        """Runs, newest first, with their declared conditions."""
        return _page([_summary(info) for info in store.list_runs()], offset, limit)

    @app.get("/runs/{run_id}", response_model=RunDetail, tags=["runs"])
    def run(run_id: str) -> dict[str, Any]:
        """A run with its configuration, library versions, event count and sessions."""
        return run_detail(store, run_id)

    @app.get("/runs/{run_id}/progress", response_model=RunProgress, tags=["runs"])
    def progress(run_id: str) -> RunProgress:
        """Live progress: sessions per status, running and failed sessions, events per second
        (measured between polls of this endpoint)."""
        return run_progress(store, run_id, meter)

    @app.get(
        "/runs/{run_id}/metrics",
        response_model=RunScores,
        response_model_exclude={"records"},
        tags=["metrics"],
    )
    def metrics(run_id: str, profile: ProfileParam = DEFAULT_PROFILE) -> RunScores:
        """Overall, per task type and per source benchmark metrics under one profile."""
        return scores.get(run_id, profile)

    @app.get("/runs/{run_id}/records", response_model=Page[RecordResult], tags=["records"])
    def records(
        run_id: str,
        profile: ProfileParam = DEFAULT_PROFILE,
        task: str | None = None,
        task_type: str | None = None,
        source_benchmark: str | None = None,
        status: Annotated[
            str | None, Query(description="finished, failed, incomplete, not_run")
        ] = None,
        offset: Offset = 0,
        limit: Limit = 100,
    ) -> dict[str, Any]:
        """Per-record results (prediction, assignment, scores), ordered by record id."""
        wanted = {
            "task": task,
            "task_type": task_type,
            "source_benchmark": source_benchmark,
            "status": status,
        }
        chosen = [
            result
            for result in scores.get(run_id, profile).records
            if all(value is None or getattr(result, key) == value for key, value in wanted.items())
        ]
        return _page(chosen, offset, limit)

    @app.get("/runs/{run_id}/records/{record_id}", response_model=RecordResult, tags=["records"])
    def record(
        run_id: str, record_id: str, profile: ProfileParam = DEFAULT_PROFILE
    ) -> RecordResult:
        """One record's result (prediction, assignment, scores)."""
        for result in scores.get(run_id, profile).records:
            if result.record_id == record_id:
                return result
        raise HTTPException(404, f"run {run_id!r} has no record {record_id!r}")

    @app.get(
        "/runs/{run_id}/records/{record_id}/timeline",
        response_model=RecordTimeline,
        tags=["records"],
    )
    def timeline(
        run_id: str, record_id: str, profile: ProfileParam = DEFAULT_PROFILE
    ) -> RecordTimeline:
        """Frames, target windows, response episodes (onsets, assignment, false alarms)."""
        source = store_source(store, run_id)
        if not any(r["record_id"] == record_id for r in source.records):
            raise HTTPException(404, f"run {run_id!r} has no record {record_id!r}")
        return record_timeline(source, record_id, profile, judge)

    @app.get(
        "/runs/{run_id}/records/{record_id}/annotation", response_model=Record, tags=["records"]
    )
    def annotation(run_id: str, record_id: str) -> dict[str, Any]:
        """The benchmark record as stored with the run: question or instruction, options,
        answer, evidence, triggers."""
        return stored_record(store, run_id, record_id)

    @app.get(
        "/runs/{run_id}/records/{record_id}/frames", response_model=FrameIndex, tags=["frames"]
    )
    def frame_index(run_id: str, record_id: str) -> FrameIndex:
        """The video's samples in the run's frame cache, or why they are not available here."""
        stored_record(store, run_id, record_id)  # 404 for a record the run does not have
        return frames.index(run_id, record_id)

    @app.get(
        "/runs/{run_id}/records/{record_id}/frames/{index}",
        response_class=Response,
        responses={
            200: {
                "description": "a JPEG thumbnail",
                "content": {"image/jpeg": {"schema": {"type": "string", "format": "binary"}}},
            }
        },
        tags=["frames"],
    )
    def frame(
        run_id: str,
        record_id: str,
        index: Annotated[int, Path(ge=0, description="sample index (t = index / fps)")],
        width: ThumbnailWidth = 160,
    ) -> Response:
        """One sampled frame as the model saw it, scaled down to `width`."""
        stored_record(store, run_id, record_id)  # 404 for a record the run does not have
        try:
            video = frames.video_frames(run_id, record_id)
        except FramesUnavailable:
            # The reason names files on the server (the video, the cache): the frame
            # index (`/frames`) gives it; a frame request only says that it is missing.
            raise HTTPException(
                404, f"frame {index} of record {record_id!r} is not available"
            ) from None
        if not index < len(video.frames):
            raise HTTPException(404, f"no frame {index}: the video has {len(video.frames)} samples")
        try:
            jpeg = thumbnail(video, index, width)
        except FramesUnavailable:  # a cached sample that cannot be read: named by its path
            raise HTTPException(
                404, f"frame {index} of record {record_id!r} is not available"
            ) from None
        # Cache entries are content-addressed: a frame never changes.
        headers = {"Cache-Control": "max-age=86400, immutable"}
        return Response(jpeg, media_type="image/jpeg", headers=headers)

    @app.get("/compare", response_model=Comparison, tags=["metrics"])
    def compare(run_a: str, run_b: str, profile: ProfileParam = DEFAULT_PROFILE) -> Comparison:
        """B - A for every metric over the records both runs share, with paired intervals
        (`notes` says how many records each run leaves out; 422 when they share none)."""
        return compare_runs(store, run_a, run_b, profile, judge)

    # HEAD as well as GET for what a browser or a link checker opens (the dashboard under
    # /ui/ is StaticFiles, which answers both).
    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("ui/")

    @app.get("/metrics/help", response_model=list[MetricHelpEntry], tags=["metrics"])
    def metrics_help() -> list[MetricHelpEntry]:
        """What every metric means, in its unit and on its scale (the dashboard's hover text):
        `{"family": "qa", "name": "accuracy", "unit": "fraction (0-1)", "scale": "0-1, higher
        is better", "meaning": "QA records answered with the right option / QA records ..."}`.
        """
        return metric_help()

    @app.api_route("/favicon.ico", methods=["GET", "HEAD"], include_in_schema=False)
    def favicon() -> FileResponse:
        # Browsers ask for /favicon.ico whatever a page links: the dashboard's icon answers.
        return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")

    app.mount("/ui", StaticFiles(directory=STATIC_DIR, html=True), name="dashboard")
    app.state.store = store
    return app
