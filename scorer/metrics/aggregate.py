"""Aggregation: every metric of the profile's families overall, per task type and per source
benchmark, with its population, coverage and a 95% bootstrap confidence interval clustered
by video.

The metrics are the statistics each family declares (registry.py); a slice reports a family
only when some record of the slice is its member. The bootstrap resamples videos with
replacement, seeded per slice, so a slice's interval does not depend on what else was
scored; every statistic computes its replicates from the same resample counts. A metric
whose value draws on fewer than two videos has no interval, whatever the slice holds: a
resample would either repeat its one video's value or leave it out.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from streameval.scorer.metrics.registry import family
from streameval.scorer.metrics.statistic import FieldTable, Statistic
from streameval.scorer.profiles import ScoringProfile

# The profile constants aggregation reads (the families declare their own).
CONSTANTS = ("bootstrap_resamples", "bootstrap_seed", "ci_level")
MIN_VIDEOS = 2  # an interval clustered by video needs at least this many videos


@dataclass(frozen=True)
class Metric:
    value: float | None
    population: int
    observed: int
    coverage: float | None
    ci95: tuple[float, float] | None
    unit: str


def bootstrap_counts(clusters: int, profile: ScoringProfile, key: str) -> np.ndarray | None:
    """How often each video is drawn in each resample (resamples x videos), or None when
    an interval cannot be formed (fewer than two videos, or no resamples asked for)."""
    if clusters < MIN_VIDEOS or profile.bootstrap_resamples == 0:
        return None
    rng = np.random.default_rng([profile.bootstrap_seed, zlib.crc32(key.encode("utf-8"))])
    resamples = profile.bootstrap_resamples
    draws = rng.integers(0, clusters, size=(resamples, clusters))
    flat = draws + np.arange(resamples)[:, None] * clusters
    counts = np.bincount(flat.ravel(), minlength=resamples * clusters)
    return counts.reshape(resamples, clusters).astype(float)


def statistic_interval(
    statistic: Statistic, table: FieldTable, counts: np.ndarray | None, level: float
) -> tuple[float, float] | None:
    """The interval of a statistic that has a value, over the resamples `counts` (None: no
    resamples, or a value that draws on fewer than two videos)."""
    if counts is None or statistic.videos(table) < MIN_VIDEOS:
        return None
    return interval(statistic.replicates(table, counts), level)


def interval(replicates: np.ndarray, level: float) -> tuple[float, float] | None:
    finite = replicates[np.isfinite(replicates)]
    if finite.size == 0:
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return float(low), float(high)


def summarise(
    table: FieldTable, families: Sequence[str], profile: ScoringProfile, key: str
) -> dict[str, dict[str, Metric]]:
    """Every metric of each family that has records in this slice (a metric whose own
    population is empty, e.g. false alarms without answered episodes, has no value)."""
    counts = bootstrap_counts(table.clusters, profile, key)
    result: dict[str, dict[str, Metric]] = {}
    for name in families:
        declared = family(name)
        if not np.any(~np.isnan(table.column(declared.member))):
            continue
        metrics = {}
        for metric, statistic in declared.statistics(profile).items():
            population = statistic.population(table)
            observed = statistic.observed(table)
            value = statistic.estimate(table)
            ci = None
            if value is not None:
                ci = statistic_interval(statistic, table, counts, profile.ci_level)
            metrics[metric] = Metric(
                value=value,
                population=population,
                observed=observed,
                coverage=observed / population if population else None,
                ci95=ci,
                unit=statistic.unit,
            )
        result[name] = metrics
    return result


@dataclass(frozen=True)
class Difference:
    a: float | None
    b: float | None
    diff: float | None  # b - a
    ci95: tuple[float, float] | None
    population_a: int
    population_b: int
    unit: str


def is_timing(family_name: str, metric: str) -> bool:
    """Whether the family measures this metric on the Core's clock, so that its meaning
    depends on the run's pacing."""
    return metric in family(family_name).timing


def compare_tables(
    table_a: FieldTable,
    table_b: FieldTable,
    families: Sequence[str],
    profile: ScoringProfile,
    key: str,
    subtract: Callable[[str, str], bool] = lambda _family, _metric: True,
) -> dict[str, dict[str, Difference]]:
    """Paired differences B - A; the two tables hold the same records in the same order, so
    one set of video resamples serves both runs. A metric (family, metric name) `subtract`
    refuses keeps both values and gets no difference (measured on different clocks or
    protocols)."""
    counts = bootstrap_counts(table_a.clusters, profile, key)
    result: dict[str, dict[str, Difference]] = {}
    for name in families:
        diffs = {}
        for metric, statistic in family(name).statistics(profile).items():
            population_a, population_b = (
                statistic.population(table_a),
                statistic.population(table_b),
            )
            if population_a == 0 and population_b == 0:
                continue
            a, b = statistic.estimate(table_a), statistic.estimate(table_b)
            diff = None if a is None or b is None or not subtract(name, metric) else b - a
            ci = None
            if (
                counts is not None
                and diff is not None
                and _paired_videos(statistic, table_a, table_b)
            ):
                replicated = statistic.replicates(table_b, counts) - statistic.replicates(
                    table_a, counts
                )
                ci = interval(replicated, profile.ci_level)
            diffs[metric] = Difference(a, b, diff, ci, population_a, population_b, statistic.unit)
        result[name] = diffs
    return result


def _paired_videos(statistic: Statistic, table_a: FieldTable, table_b: FieldTable) -> bool:
    """Whether the statistic draws on enough videos in both runs for a paired interval."""
    return min(statistic.videos(table_a), statistic.videos(table_b)) >= MIN_VIDEOS
