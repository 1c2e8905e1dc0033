"""One run: expanding a benchmark into sessions and executing them over the adapter endpoints
(runner.py), the workers that claim sessions from the store's queue (worker.py), endpoint
health (endpoint_health.py), the run's bound inputs (inputs.py), the records of a robustness
run (perturb_records.py, negative_streams.py), the adapter identity compared on a resume
(adapter_identity.py), how many sessions a process can hold (capacity.py) and what a run
exits with (exit_codes.py, timeouts.py).

May import: errors, store, frames, benchmark, streams, config, session.
"""
