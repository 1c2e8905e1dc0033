"""The Core (`streameval.core`): it turns a benchmark into sessions, streams each session's
causal timeline to an adapter over WebSockets and records everything in the store.

Its rooms, from the bottom up; each one imports only rooms listed before it (its docstring
says which, and tests/test_import_graph.py holds every room to its list):

- `errors.py`: `CoreError`, the root of the Core's user errors.
- `store/`: the SQL store, the contract with the scorer (schema, queue, leases, writer) and
  where things are kept (store URLs, the cache folder).
- `frames/`: a video decoded once into sampled JPEG frames, cached on disk.
- `benchmark/`: benchmark records, their loaders and the importers of public benchmarks.
- `streams/`: what one session plays: the causal timeline of a record, the frames it reads
  and the seeded perturbations of robustness runs.
- `config.py`: a run's declared configuration (`RunConfig`), stored with the run.
- `session/`: one session against one adapter: connection, protocol state, pacing, the send
  path and the recording of every event.
- `run/`: one run: planning its sessions, executing them over the endpoints, workers,
  leases, endpoint health, the run's inputs and exit status.
- `analyses/`: what is measured by running the Core: the causality audit and capacity.
- `launch/`: starting things elsewhere: the control API, Slurm job arrays, adapter processes.
- `cli/`: the Core's commands of the `streameval` command line.

docs/code-map.md says which file to open first for a common change.
"""
