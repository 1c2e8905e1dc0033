"""The read-only results API: runs with their declared conditions, metrics per profile,
per-record results and timelines, and run comparisons, as JSON with OpenAPI docs (/docs).
Served by `streameval results-api`.

create_app assembles it: the routers of routes/ (one a resource), the state they share
(routes/state.py: the store, the judge, the scored runs of score_cache.py, the caches of
the dashboard's helpers) and the error answers (error_responses.py).

Nothing it answers names the store or a path on the server (/healthz, /readyz, error
bodies). While the store is down it answers 503 within a second (streameval/web_readiness.py).

The same app serves the dashboard (scorer/service/dashboard/static) under /ui/, and / leads there.
"""

from __future__ import annotations

from fastapi.staticfiles import StaticFiles

from streameval.api_docs import add_offline_docs
from streameval.core.store.store import Store
from streameval.scorer.judging.judges import Judge
from streameval.scorer.report import cached
from streameval.scorer.service.dashboard import STATIC_DIR
from streameval.scorer.service.dashboard.frames import RunFrames
from streameval.scorer.service.dashboard.progress import RateMeter
from streameval.scorer.service.error_responses import add_error_handlers, store_names
from streameval.scorer.service.routes import (
    compare,
    dashboard,
    frames,
    metrics,
    records,
    runs,
    service,
    table,
)
from streameval.scorer.service.routes.state import ResultsState
from streameval.scorer.service.score_cache import ScoreCache
from streameval.web_readiness import add_readiness
from streameval.web_security import AllowedHosts, ProtectedApp

DESCRIPTION = (
    "Read-only access to scored runs: declared conditions, metrics per scoring "
    "profile (with population, coverage and 95% bootstrap intervals clustered by "
    "video), per-record results and timelines, and paired run comparisons. "
    "Metric definitions: docs/metrics.md."
)
# In the order of the OpenAPI schema's paths.
ROUTERS = (
    service.router,
    runs.router,
    metrics.router,
    records.router,
    frames.router,
    compare.router,
    table.router,
    dashboard.router,
)


def create_app(
    store_url: str, judge: Judge | None = None, allowed_hosts: AllowedHosts | None = None
) -> ProtectedApp:
    """The API over one store (opened read-only, once). Raises StoreError if it cannot.

    Every answer carries the security headers (streameval/web_security.py); `allowed_hosts`
    are the Host names it answers (`streameval results-api` always sets them; None, for an
    in-process client, answers any)."""
    store = Store(store_url, read_only=True)
    judge = cached(judge)
    app = ProtectedApp(
        title="streameval results API",
        version="1",
        description=DESCRIPTION,
        # FastAPI's own pages load from a CDN: add_offline_docs serves them from the package.
        docs_url=None,
        redoc_url=None,
    )
    app.allowed_hosts = allowed_hosts
    add_offline_docs(app)
    add_error_handlers(app, store_names(store_url, store))
    app.state.results = ResultsState(
        store=store,
        judge=judge,
        scores=ScoreCache(store, judge),
        meter=RateMeter(),
        frames=RunFrames(store),
    )
    # /readyz after /healthz; every request bounded by the store's request budget.
    add_readiness(app, store.clock)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/ui", StaticFiles(directory=STATIC_DIR, html=True), name="dashboard")
    return app
