"""The store: the SQL schema that is the contract between the Core and the scorer, and every
read and write of it (store.py), the session queue and leases that let workers share a run
(queue.py, run_lease.py), the batched event writer (writer.py, writer_process.py), the
schema's migrations (migrations/), the export of a run (export.py) and a light SQLite reader
for quick listings (light.py). locations.py says where things are kept by default: the store
URL a `--store` option names and the cache folder.

May import: errors.
"""
