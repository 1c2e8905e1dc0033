"""The LLM judge's verdict cache: a SQLite file of its own beside the stores, so every
command that scores (`score`, `compare`, `report`, the results API), whatever its store
and even with the store opened read-only or an exported log, reuses verdicts and a second
scoring of a run costs no judge calls.

It lives at `judge_verdicts.sqlite` in the cache directory (~/.cache/streameval, moved by
$STREAMEVAL_CACHE_DIR). A row is one verdict, keyed by the sha256 of the judge rules' prompt
version, the judge model and what the rules ask (judges.py `LLMJudge.key`); only verdicts
are kept: a failed judgement is asked again next time.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass
from datetime import UTC, datetime
from pathlib import Path

from streameval.core.store.locations import default_cache_dir
from streameval.scorer.errors import ScoreError

CACHE_FILE = "judge_verdicts.sqlite"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, rules TEXT NOT NULL, "
    "model TEXT NOT NULL, request TEXT NOT NULL, score REAL NOT NULL, reply TEXT NOT NULL, "
    "created_at TEXT NOT NULL)"
)
_LOOKUP_CHUNK = 500  # keys per IN (...) query, under SQLite's parameter limit


@dataclass(frozen=True)
class CachedVerdict:
    key: str
    rules: str  # the judge rules' prompt version
    model: str
    request: str  # JSON of what was judged, for people reading the file
    score: float
    reply: str


def default_cache_path() -> Path:
    return default_cache_dir() / CACHE_FILE


class JudgeCache:
    """Read and add verdicts; a key already present is left as it is."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_cache_path()

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30)
            conn.execute(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ScoreError(f"cannot open the judge verdict cache {self.path}: {exc}") from None
        return conn

    def get_many(self, keys: Iterable[str]) -> dict[str, float]:
        wanted = sorted(set(keys))
        found: dict[str, float] = {}
        conn = self._connect()
        try:
            for start in range(0, len(wanted), _LOOKUP_CHUNK):
                chunk = wanted[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT key, score FROM verdicts WHERE key IN ({marks})", chunk
                )
                found.update(dict(rows))
        except sqlite3.Error as exc:
            raise ScoreError(f"cannot read the judge verdict cache {self.path}: {exc}") from None
        finally:
            conn.close()
        return found

    def put_many(self, verdicts: Sequence[CachedVerdict]) -> None:
        if not verdicts:
            return
        now = datetime.now(UTC).isoformat()
        conn = self._connect()
        try:
            with conn:
                conn.executemany(
                    "INSERT OR IGNORE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(*astuple(verdict), now) for verdict in verdicts],
                )
        except sqlite3.Error as exc:
            raise ScoreError(f"cannot write the judge verdict cache {self.path}: {exc}") from None
        finally:
            conn.close()
