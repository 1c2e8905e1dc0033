"""The Core's commands of the `streameval` command line. commands.py assembles them (and
holds `export` and `core-api`); `run` lives in run_command.py with its options gathered once
into a typed `RunOptions` (run_options.py) and the adapter it may start (--adapter, shared with
`worker`: run_adapters.py), `worker` in worker_command.py, `capacity` in
capacity.py with capacity_options.py, and `runs` (runs.py), `adapter` (adapter.py), `audit`
(audit.py), `data` (data.py) and `launch` (launch.py) in one module each; common.py holds
what they share, progress_display.py how a run's phases are shown.

Building the command line must stay cheap (`streameval --help`): command modules import
the rooms they drive inside the commands.

May import: errors, store, frames, benchmark, streams, config, session, run, analyses, launch.
"""
