"""The scorer (`streameval.scorer`): recorded events in, metrics out. It reads a run from a
store or an export (source.py), assembles each session's trace (episodes.py), evaluates
every record under a versioned scoring profile (profiles.py, metrics/, judging/, parsing.py)
and reports or compares runs (report.py, compare.py); service/ serves the results.

It never writes what the Core recorded, and neither the Core nor the adapters import it.
"""
