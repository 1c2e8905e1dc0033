"""Aggregation: every metric overall, per task type and per source benchmark, with its
population, coverage and a 95% bootstrap confidence interval clustered by video.

Each record contributes named fields (NaN = missing or not in that metric's population)
and lists (e.g. the response delays of its windows). A metric is a statistic over those:
a ratio of sums, a mean or sum over observed records, a quantile, a mean of group means
(OVO-Bench's total), or a product/quotient of two statistics. The bootstrap resamples
videos with replacement (seeded per slice, so a slice's interval does not depend on what
else was scored); every statistic that is a sum over records is then one matrix product
over per-video sums.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from streameval.scorer.ovo import CATEGORY_NAMES, OVO_FIELD_PREFIX
from streameval.scorer.profiles import ScoringProfile


class FieldTable:
    """Per-record fields of one slice, with each record's video cluster."""

    def __init__(
        self,
        scalars: Sequence[Mapping[str, float]],
        lists: Sequence[Mapping[str, Sequence[float]]],
        videos: Sequence[str],
    ) -> None:
        self._scalars = list(scalars)
        self._lists = list(lists)
        self.videos = list(videos)
        names = sorted(set(self.videos))
        index = {name: position for position, name in enumerate(names)}
        self.cluster = np.array([index[v] for v in self.videos], dtype=np.int64)
        self.clusters = len(names)
        self._columns: dict[str, np.ndarray] = {}
        self._values: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self._scalars)

    def subset(self, rows: Sequence[int]) -> FieldTable:
        return FieldTable(
            [self._scalars[i] for i in rows],
            [self._lists[i] for i in rows],
            [self.videos[i] for i in rows],
        )

    def names(self, prefix: str) -> list[str]:
        """The scalar fields some record of this slice has whose name starts with `prefix`."""
        return sorted({name for row in self._scalars for name in row if name.startswith(prefix)})

    def column(self, name: str) -> np.ndarray:
        if name not in self._columns:
            self._columns[name] = np.array(
                [row.get(name, math.nan) for row in self._scalars], dtype=float
            )
        return self._columns[name]

    def values(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, owning row) of a list field, or of a scalar field's observed values."""
        if name not in self._values:
            self._values[name] = self._collect(name)
        return self._values[name]

    def _collect(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if any(name in row for row in self._lists):
            values, owners = [], []
            for position, row in enumerate(self._lists):
                for value in row.get(name, ()):
                    values.append(value)
                    owners.append(position)
            return np.array(values, dtype=float), np.array(owners, dtype=np.int64)
        column = self.column(name)
        owners = np.flatnonzero(~np.isnan(column))
        return column[owners], owners

    def per_cluster(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.cluster, weights=values, minlength=self.clusters)


@dataclass(frozen=True)
class Metric:
    value: float | None
    population: int
    observed: int
    coverage: float | None
    ci95: tuple[float, float] | None
    unit: str


def _total(values: np.ndarray) -> float:
    return float(values.sum()) if values.size else 0.0


@dataclass(frozen=True)
class Ratio:
    """sum(num) / sum(den) over the records where den is defined (all of them observed)."""

    num: str
    den: str
    unit: str
    scale: float = 1.0  # 100 for a percentage

    def _parts(self, table: FieldTable) -> tuple[np.ndarray, np.ndarray]:
        den = table.column(self.den)
        present = ~np.isnan(den)
        num = np.where(present, np.nan_to_num(table.column(self.num)), 0.0)
        return num, np.where(present, den, 0.0)

    def population(self, table: FieldTable) -> int:
        return round(_total(self._parts(table)[1]))

    observed = population

    def estimate(self, table: FieldTable) -> float | None:
        num, den = self._parts(table)
        return _total(num) / _total(den) * self.scale if _total(den) > 0 else None

    def replicates(self, table: FieldTable, counts: np.ndarray) -> np.ndarray:
        num, den = self._parts(table)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = (counts @ table.per_cluster(num)) / (counts @ table.per_cluster(den))
        return ratio * self.scale


@dataclass(frozen=True)
class _OverObserved:
    """Shared by Mean and Sum: a field observed on some records of a population."""

    field: str
    weight: str  # population field: 1 per record, or e.g. the record's window count
    unit: str

    def _parts(self, table: FieldTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        weight = table.column(self.weight)
        member = ~np.isnan(weight)
        value = table.column(self.field)
        observed = member & ~np.isnan(value)
        return np.where(member, weight, 0.0), observed, np.where(observed, value, 0.0)

    def population(self, table: FieldTable) -> int:
        return round(_total(self._parts(table)[0]))

    def observed(self, table: FieldTable) -> int:
        weight, observed, _ = self._parts(table)
        return round(_total(weight[observed]))


@dataclass(frozen=True)
class Mean(_OverObserved):
    scale: float = 1.0

    def estimate(self, table: FieldTable) -> float | None:
        _, observed, value = self._parts(table)
        return float(value[observed].mean()) * self.scale if observed.any() else None

    def replicates(self, table: FieldTable, counts: np.ndarray) -> np.ndarray:
        _, observed, value = self._parts(table)
        with np.errstate(invalid="ignore", divide="ignore"):
            sums = counts @ table.per_cluster(value)
            return sums / (counts @ table.per_cluster(observed.astype(float))) * self.scale


@dataclass(frozen=True)
class Sum(_OverObserved):
    def estimate(self, table: FieldTable) -> float | None:
        _, observed, value = self._parts(table)
        return _total(value[observed]) if observed.any() else None

    def replicates(self, table: FieldTable, counts: np.ndarray) -> np.ndarray:
        return counts @ table.per_cluster(self._parts(table)[2])


@dataclass(frozen=True)
class Quantile:
    """A quantile (linear interpolation, as numpy) of a list or scalar field's values."""

    field: str
    q: float
    weight: str
    unit: str
    interval: bool = True  # the bootstrap of a maximum says nothing: no interval for it

    def population(self, table: FieldTable) -> int:
        return round(_total(np.nan_to_num(table.column(self.weight))))

    def observed(self, table: FieldTable) -> int:
        return len(table.values(self.field)[0])

    def estimate(self, table: FieldTable) -> float | None:
        values, _ = table.values(self.field)
        return float(np.quantile(values, self.q)) if values.size else None

    def replicates(self, table: FieldTable, counts: np.ndarray) -> np.ndarray:
        values, owners = table.values(self.field)
        if not self.interval or not values.size:
            return np.full(counts.shape[0], np.nan)
        order = np.argsort(values, kind="stable")
        weights = counts[:, table.cluster[owners[order]]]
        chunk = max(1, _CELLS // values.size)
        return np.concatenate(
            [
                _weighted_quantile(values[order], weights[start : start + chunk], self.q)
                for start in range(0, weights.shape[0], chunk)
            ]
        )


_CELLS = 4_000_000  # resamples x values held at once by the quantile bootstrap


def _weighted_quantile(ordered: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """np.quantile (linear) of each row's sample, the sample being every ordered value
    repeated as often as the row's weight says, without building the samples: the k-th
    element of a row's sample is the first value whose cumulative weight exceeds k."""
    rows, width = weights.shape
    cumulative = np.cumsum(weights, axis=1)
    sizes = cumulative[:, -1]
    position = q * (sizes - 1)
    low = np.floor(position)
    high = np.minimum(low + 1, sizes - 1)
    # One searchsorted over all rows: shift each row above the one before it.
    shift = (np.arange(rows) * (sizes.max() + 1))[:, None]
    flat = (cumulative + shift).ravel()

    def element(k: np.ndarray) -> np.ndarray:
        index = np.searchsorted(flat, k + shift[:, 0], side="right") - np.arange(rows) * width
        return ordered[np.clip(index, 0, width - 1)]

    at_low, at_high = element(low), element(high)
    result = at_low + (position - low) * (at_high - at_low)
    return np.where(sizes > 0, result, np.nan)


def _mean_of_present(stack: np.ndarray) -> np.ndarray:
    """Column-wise mean of the finite entries of a 2-D array (NaN where there is none)."""
    present = np.isfinite(stack)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present, stack, 0.0).sum(axis=0) / present.sum(axis=0)


@dataclass(frozen=True)
class MacroMean:
    """The mean over groups of the mean over each group's subgroups of the records' values,
    OVO-Bench's total (groups: categories; subgroups: task types). A record puts its value
    in the field `{prefix}{group}/{subgroup}`; groups and subgroups without records in the
    slice (or in a resample) are left out of the means, as OVO-Bench leaves out a part
    without results."""

    prefix: str
    groups: tuple[str, ...]
    unit: str
    scale: float = 100.0

    def _columns(self, table: FieldTable) -> list[list[np.ndarray]]:
        """Per group present in the slice, the value column of each of its subgroups."""
        found: dict[str, list[np.ndarray]] = {}
        for name in table.names(self.prefix):
            group = name[len(self.prefix) :].split("/", 1)[0]
            if group in self.groups:
                found.setdefault(group, []).append(table.column(name))
        return [found[group] for group in self.groups if group in found]

    def population(self, table: FieldTable) -> int:
        return sum(
            int(np.count_nonzero(~np.isnan(column)))
            for columns in self._columns(table)
            for column in columns
        )

    observed = population

    def estimate(self, table: FieldTable) -> float | None:
        means = [
            float(np.mean([np.nanmean(column) for column in columns]))
            for columns in self._columns(table)
        ]
        return float(np.mean(means)) * self.scale if means else None

    def replicates(self, table: FieldTable, counts: np.ndarray) -> np.ndarray:
        group_means = []
        for columns in self._columns(table):
            subgroup_means = []
            for column in columns:
                present = ~np.isnan(column)
                sums = counts @ table.per_cluster(np.where(present, column, 0.0))
                sizes = counts @ table.per_cluster(present.astype(float))
                with np.errstate(invalid="ignore", divide="ignore"):
                    subgroup_means.append(sums / sizes)
            group_means.append(_mean_of_present(np.vstack(subgroup_means)))
        if not group_means:
            return np.full(counts.shape[0], np.nan)
        return _mean_of_present(np.vstack(group_means)) * self.scale


@dataclass(frozen=True)
class Combined:
    """The product or quotient of two statistics; population and coverage as `like`'s."""

    a: Ratio | Mean | Sum | Quantile
    b: Ratio | Mean | Sum | Quantile
    op: str  # "*" | "/"
    like: Ratio | Mean | Sum | Quantile

    @property
    def unit(self) -> str:
        return self.like.unit

    def population(self, table: FieldTable) -> int:
        return self.like.population(table)

    def observed(self, table: FieldTable) -> int:
        return self.like.observed(table)

    def _apply(self, a, b):
        if self.op == "*":
            return a * b
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.divide(a, b)

    def estimate(self, table: FieldTable) -> float | None:
        a, b = self.a.estimate(table), self.b.estimate(table)
        if a is None or b is None or (self.op == "/" and b == 0):
            return None
        return float(self._apply(a, b))

    def replicates(self, table: FieldTable, counts: np.ndarray) -> np.ndarray:
        return self._apply(self.a.replicates(table, counts), self.b.replicates(table, counts))


Statistic = Ratio | Mean | Sum | Quantile | MacroMean | Combined


DELAY_CLOCKS = ("runtime", "video")


def delay_metric(clock: str) -> str:
    """A response delay's name says its clock: two clocks never share one name."""
    return f"median_response_delay_{clock}_s"


def _catalog() -> dict[str, dict[str, Statistic]]:
    qa: dict[str, Statistic] = {
        "accuracy": Ratio("qa_correct", "qa_n", "records"),
        "completion_rate": Ratio("qa_finished", "qa_n", "records"),
        "invalid_output_rate": Ratio("qa_invalid", "qa_n", "records"),
    }
    for name, field in (("ttft_s", "qa_ttft"), ("latency_s", "qa_latency")):
        qa[f"{name}_p50"] = Quantile(field, 0.5, "qa_timed_n", "records")
        qa[f"{name}_p95"] = Quantile(field, 0.95, "qa_timed_n", "records")
        qa[f"{name}_max"] = Quantile(field, 1.0, "qa_timed_n", "records", interval=False)
    proactive: dict[str, Statistic] = {
        "in_window_accuracy": Ratio("pr_score", "pr_windows", "windows"),
        "miss_rate": Ratio("pr_missed", "pr_windows", "windows"),
        "before_window_rate": Ratio("pr_before", "pr_windows", "windows"),
        "false_alarm_rate": Ratio("pr_false_alarms", "pr_answered", "answered episodes"),
        **{
            delay_metric(clock): Quantile(
                f"pr_delays_{clock}", 0.5, "pr_in_window", "in-window windows"
            )
            for clock in DELAY_CLOCKS
        },
        "redundant_responses": Sum("pr_redundant", "pr_windows", "windows"),
        "completion_rate": Ratio("pr_finished", "pr_n", "records"),
    }
    workload: dict[str, Statistic] = {
        name: Sum(f"wl_{name}", "wl_n", "records")
        for name in (
            "submitted_images",
            "unique_submitted_frames",
            "replayed_occurrences",
            "delivered_frames",
            "dropped_frames",
            "core_dropped_frames",
            "output_tokens",
            "input_tokens",
        )
    }
    score = Mean("rs_score", "rs_n", "records", scale=100.0)
    tokens = Ratio("rs_tokens", "rs_token_turns", "response turns")
    realstream: dict[str, Statistic] = {
        "score": score,
        "quality": Mean("rs_quality", "rs_n", "records"),
        "answer_rate": Mean("rs_rate", "rs_n", "records"),
        "multiplier": Mean("rs_multiplier", "rs_n", "records"),
        "early_penalty_rate": Mean("rs_early", "rs_n", "records"),
        "tokens_per_response_turn": tokens,
        "per_token_score": Combined(score, tokens, "/", like=score),
    }
    ars = Mean("rd_ars", "rd_n", "records")
    accuracy = Ratio("rd_acc", "rd_acc_n", "targets")
    readiness: dict[str, Statistic] = {
        "evidence_coverage": Ratio("rd_n", "rd_all", "records"),
        "ars": ars,
        "early_penalty": Mean("rd_ep", "rd_n", "records"),
        "late_penalty": Mean("rd_lp", "rd_n", "records"),
        "accuracy": accuracy,
        "acc_e": Combined(accuracy, ars, "*", like=ars),
    }
    ovo: dict[str, Statistic] = {"total": MacroMean(OVO_FIELD_PREFIX, CATEGORY_NAMES, "records")}
    for category in CATEGORY_NAMES:
        ovo[category] = MacroMean(OVO_FIELD_PREFIX, (category,), "records")
    ovo["completion_rate"] = Ratio("ovo_finished", "ovo_n", "records")
    ovo["unanswered_rate"] = Ratio("ovo_unanswered", "ovo_questions", "questions")
    streamingbench: dict[str, Statistic] = {
        "accuracy": Ratio("sb_correct", "sb_items", "questions and targets", scale=100.0),
        "qa_accuracy": Ratio("sb_qa_correct", "sb_qa_n", "questions", scale=100.0),
        "proactive_accuracy": Ratio("sb_hits", "sb_targets", "targets", scale=100.0),
        "completion_rate": Ratio("sb_finished", "sb_n", "records"),
    }
    return {
        "qa": qa,
        "proactive": proactive,
        "workload": workload,
        "realstream": realstream,
        "readiness": readiness,
        "ovo": ovo,
        "streamingbench": streamingbench,
    }


CATALOG = _catalog()
# The field every record of a family has (1.0): it decides whether a slice has the family.
FAMILY_MEMBER = {
    "qa": "qa_n",
    "proactive": "pr_n",
    "workload": "wl_n",
    "realstream": "rs_n",
    "readiness": "rd_all",
    "ovo": "ovo_n",
    "streamingbench": "sb_n",
}


def metrics_of(family: str, profile: ScoringProfile) -> dict[str, Statistic]:
    """The family's metrics this profile reports: a response delay only on the profile's
    clocks."""
    left_out = {delay_metric(c) for c in DELAY_CLOCKS if c not in profile.response_delay_clocks}
    return {name: stat for name, stat in CATALOG[family].items() if name not in left_out}


def bootstrap_counts(clusters: int, profile: ScoringProfile, key: str) -> np.ndarray | None:
    """How often each video is drawn in each resample (resamples x videos), or None when
    an interval cannot be formed (fewer than two videos, or no resamples asked for)."""
    if clusters < 2 or profile.bootstrap_resamples == 0:
        return None
    rng = np.random.default_rng([profile.bootstrap_seed, zlib.crc32(key.encode("utf-8"))])
    resamples = profile.bootstrap_resamples
    draws = rng.integers(0, clusters, size=(resamples, clusters))
    flat = draws + np.arange(resamples)[:, None] * clusters
    counts = np.bincount(flat.ravel(), minlength=resamples * clusters)
    return counts.reshape(resamples, clusters).astype(float)


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
    for family in families:
        if not np.any(~np.isnan(table.column(FAMILY_MEMBER[family]))):
            continue
        metrics = {}
        for name, statistic in metrics_of(family, profile).items():
            population = statistic.population(table)
            observed = statistic.observed(table)
            value = statistic.estimate(table)
            ci = None
            if counts is not None and value is not None:
                ci = interval(statistic.replicates(table, counts), profile.ci_level)
            metrics[name] = Metric(
                value=value,
                population=population,
                observed=observed,
                coverage=observed / population if population else None,
                ci95=ci,
                unit=statistic.unit,
            )
        result[family] = metrics
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


# Metrics measured on the Core's clock: their meaning depends on the run's pacing.
TIMING_PREFIXES = ("ttft_s_", "latency_s_", "median_response_delay_")


def is_timing(name: str) -> bool:
    return name.startswith(TIMING_PREFIXES)


def compare_tables(
    table_a: FieldTable,
    table_b: FieldTable,
    families: Sequence[str],
    profile: ScoringProfile,
    key: str,
    subtract: Callable[[str], bool] = lambda _name: True,
) -> dict[str, dict[str, Difference]]:
    """Paired differences B - A; the two tables hold the same records in the same order, so
    one set of video resamples serves both runs. A metric `subtract` refuses keeps both
    values and gets no difference (measured on different clocks or protocols)."""
    counts = bootstrap_counts(table_a.clusters, profile, key)
    result: dict[str, dict[str, Difference]] = {}
    for family in families:
        diffs = {}
        for name, statistic in metrics_of(family, profile).items():
            population_a, population_b = (
                statistic.population(table_a),
                statistic.population(table_b),
            )
            if population_a == 0 and population_b == 0:
                continue
            a, b = statistic.estimate(table_a), statistic.estimate(table_b)
            diff = None if a is None or b is None or not subtract(name) else b - a
            ci = None
            if counts is not None and diff is not None:
                replicated = statistic.replicates(table_b, counts) - statistic.replicates(
                    table_a, counts
                )
                ci = interval(replicated, profile.ci_level)
            diffs[name] = Difference(a, b, diff, ci, population_a, population_b, statistic.unit)
        result[family] = diffs
    return result
