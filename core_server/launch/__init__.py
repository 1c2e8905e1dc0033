"""Starting things elsewhere: runs over the Core's HTTP control API (control_api.py assembles
it from control_adapters.py, control_runs.py and control_run_config.py), workers as a Slurm
job array (slurm.py), adapters as local processes on a free port (adapter_process.py), and
the replicas `run --adapter` starts, restarts and stops (managed_adapters.py, each one's
process in replica_process.py).

May import: errors, store, frames, benchmark, streams, config, session, run.
"""
