"""The metric glossary as the dashboard reads it (`GET /metrics/help`, and inlined in a static
report): every metric's unit, scale and one-line meaning, named by family, since one name
(`accuracy`) means different things in different families. The help itself is
scorer/metrics/explain.py's."""

from __future__ import annotations

from dataclasses import asdict

from pydantic import BaseModel, Field

from streameval.scorer.metrics.explain import COLUMNS, family_glossary, run_level_glossary


class MetricHelpEntry(BaseModel):
    family: str | None = Field(
        description="the metric's family (qa, proactive, ...); null for a column that every "
        "metric table shows beside the value (95% CI, coverage)"
    )
    name: str = Field(description="the metric as named in the score output")
    unit: str
    scale: str
    meaning: str


def metric_help() -> list[MetricHelpEntry]:
    """Every metric of every family, the numbers of no family (a robustness run's
    negative_streams), then the metric tables' columns."""
    metrics = [
        MetricHelpEntry(family=family, **asdict(help))
        for family, helps in (family_glossary() | run_level_glossary()).items()
        for help in helps
    ]
    return metrics + [MetricHelpEntry(family=None, **asdict(help)) for help in COLUMNS]
