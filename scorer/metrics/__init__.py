"""The metric families and what turns their per-record results into numbers.

Each family (qa.py, proactive.py, workload.py, realstream.py, readiness.py, ovo.py,
streamingbench.py) declares itself in one module, next to its evaluation, as a
`MetricFamily` (family.py); registry.py collects them. record.py evaluates one record under
every family a profile needs; statistic.py holds the statistics a family declares over the
fields its records contribute; aggregate.py computes them overall and per slice, with
bootstrap intervals.

May import: episodes, errors, judging, parsing, profiles.
"""
