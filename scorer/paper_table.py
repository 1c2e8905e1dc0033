"""Tables for papers: several runs as rows, chosen metrics as columns, under one scoring
profile, rendered as Markdown, LaTeX, CSV or JSON (`streameval table`, the results API's
/table and the dashboard's table view all render through `render_table`).

Each run is scored as `streameval score` scores it (report.py); a cell is one metric of one
run's results, overall or, with `by`, for one task type (or source benchmark): one block of
rows per group. The best value of a column is marked within each block where at least two
rows have a value and the metric has a direction (`MetricHelp.better`: higher for
accuracies and scores, lower for latencies, misses and false alarms; a count of work done
has none). The default columns are each of the profile's families' headline metric, the
ones `score` shows per task type.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from streameval.core.store.store import Store
from streameval.scorer.errors import ScoreError
from streameval.scorer.judging.judges import Judge
from streameval.scorer.metrics.explain import explain
from streameval.scorer.metrics.registry import FAMILIES
from streameval.scorer.profiles import ScoringProfile, get_profile, scoring_profile_for
from streameval.scorer.report import (
    Families,
    RecordResult,
    RunScores,
    cached,
    score_run,
    unit_label,
)
from streameval.scorer.table_formats import RENDERERS
from streameval.scorer.table_model import PaperTable, TableCell, TableColumn, TableRow
from streameval.variants import CLEAN, read_condition

# What `by` may name, and the RunScores slices each reads.
GROUPINGS = {"task_type": "by_task_type", "source_benchmark": "by_source_benchmark"}
FORMATS = tuple(RENDERERS)


def table_run_ids(store: Store, arguments: Sequence[str]) -> list[str]:
    """The runs `streameval table` arguments name, in order, each once (a suite id of
    `streameval eval`: its runs, in the order they were created); an unknown one is the
    store's one-line error. The one place arguments become run ids."""
    run_ids = list(dict.fromkeys(run_id for name in arguments for run_id in _runs(store, name)))
    if not run_ids:
        raise ScoreError("name at least one run to tabulate")
    for run_id in run_ids:
        store.get_run(run_id)
    return run_ids


def _runs(store: Store, name: str) -> list[str]:
    suite = store.suite(name)
    return [name] if suite is None else list(suite.runs.values())


def table_columns(profile: ScoringProfile, metrics: Sequence[str] | None) -> list[TableColumn]:
    """The named metrics (`family.metric`, or a metric name one of the profile's families
    alone reports), else each family's headline metric; an unknown name is a ScoreError
    that lists the profile's."""
    known = [
        (family, metric)
        for family in profile.families
        for metric in FAMILIES[family].statistics(profile)
    ]
    if metrics is None:
        chosen = [(f, FAMILIES[f].headline) for f in profile.families if FAMILIES[f].headline]
        return [_column(family, metric) for family, metric in chosen if metric]
    return [_column(*_resolve(name, known, profile)) for name in dict.fromkeys(metrics)]


