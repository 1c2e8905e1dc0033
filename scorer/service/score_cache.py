"""The scored runs the results API keeps: a few (run, profile) pairs, each scored once
until the run gains events or changes status, so a dashboard can page through records
without rescoring. Scoring locks one (run, profile) pair, never the whole API: while one
run scores, every other run answers."""

from __future__ import annotations

import threading
from collections import OrderedDict

from streameval.core.store.store import Store
from streameval.scorer.judging.judges import Judge
from streameval.scorer.report import RunScores, score_run

_KEPT_SCORES = 8  # scored (run, profile) pairs kept in memory


class _PairLock:
    """The lock of one (run, profile) pair and how many requests hold or wait for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class ScoreCache:
    """Scored runs, keyed by what would change them (event count and run status).

    Two requests for the same (run, profile) score it once (the second waits for the
    first); requests for other pairs never wait: `_lock` guards only the dictionaries, and
    is never held while scoring."""

    def __init__(self, store: Store, judge: Judge | None) -> None:
        self._store = store
        self._judge = judge
        self._kept: OrderedDict[tuple, RunScores] = OrderedDict()
        self._lock = threading.Lock()
        self._pairs: dict[tuple[str, str], _PairLock] = {}

    def _cached(self, key: tuple) -> RunScores | None:
        with self._lock:
            scores = self._kept.get(key)
            if scores is not None:
                self._kept.move_to_end(key)
            return scores

    def get(self, run_id: str, profile: str) -> RunScores:
        info = self._store.get_run(run_id)
        key = (run_id, profile, info.status, self._store.count_events(run_id))
        if (scores := self._cached(key)) is not None:
            return scores
        with self._lock:
            pair = self._pairs.setdefault((run_id, profile), _PairLock())
            pair.users += 1
        try:
            with pair.lock:
                # Whoever held the pair's lock before may have scored it meanwhile.
                if (scores := self._cached(key)) is not None:
                    return scores
                scores = score_run(self._store, run_id, profile, self._judge)
                with self._lock:
                    self._kept[key] = scores
                    while len(self._kept) > _KEPT_SCORES:
                        self._kept.popitem(last=False)
                return scores
        finally:
            # Dropped with its last user, so unknown profiles or runs leave nothing behind.
            with self._lock:
                pair.users -= 1
                if pair.users == 0:
                    del self._pairs[(run_id, profile)]
