"""Aggregation: statistics, coverage, and the seeded bootstrap clustered by video."""

from __future__ import annotations

import numpy as np
import pytest

from streameval.scorer.metrics.aggregate import bootstrap_counts, statistic_interval, summarise
from streameval.scorer.metrics.statistic import (
    Combined,
    FieldTable,
    MacroMean,
    Mean,
    Quantile,
    Ratio,
    Sum,
    _weighted_quantile,
)
from streameval.scorer.profiles import SCORING_PROFILES

PROFILE = SCORING_PROFILES["trace-paper-v1"]


def qa_table(correct: list[int], videos: list[str]) -> FieldTable:
    rows = [{"qa_n": 1.0, "qa_timed_n": 1.0, "qa_correct": float(c)} for c in correct]
    return FieldTable(rows, [{} for _ in rows], videos)


def test_the_bootstrap_resamples_whole_videos() -> None:
    # Video v1 holds three correct records, v2 one wrong record. Drawing two videos with
    # replacement can only give 6/6, 0/2 or 3/4: records of one video never separate.
    table = qa_table([1, 1, 1, 0], ["v1", "v1", "v1", "v2"])
    counts = bootstrap_counts(table.clusters, PROFILE, "test")
    assert counts.shape == (1000, 2)
    assert set(counts.sum(axis=1)) == {2.0}
    replicates = Ratio("qa_correct", "qa_n", "records").replicates(table, counts)
    assert set(np.unique(replicates)) == {0.0, 0.75, 1.0}


def test_intervals_are_seeded_and_per_slice() -> None:
    table = qa_table([1, 0, 1, 1, 0, 1, 0, 0], [f"v{i}" for i in range(8)])
    first = summarise(table, ["qa"], PROFILE, "overall")["qa"]["accuracy"]
    again = summarise(table, ["qa"], PROFILE, "overall")["qa"]["accuracy"]
    assert first == again
    assert first.value == 0.5
    low, high = first.ci95
    assert 0.0 <= low < 0.5 < high <= 1.0
    # The draws depend on the profile's seed and the slice's name, nothing else.
    draws = bootstrap_counts(8, PROFILE, "overall")
    assert np.array_equal(draws, bootstrap_counts(8, PROFILE, "overall"))
    assert not np.array_equal(draws, bootstrap_counts(8, PROFILE, "task_type=EPM"))
    reseeded = PROFILE.with_overrides(bootstrap_seed=7)
    assert not np.array_equal(draws, bootstrap_counts(8, reseeded, "overall"))


def test_no_interval_with_one_video_or_no_resamples() -> None:
    one_video = qa_table([1, 0, 1], ["v1", "v1", "v1"])
    assert summarise(one_video, ["qa"], PROFILE, "overall")["qa"]["accuracy"].ci95 is None
    table = qa_table([1, 0], ["v1", "v2"])
    none = PROFILE.with_overrides(bootstrap_resamples=0)
    assert summarise(table, ["qa"], none, "overall")["qa"]["accuracy"].ci95 is None


def test_no_interval_for_a_value_drawn_from_one_video_of_several() -> None:
    # v1: two records with a value; v2: a member without one; v3: outside the population.
    rows = [{"n": 1.0, "x": 2.0, "m/a/t": 1.0}, {"n": 1.0, "x": 4.0}, {"n": 1.0}, {}]
    lists = [{"d": [1.0, 2.0]}, {}, {"d": [3.0]}, {}]
    table = FieldTable(rows, lists, ["v1", "v1", "v2", "v3"])
    mean = Mean("x", "n", "records")
    ratio = Ratio("x", "n", "records")
    median = Quantile("d", 0.5, "n", "s")
    assert [s.videos(table) for s in (mean, ratio, median)] == [1, 2, 2]
    assert MacroMean("m/", ("a",), "%").videos(table) == 1
    assert Combined(ratio, mean, "*", like=ratio).videos(table) == 1
    counts = bootstrap_counts(table.clusters, PROFILE, "overall")
    # The mean's resamples repeat v1's 3.0 or leave v1 out: no interval, not [3, 3].
    replicates = mean.replicates(table, counts)
    assert np.unique(replicates[np.isfinite(replicates)]).tolist() == [3.0]
    assert statistic_interval(mean, table, counts, 0.95) is None
    assert statistic_interval(ratio, table, counts, 0.95) == (0.0, 3.0)
    assert statistic_interval(median, table, counts, 0.95) == (1.5, 3.0)


def test_families_without_records_are_left_out() -> None:
    table = qa_table([1], ["v1"])
    summary = summarise(table, ["qa", "proactive"], PROFILE, "overall")
    assert list(summary) == ["qa"]
    # Within a family every metric is reported, with no value where nothing was observed.
    ttft = summary["qa"]["ttft_s_p50"]
    assert (ttft.value, ttft.population, ttft.observed, ttft.coverage) == (None, 1, 0, 0.0)


def test_mean_and_sum_report_coverage() -> None:
    rows = [{"n": 1.0, "x": 2.0}, {"n": 1.0, "x": 4.0}, {"n": 1.0}, {"other": 1.0}]
    table = FieldTable(rows, [{}] * 4, ["a", "b", "c", "d"])
    mean, total = Mean("x", "n", "records"), Sum("x", "n", "records")
    assert (mean.estimate(table), mean.population(table), mean.observed(table)) == (3.0, 3, 2)
    assert (total.estimate(table), total.population(table), total.observed(table)) == (6.0, 3, 2)


def test_quantiles_over_list_fields() -> None:
    lists = [{"d": [1.0, 3.0]}, {"d": []}, {"d": [2.0]}]
    rows = [{"w": 2.0}, {"w": 1.0}, {"w": 1.0}]
    table = FieldTable(rows, lists, ["a", "b", "c"])
    median = Quantile("d", 0.5, "w", "windows")
    assert (median.estimate(table), median.population(table), median.observed(table)) == (2.0, 4, 3)


def test_weighted_quantile_matches_numpy_on_the_repeated_sample() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        size = int(rng.integers(1, 25))
        values = np.sort(rng.normal(size=size))
        weights = rng.integers(0, 3, size=(6, size)).astype(float)
        q = float(rng.choice([0.0, 0.1, 0.5, 0.95, 1.0]))
        got = _weighted_quantile(values, weights, q)
        for row in range(6):
            sample = np.repeat(values, weights[row].astype(int))
            if sample.size:
                assert got[row] == pytest.approx(np.quantile(sample, q), abs=1e-12)
            else:
                assert np.isnan(got[row])


def test_quantile_replicates_do_not_depend_on_how_many_resamples_a_chunk_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The quantile bootstrap gathers its weights a chunk of resamples at a time, so its
    memory stays bounded in a large run; the chunk size must not change a replicate."""
    rng = np.random.default_rng(5)
    videos = [f"v{i % 7}" for i in range(30)]
    lists = [{"d": list(rng.normal(size=int(rng.integers(0, 4))))} for _ in videos]
    table = FieldTable([{"w": 1.0} for _ in videos], lists, videos)
    profile = SCORING_PROFILES["trace-paper-v1"]
    counts = bootstrap_counts(table.clusters, profile, "overall")
    assert counts is not None and counts.shape[0] == profile.bootstrap_resamples
    median = Quantile("d", 0.5, "w", "windows")
    whole = median.replicates(table, counts)
    monkeypatch.setattr("streameval.scorer.metrics.statistic._CELLS", 7 * table.values("d")[0].size)
    chunked = median.replicates(table, counts)
    assert whole.shape == (profile.bootstrap_resamples,)
    assert np.array_equal(whole, chunked, equal_nan=True)