def _resolve(name: str, known: list[tuple[str, str]], profile: ScoringProfile) -> tuple[str, str]:
    family, dot, metric = name.rpartition(".")
    if dot:
        matches = [entry for entry in known if entry == (family, metric)]
    else:
        matches = [entry for entry in known if entry[1] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        named = ", ".join(f"{f}.{m}" for f, m in matches)
        raise ScoreError(f"metric {name!r} is reported by several families: name one of {named}")
    listed = ", ".join(f"{f}.{m}" for f, m in known)
    raise ScoreError(f"profile {profile.name} reports no metric {name!r}; it reports: {listed}")


def _column(family: str, metric: str) -> TableColumn:
    help = explain(f"{family}.{metric}")
    return TableColumn(
        key=f"{family}.{metric}",
        family=family,
        metric=metric,
        unit=unit_label(family, metric),
        better=None if help is None else help.better,
    )


def _grouping(by: str | None) -> str | None:
    if by is not None and by not in GROUPINGS:
        raise ScoreError(f"--by takes {' or '.join(GROUPINGS)}, not {by!r}")
    return by


def paper_table(
    store: Store,
    run_ids: Sequence[str],
    *,
    metrics: Sequence[str] | None = None,
    by: str | None = None,
    intervals: bool = False,
    scoring_profile: str | ScoringProfile | None = None,
    judge: Judge | None = None,
) -> PaperTable:
    """The table of these stored runs, each scored under `scoring_profile` (default: the
    one matching the first run's protocol profile, as `compare` picks it)."""
    run_ids = table_run_ids(store, run_ids)
    if scoring_profile is None:
        scoring_profile = scoring_profile_for(store.get_run(run_ids[0]).config.get("profile", ""))
    profile = get_profile(scoring_profile)
    columns = table_columns(profile, metrics)
    _grouping(by)  # a mistake is said before any run is scored
    judge = cached(judge)
    scores = [score_run(store, run_id, profile, judge) for run_id in run_ids]
    return table_of(scores, profile, columns, by=by, intervals=intervals)


def table_of(
    scores: Sequence[RunScores],
    profile: ScoringProfile,
    columns: list[TableColumn],
    *,
    by: str | None = None,
    intervals: bool = False,
) -> PaperTable:
    """The table of runs already scored under `profile` (the results API's cached scores)."""
    labels = _labels(scores)
    rows = [
        row
        for group in _groups(scores, _grouping(by))
        for row in _marked(
            [
                _row(s, labels[s.run_id], group, by, columns, intervals)
                for s in scores
                if _has(s, group, by)
            ],
            columns,
        )
    ]
    return PaperTable(
        profile=profile.name,
        profile_version=profile.version,
        by=by,
        intervals=intervals,
        columns=columns,
        rows=rows,
        notes=_notes(scores),
    )


def _notes(scores: Sequence[RunScores]) -> list[str]:
    """Each run's scoring notes once, prefixed by the runs that have it."""
    runs: dict[str, list[str]] = {}
    for s in scores:
        for note in s.notes:
            runs.setdefault(note, []).append(s.run_id)
    return [
        f"{'run' if len(ids) == 1 else 'runs'} {', '.join(ids)}: {n}" for n, ids in runs.items()
    ]


def _groups(scores: Sequence[RunScores], by: str | None) -> list[str | None]:
    if by is None:
        return [None]
    return sorted({name for s in scores for name in getattr(s, GROUPINGS[by])})


def _has(scores: RunScores, group: str | None, by: str | None) -> bool:
    return by is None or group in getattr(scores, GROUPINGS[by])


def _labels(scores: Sequence[RunScores]) -> dict[str, str]:
    """Each run's adapter (model), followed by the settings in which it differs from another
    run of the same adapter: two rows of one model at two options must not read alike."""
    settings = {s.run_id: _settings(s) for s in scores}
    names = {s.run_id: _adapter_label(s) for s in scores}
    labels = {}
    for s in scores:
        peers = [settings[o.run_id] for o in scores if names[o.run_id] == names[s.run_id]]
        own = settings[s.run_id]
        differing = [k for k in own if any(peer.get(k) != own[k] for peer in peers)]
        shown = " ".join(f"{key}={own[key]}" for key in differing)
        labels[s.run_id] = f"{names[s.run_id]} {shown}" if shown else names[s.run_id]
    return labels


def _settings(scores: RunScores) -> dict:
    """The settings of the last adapter identity the run used (as `compare` shows them)."""
    return dict(scores.adapters[-1].conditions.get("settings") or {}) if scores.adapters else {}


def _adapter_label(scores: RunScores) -> str:
    labels = []
    for use in scores.adapters:
        model = use.conditions.get("model_name") or ""
        labels.append(use.adapter if model in ("", use.adapter) else f"{use.adapter} ({model})")
    return " + ".join(dict.fromkeys(labels))


def _row(
    scores: RunScores,
    label: str,
    group: str | None,
    by: str | None,
    columns: list[TableColumn],
    intervals: bool,
) -> TableRow:
    families: Families = scores.overall if by is None else getattr(scores, GROUPINGS[by])[group]
    counted = _headline_records(scores)
    n = len(counted) if by is None else Counter(getattr(r, by) for r in counted)[group]
    cells = [_cell(families, column, intervals) for column in columns]
    return TableRow(run_id=scores.run_id, label=label, group=group, n=n, cells=cells)


def _cell(families: Families, column: TableColumn, intervals: bool) -> TableCell:
    """The column's metric in one row (no value where the row's records have none of it)."""
    metric = families.get(column.family, {}).get(column.metric)
    if metric is None:
        return TableCell(value=None, population=0, best=False)
    ci95 = metric.ci95 if intervals else None
    return TableCell(value=metric.value, population=metric.population, ci95=ci95, best=False)


def _headline_records(scores: RunScores) -> list[RecordResult]:
    """The records the overall and per-group numbers stand on: a robustness run's clean ones
    (each variant has its own numbers, which a paper table does not show)."""
    condition = read_condition(scores.conditions["declared"])
    if condition is None:
        return scores.records
    labels = condition.labels(record.record_id for record in scores.records)
    return [record for record in scores.records if labels[record.record_id] == CLEAN]


def _marked(rows: list[TableRow], columns: list[TableColumn]) -> list[TableRow]:
    """One block's rows with the best value of each column marked (ties all marked)."""
    for position, column in enumerate(columns):
        values = [v for row in rows if (v := row.cells[position].value) is not None]
        if column.better is None or len(values) < 2:
            continue
        best = max(values) if column.better == "higher" else min(values)
        for row in rows:
            cell = row.cells[position]
            cell.best = cell.value == best
    return rows


def render_table(table: PaperTable, fmt: str) -> str:
    """The table as text in one of FORMATS; an unknown format is a ScoreError."""
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ScoreError(f"unknown table format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return renderer(table)
