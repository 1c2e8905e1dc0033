"""Fewer garbage-collector pauses while sessions run.

A full collection walks every object the process holds, with the event loop stopped: at
1,000 wall-clock sessions each took 0.2-0.5 s, every 20 s or so, and every session's frames
waited for it (lag p99 330 ms, against 23 ms without). While a worker runs sessions, the
objects made before (modules, the benchmark, the configuration, caches) are frozen out of
collections, and a full collection runs a hundred times less often; the young generations,
where a session's garbage dies, are collected as usual. Everything is restored when the last
worker of the process ends (the API server may run several at once).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# The oldest generation is collected after this many times more young collections.
FULL_COLLECTIONS_RARER = 100

_workers = 0
_thresholds: tuple[int, int, int] = gc.get_threshold()


@contextlib.contextmanager
def fewer_pauses() -> Iterator[None]:
    global _workers, _thresholds
    if _workers == 0:
        _thresholds = gc.get_threshold()
        young, middle, old = _thresholds
        gc.freeze()
        gc.set_threshold(young, middle, old * FULL_COLLECTIONS_RARER)
    _workers += 1
    try:
        yield
    finally:
        _workers -= 1
        if _workers == 0:
            gc.set_threshold(*_thresholds)
            gc.unfreeze()
