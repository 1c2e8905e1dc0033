"""The results API's routes, one APIRouter a resource: the service itself (service.py:
/healthz, /profiles), runs (runs.py), a run's metrics (metrics.py), its records (records.py)
and their frames (frames.py), run comparisons (compare.py) and the dashboard's pages
(dashboard.py). What they share arrives explicitly: the store, the judge and the caches as
FastAPI dependencies (state.py), the query parameters and the page shape (params.py).
scorer/service/api.py assembles them into the app.

May import: dashboard, run_details, score_cache, timeline.
"""
