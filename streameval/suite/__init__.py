"""Evaluation suites: `streameval eval SUITE.yaml` runs every adapter a file names on every
benchmark it names, one run per (adapter, benchmark), grouped under a suite id in the store,
resumable as a whole, and prints the suite's table.

`model.py` is the suite file (a strict pydantic model, read with its keys' line numbers,
resolved, and turned into `streameval run`'s options per benchmark), `runner.py` runs or
continues a stored suite over managed adapters through the Core's run path, `command.py`
is the command and its tables. It sits above the Core and the scorer (it runs, then
tables), so the one `streameval` command (streameval/cli.py) mounts it.
"""
