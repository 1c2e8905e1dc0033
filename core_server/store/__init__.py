"""The store: the SQL schema that is the contract between the Core and the scorer
(models.py, open it first) and every read and write of it.

`Store` (store.py) is the one object callers hold; it is assembled from one part per
responsibility, each holding its own SQL: runs and their records (runs.py), sessions
(sessions.py), events (events.py), analyses (analyses.py), adapter endpoints
(endpoints.py) and the digests a run's videos are bound to (videos.py), over a shared
database base (database.py: connecting, transactions and the retry of transient failures in
retry.py, engine.py, errors.py). The session queue and the leases let workers share a run
(queue.py, run_lease.py); the event writer batches a session's events (writer.py,
writer_process.py); migrations/ and schema.py bring an older store up to date; export.py
writes a run as JSONL (export_file.py: to a file, renamed into place once whole) and
light.py lists a SQLite store without SQLAlchemy. locations.py says where things are kept:
the store a `--store` option names and the cache folder.

May import: errors.
"""
