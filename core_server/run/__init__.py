"""One run: a benchmark expanded into sessions, executed over the adapter endpoints.

runner.py (`RunExecutor`, open it first) creates or resumes a run and dispatches each
session a worker claims; it composes one module per concern: the records a run streams
(run_records.py, with perturb_records.py and negative_streams.py for a robustness run),
storing a new run bound to its inputs (run_creation.py, inputs.py) and to its videos' bytes
(video_binding.py), which sessions are left (sessions_to_run.py), admitting endpoints and
checking the adapter's identity (endpoint_admission.py, adapter_identity.py,
endpoint_health.py), keeping the run's lease (lease_keeping.py), filling the frame cache
first (frame_preparation.py), each session's timeline (session_timeline.py), the run's
phases (run_progress.py) and its end: summary, status and exit code (run_end.py,
exit_codes.py). A worker (worker.py) claims sessions from the store's queue, which is how a
run spreads over machines; capacity.py says how many sessions a process can hold,
timeouts.py the defaults the command line shows.

May import: errors, store, frames, benchmark, streams, config, session.
"""
