"""Evaluation suites: `streameval eval SUITE.yaml` runs every adapter a file names on every
benchmark it names, one run per (adapter, benchmark), grouped under a suite id in the store,
resumable as a whole, and prints the suite's table.

`model.py` is the suite file (a strict pydantic model, read with its keys' line numbers),
`progress.py` what is done of a stored suite and what is left, `runner.py` runs a suite
over managed adapters through the Core's run path, `command.py` is the command. It sits
above the Core and the scorer (it runs, then tables), so the one `streameval` command
(streameval/cli.py) mounts it.
"""
