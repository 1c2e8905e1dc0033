"""Compare two runs record by record: B - A for every metric, with paired intervals.

Only records present in both runs are compared: two runs that share no record (e.g. runs
of different benchmarks) cannot be compared (a ScoreError), and where they share only some
a note says how many of each run's records are left out. The bootstrap resamples videos
once and applies the same resample to both runs, so the interval of a difference reflects
the pairing.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pydantic import BaseModel
from rich.console import Console

from streameval.core.run.adapter_identity import run_settings, setting_differences
from streameval.core.store.store import Store
from streameval.scorer.errors import ScoreError
from streameval.scorer.judging.judges import Judge
from streameval.scorer.metrics.aggregate import Difference, compare_tables, is_timing
from streameval.scorer.metrics.record import fields
from streameval.scorer.metrics.statistic import FieldTable
from streameval.scorer.profiles import ScoringProfile, get_profile
from streameval.scorer.report import (
    EvaluatedRun,
    ProfileReport,
    cached,
    evaluate_source,
    format_ci,
    profile_report,
    render_explanations,
    unit_label,
)
from streameval.scorer.source import RunSource, store_source
from streameval.terminal import Column, print_table

# Pydantic serialises the aggregate's plain dataclass as it is: one definition of a difference.
Differences = dict[str, dict[str, Difference]]
Setting = str | int | float | bool
# Settings both runs share are listed on one line, each value cut to this many characters.
SAME_VALUE_CHARS = 40


class SettingDifference(BaseModel):
    """An adapter setting the two runs were made with at different values (None: the run's
    adapter did not declare it)."""

    key: str
    a: Setting | None
    b: Setting | None


class Comparison(BaseModel):
    run_a: str
    run_b: str
    profile: ProfileReport
    paired_records: int
    only_in_a: int
    only_in_b: int
    judge_a: str
    judge_b: str
    notes: list[str]
    # The adapters' settings (their options, conditions.settings) of each run; those that
    # differ come first, before the metrics: they may explain them.
    differing_settings: list[SettingDifference]
    settings_a: dict[str, Setting]
    settings_b: dict[str, Setting]
    overall: Differences
    by_task_type: dict[str, Differences]

    def render(self, console: Console | None = None, explained: bool = False) -> None:
        console = console or Console()
        columns = (
            Column("metric", key=True),
            Column("A", justify="right"),
            Column("B", justify="right"),
            Column("B - A", justify="right"),
            Column("95% CI", justify="right"),
            Column("unit"),
        )
        rows: list[list[str] | str] = []
        for family, metrics in self.overall.items():
            rows.append(family)
            rows += [
                [
                    name,
                    _fmt(metric.a),
                    _fmt(metric.b),
                    _fmt(metric.diff),
                    format_ci(metric.ci95),
                    unit_label(family, name),
                ]
                for name, metric in metrics.items()
            ]
        title = f"A = run {self.run_a}, B = run {self.run_b} · profile {self.profile.name}"
        self._render_settings(console)
        print_table(console, columns, rows, title=title)
        console.print(
            f"{self.paired_records} paired records; {self.only_in_a} only in {self.run_a}, "
            f"{self.only_in_b} only in {self.run_b}",
            highlight=False,
        )
        for note in self.notes:
            console.print(f"note: {note}", highlight=False)
        if explained:
            render_explanations(console, {f: list(m) for f, m in self.overall.items()})

    def _render_settings(self, console: Console) -> None:
        """The differing adapter settings as a table, then the shared ones on one line."""
        if self.differing_settings:
            columns = (Column("setting", key=True), Column("A"), Column("B"))
            rows: list[list[str] | str] = [
                [d.key, _setting_text(d.a), _setting_text(d.b)] for d in self.differing_settings
            ]
            title = f"adapter settings that differ (A = run {self.run_a}, B = run {self.run_b})"
            print_table(console, columns, rows, title=title)
        differing = {d.key for d in self.differing_settings}
        same = [
            f"{key}={_setting_text(value)[:SAME_VALUE_CHARS]}"
            for key, value in self.settings_a.items()
            if key not in differing
        ]
        if same:
            console.print(f"adapter settings of both: {', '.join(same)}", highlight=False)
        elif not differing:
            console.print("adapter settings: none declared by either run", highlight=False)


def _setting_text(value: Setting | None) -> str:
    return "(absent)" if value is None else json.dumps(value, ensure_ascii=False)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def compare_sources(
    source_a: RunSource,
    source_b: RunSource,
    profile: ScoringProfile | str = "trace-paper-v1",
    judge: Judge | None = None,
) -> Comparison:
    profile = get_profile(profile)
    ids_a = {data["record_id"] for data in source_a.records}
    ids_b = {data["record_id"] for data in source_b.records}
    common = sorted(ids_a & ids_b)
    if not common:
        raise ScoreError(
            f"runs {_described(source_a)} and {_described(source_b)} share no record: "
            "nothing to compare"
        )
    run_a = evaluate_source(source_a, profile, judge)
    run_b = evaluate_source(source_b, profile, judge)
    table_a, types = _paired_table(run_a, common)
    table_b, _ = _paired_table(run_b, common)
    families = profile.families
    by_type: dict[str, list[int]] = {}
    for position, task_type in enumerate(types):
        by_type.setdefault(task_type, []).append(position)
    notes, subtract = _comparability(source_a, source_b)
    if ids_a != ids_b:
        notes.append(
            f"the runs share {len(common)} of their records, which are compared; left out: "
            f"{len(ids_a - ids_b)} of the {len(ids_a)} of run {source_a.run_id} and "
            f"{len(ids_b - ids_a)} of the {len(ids_b)} of run {source_b.run_id}"
        )
    if run_a.judge.kind != run_b.judge.kind:
        notes.append("the two runs were judged differently")
    if run_a.judge.failures or run_b.judge.failures:
        notes.append("judge-incomplete: some content judgements failed and scored 0")
    if run_a.judge.fallback_incomplete or run_b.judge.fallback_incomplete:
        notes.append(
            "judge-incomplete: TRACE's judge rules mark semantic task types scored by exact "
            "match (no judge endpoint) as incomplete"
        )
    return Comparison(
        run_a=source_a.run_id,
        run_b=source_b.run_id,
        profile=profile_report(profile),
        paired_records=len(common),
        only_in_a=len(ids_a - ids_b),
        only_in_b=len(ids_b - ids_a),
        judge_a=run_a.judge.kind,
        judge_b=run_b.judge.kind,
        notes=notes,
        **_settings(source_a, source_b),
        overall=compare_tables(table_a, table_b, families, profile, "overall", subtract),
        by_task_type={
            name: compare_tables(
                table_a.subset(rows),
                table_b.subset(rows),
                families,
                profile,
                f"task_type={name}",
                subtract,
            )
            for name, rows in sorted(by_type.items())
        },
    )


def _settings(a: RunSource, b: RunSource) -> dict[str, object]:
    """Comparison's settings fields: each run's adapter settings, and those that differ."""
    settings_a = run_settings(a.run.get("conditions") or {})
    settings_b = run_settings(b.run.get("conditions") or {})
    differing = [
        SettingDifference(key=key, a=value_a, b=value_b)  # type: ignore[arg-type]
        for key, value_a, value_b in setting_differences(settings_a, settings_b)
    ]
    return {"differing_settings": differing, "settings_a": settings_a, "settings_b": settings_b}


def _described(source: RunSource) -> str:
    return f"{source.run_id} (benchmark {source.run['benchmark']})"


def _comparability(a: RunSource, b: RunSource) -> tuple[list[str], Callable[[str, str], bool]]:
    """Notes, and which metrics (family, metric) may be subtracted: none across protocol
    profiles, and no timing metric across pacings (a runtime delay under logical pacing is
    processing time, under wall clock it is real-time lag)."""
    if a.protocol != b.protocol:
        note = (
            f"the runs were made under different protocol profiles ({a.protocol} and "
            f"{b.protocol}): no metric is subtracted; both values are shown"
        )
        return [note], lambda _family, _metric: False
    if a.clock != b.clock:
        note = (
            f"the runs were paced differently ({_clock_text(a)} and {_clock_text(b)}): TTFT, "
            "latency and response delays measure different things, so they are not "
            "subtracted; both values are shown"
        )
        return [note], lambda family, metric: not is_timing(family, metric)
    return [], lambda _family, _metric: True


def _clock_text(source: RunSource) -> str:
    pacing, speed = source.clock
    return f"{pacing} at speed {speed:g}" if speed is not None else str(pacing)


def _paired_table(run: EvaluatedRun, record_ids: list[str]) -> tuple[FieldTable, list[str]]:
    by_id = {e.record.record_id: e for e in run.evaluations}
    chosen = [by_id[record_id] for record_id in record_ids]
    rows = [fields(evaluation, run.profile) for evaluation in chosen]
    table = FieldTable(
        [scalars for scalars, _ in rows],
        [lists for _, lists in rows],
        [evaluation.record.video_path for evaluation in chosen],
    )
    return table, [evaluation.record.task_type for evaluation in chosen]


def compare_runs(
    store: Store,
    run_a: str,
    run_b: str,
    profile: ScoringProfile | str = "trace-paper-v1",
    judge: Judge | None = None,
) -> Comparison:
    judge = cached(judge)
    return compare_sources(store_source(store, run_a), store_source(store, run_b), profile, judge)
