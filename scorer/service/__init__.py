"""What serves scores to people: the `streameval` scorer commands (cli.py), the read-only
results API (api.py) with its dashboard (dashboard/), the static HTML report
(html_report.py) and one record's timeline (timeline.py).

Nothing here computes a metric: it asks scorer/report.py and scorer/compare.py.

May import: compare, episodes, errors, judging, metrics, profiles, report, source.
"""
