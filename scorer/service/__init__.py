"""What serves scores to people: the `streameval` scorer commands (cli.py), the read-only
results API (api.py assembles it from the routers of routes/, the scored runs it keeps in
score_cache.py, its error answers in error_responses.py) with its dashboard (dashboard/),
the static HTML report (html_report.py), the run details both show (run_details.py) and
one record's timeline (timeline.py).

Nothing here computes a metric: it asks scorer/report.py and scorer/compare.py.

Beyond the scorer it reads the Core's store, benchmark and frame modules (read-only) and the
shared top-level modules of `streameval`; only the top-level command (streameval/cli.py)
imports it.

May import: compare, episodes, errors, judging, metrics, paper_table, profiles, report, source.
"""
