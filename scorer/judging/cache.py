"""The LLM judge's cache: one row per judged (template, model, task type, question,
reference, prediction), kept in the store so a second scoring costs no judge calls.

The table lives on its own MetaData (the store's models describe the Core's tables); the
store creates it through migration 0002_judge_cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Column, DateTime, Double, Engine, MetaData, String, Table, Text, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from streameval.scorer.errors import ScoreError

metadata = MetaData()

judge_cache = Table(
    "judge_cache",
    metadata,
    Column("key", String(64), primary_key=True),  # sha256 hex of the fields below
    Column("template_version", String(50), nullable=False),
    Column("model", String(200), nullable=False),
    Column("task_type", String(200), nullable=False),
    Column("question", Text, nullable=False),
    Column("reference", Text, nullable=False),
    Column("prediction", Text, nullable=False),
    Column("score", Double, nullable=False),
    Column("reply", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

_LOOKUP_CHUNK = 500  # keys per IN (...) query, well under every driver's parameter limit


@dataclass(frozen=True)
class CachedVerdict:
    key: str
    template_version: str
    model: str
    task_type: str
    question: str
    reference: str
    prediction: str
    score: float
    reply: str


class JudgeCache:
    """Read and add verdicts; a key already present is left as it is."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get_many(self, keys: Iterable[str]) -> dict[str, float]:
        wanted = sorted(set(keys))
        found: dict[str, float] = {}
        try:
            with self._engine.connect() as conn:
                for start in range(0, len(wanted), _LOOKUP_CHUNK):
                    chunk = wanted[start : start + _LOOKUP_CHUNK]
                    query = select(judge_cache.c.key, judge_cache.c.score).where(
                        judge_cache.c.key.in_(chunk)
                    )
                    found.update({row.key: row.score for row in conn.execute(query)})
        except SQLAlchemyError as exc:
            raise ScoreError(f"cannot read the judge cache: {_first_line(exc)}") from exc
        return found

    def put_many(self, verdicts: Sequence[CachedVerdict]) -> None:
        if not verdicts:
            return
        now = datetime.now(UTC)
        rows = [{**verdict.__dict__, "created_at": now} for verdict in verdicts]
        try:
            with self._engine.begin() as conn:
                dialect = conn.dialect.name
                insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
                conn.execute(insert(judge_cache).on_conflict_do_nothing(), rows)
        except SQLAlchemyError as exc:
            raise ScoreError(f"cannot write the judge cache: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
