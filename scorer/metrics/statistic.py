"""The statistics a metric family reports, each over the fields its records contribute.

Each record contributes named fields (NaN = missing or not in that metric's population) and
lists (e.g. the response delays of its windows); a `FieldTable` holds them for one slice of
records, with each record's video. A statistic is a ratio of sums over those (`Ratio`), a
mean or sum over observed records (`Mean`, `Sum`), a quantile (`Quantile`), a mean of group
means (`MacroMean`, OVO-Bench's total), or a product/quotient of two statistics
(`Combined`). Each gives its estimate, its population and observed count, the number of
videos its estimate draws on (an interval needs two), and its bootstrap replicates: every
statistic that is a sum over records is one matrix product over per-video sums (aggregate.py
draws the resamples).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


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

    def count_videos(self, rows: np.ndarray) -> int:
        """The distinct videos of some rows (a boolean mask or row indices)."""
        return int(np.count_nonzero(np.bincount(self.cluster[rows], minlength=self.clusters)))


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

    def videos(self, table: FieldTable) -> int:
        return table.count_videos(self._parts(table)[1] != 0)

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

    def videos(self, table: FieldTable) -> int:
        return table.count_videos(self._parts(table)[1])


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

    def videos(self, table: FieldTable) -> int:
        return table.count_videos(table.values(self.field)[1])

    def estimate(self, table: FieldTable) -> float | None:
        values, _ = table.values(self.field)
        return float(np.quantile(values, self.q)) if values.size else None

    def replicates(self, table: FieldTable, counts: np.ndarray) -> np.ndarray:
        values, owners = table.values(self.field)
        if not self.interval or not values.size:
            return np.full(counts.shape[0], np.nan)
        order = np.argsort(values, kind="stable")
        columns = table.cluster[owners[order]]
        chunk = max(1, _CELLS // values.size)
        # Each chunk of resamples gathers its own weights: the whole (resamples x values)
        # matrix would grow with the run (80 MB at 10,000 values).
        return np.concatenate(
            [
                _weighted_quantile(values[order], counts[start : start + chunk, columns], self.q)
                for start in range(0, counts.shape[0], chunk)
            ]
        )


_CELLS = 1_000_000  # resamples x values held at once by the quantile bootstrap (8 MB each)


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
    slice (or in a resample) are left out of the means. With `weights` (a field prefix), a
    record also puts its weight in `{weights}{group}/{subgroup}` and a subgroup's mean is
    sum(values) / sum(weights): OVO-Bench pools the probes of a forward task this way (the
    value is the record's correct probes, the weight its probes)."""

    prefix: str
    groups: tuple[str, ...]
    unit: str
    scale: float = 100.0
    weights: str | None = None

    def _columns(self, table: FieldTable) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        """Per group present in the slice, (values, weights) of each of its subgroups; a
        weight is 0 where the record has no value."""
        found: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for name in table.names(self.prefix):
            subgroup = name[len(self.prefix) :]
            group = subgroup.split("/", 1)[0]
            if group in self.groups:
                values = table.column(name)
                present = ~np.isnan(values)
                weights = present.astype(float)
                if self.weights is not None:
                    weights = np.where(present, table.column(self.weights + subgroup), 0.0)
                found.setdefault(group, []).append((np.where(present, values, 0.0), weights))
        return [found[group] for group in self.groups if group in found]

    def population(self, table: FieldTable) -> int:
        return round(
            sum(_total(weights) for columns in self._columns(table) for _, weights in columns)
        )

    observed = population

    def videos(self, table: FieldTable) -> int:
        present = np.zeros(len(table), dtype=bool)
        for columns in self._columns(table):
            for _, weights in columns:
                present |= weights > 0
        return table.count_videos(present)

    def estimate(self, table: FieldTable) -> float | None:
        means = [
            float(np.mean([_total(values) / _total(weights) for values, weights in columns]))
            for columns in self._columns(table)
        ]
        return float(np.mean(means)) * self.scale if means else None

    def replicates(self, table: FieldTable, counts: np.ndarray) -> np.ndarray:
        group_means = []
        for columns in self._columns(table):
            subgroup_means = []
            for values, weights in columns:
                sums = counts @ table.per_cluster(values)
                sizes = counts @ table.per_cluster(weights)
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

    def videos(self, table: FieldTable) -> int:
        """Both parts need their videos: the fewer of the two."""
        return min(self.a.videos(table), self.b.videos(table))

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
