"""The Core's commands of the `streameval` command line: `run`, `resume`, `worker`, `runs`,
`export` (commands.py), `adapter` (adapter.py), `audit` (audit.py), `capacity`
(capacity.py), `data` (data.py), `launch` (launch.py), with what they share (common.py) and
how a run's progress is shown (progress_display.py).

Building the command line must stay cheap (`streameval --help`): command modules import
the rooms they drive inside the commands.

May import: errors, store, frames, benchmark, streams, config, session, run, analyses, launch.
"""
