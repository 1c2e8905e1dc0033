"""Analyses that run the Core to measure something other than a model's answers: the causality
audit of an adapter (causality_audit.py: its runs and verdict; causality_streams.py: its videos
and records; causality_rule.py: its decision rule) and the capacity of an endpoint at a latency
target (capacity_search.py).

May import: errors, store, frames, benchmark, streams, config, session, run.
"""
