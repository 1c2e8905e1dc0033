"""Score a run: `score_run(store, run_id)` or `score_exported(path)`, the same numbers.

One pass over the run's events, grouped by session (one session = one record), evaluates
every record under each metric family the profile needs (scorer/metrics/) as soon as its
session's events end, then drops the session's trace, keeping the record's results and its
session's outcome: memory does not grow with the number of events (a trace costs about 100
bytes an event). The content judgements of the whole run are then made in one batch; then
each family fixes what depends on the whole run from the records' results (readiness: its
scale τ), and every metric is aggregated overall, per task type and per source benchmark.
The result records the profile with all its constants, the judge and how it judged, the
protocol profile the run was made under, and the run's declared conditions.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.store.store import Store
from streameval.events import FailureCause
from streameval.scorer.episodes import SessionTrace, assemble
from streameval.scorer.errors import ScoreError
from streameval.scorer.exported import open_exported
from streameval.scorer.judging.cache import JudgeCache
from streameval.scorer.judging.judges import (
    ExactJudge,
    Judge,
    JudgeRequest,
    JudgeSummary,
    LLMJudge,
)
from streameval.scorer.metrics.aggregate import Metric, summarise
from streameval.scorer.metrics.explain import (
    COLUMNS,
    FRACTION,
    MetricHelp,
    explain,
    family_glossary,
    run_level_glossary,
)
from streameval.scorer.metrics.family import RecordEvaluation
from streameval.scorer.metrics.ovo import OVO
from streameval.scorer.metrics.proactive import PROACTIVE
from streameval.scorer.metrics.qa import QA
from streameval.scorer.metrics.readiness import READINESS, TAUS
from streameval.scorer.metrics.realstream import REALSTREAM
from streameval.scorer.metrics.record import (
    apply_judgements,
    details,
    evaluate_record,
    fields,
    judge_requests,
    parse_record,
    settle,
)
from streameval.scorer.metrics.registry import FAMILIES, judges_content
from streameval.scorer.metrics.robustness import (
    NegativeStreams,
    VariantGroups,
    group_records,
    negative_streams,
)
from streameval.scorer.metrics.statistic import FieldTable
from streameval.scorer.metrics.streamingbench import exclusion_note
from streameval.scorer.profiles import (
    ScoringProfile,
    get_profile,
    is_frame_level,
    scoring_profile_for,
)
from streameval.scorer.source import RunSource, store_source
from streameval.terminal import Column, print_table
from streameval.variants import CLEAN, read_condition

SCHEMA = "streameval-scores/1"
# The configuration entries that say how the timeline was delivered.
CONFIG_KEYS = (
    "profile",
    "pacing",
    "speed",
    "fps",
    "max_width",
    "jpeg_quality",
    "qa_history_s",
    "proactive_lead_s",
    "proactive_tolerance_s",
)


class MetricValue(BaseModel):
    value: float | None
    population: int = Field(description="units in the denominator (see unit)")
    observed: int = Field(description="units with an observed value")
    coverage: float | None = Field(description="observed / population")
    ci95: tuple[float, float] | None = Field(
        description="bootstrap interval clustered by video (None: the value draws on fewer "
        "than two videos)"
    )
    unit: str


Families = dict[str, dict[str, MetricValue]]
RUN_LEVEL = run_level_glossary()


class ProfileReport(BaseModel):
    name: str
    version: str
    description: str
    protocols: list[str] = Field(description="protocol profiles whose runs it is meant for")
    constants: dict[str, Any]
    overrides: dict[str, Any]


class JudgeReport(BaseModel):
    kind: str
    incomplete: bool = Field(
        description="some judgements failed and scored 0, or (TRACE's judge rules) semantic "
        "ones fell back to exact match"
    )
    requests: int
    unique: int
    semantic: int
    exact: int
    cache_hits: int
    llm_judged: int
    calls: int
    failures: int
    eventual_failures: int = Field(
        description="failed judgements made only for TRACE's eventual view (not incomplete)"
    )
    failure_reasons: list[str]
    fallback: bool
    fallback_incomplete: bool = Field(
        description="semantic judgements fell back to exact match under TRACE's judge rules, "
        "which count that as incomplete"
    )
    model: str | None
    base_url: str | None
    template_version: str | None
    note: str | None


class SessionCounts(BaseModel):
    finished: int = 0
    failed: int = 0
    incomplete: int = 0  # events but no outcome: an interrupted run
    not_run: int = 0
    failed_infrastructure: int = Field(
        default=0,
        description="failed sessions whose adapter could not be reached, vanished or timed "
        "out (not a model outcome); `streameval run --resume RUN --retry-failed` reruns them",
    )


class AdapterUse(BaseModel):
    """One adapter identity (its hello) and how many sessions it served."""

    adapter: str
    adapter_version: str
    conditions: dict[str, Any]
    sessions: int


def _family_entries(schema: dict[str, Any]) -> None:
    """Document each registered family's entry, which the model takes as an extra field;
    every record has one (null or not) for each family."""
    for name in FAMILIES:
        schema["properties"][name] = {
            "anyOf": [{"additionalProperties": True, "type": "object"}, {"type": "null"}],
            "title": name.capitalize(),
            "description": f"the {name} family's result for this record (null: none)",
        }
        schema["required"].append(name)


class RecordResult(BaseModel):
    """One record's result: these fields, then one entry per metric family
    (scorer/metrics/registry.py order), None where the family did not evaluate the record."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_family_entries)

    record_id: str
    task: str
    task_type: str
    source_benchmark: str
    video_path: str
    status: str
    failure_stage: str | None
    failure_reason: str | None
    failure_cause: str | None
    events: int


class RunScores(BaseModel):
    schema_version: str = SCHEMA
    run_id: str
    run_status: str
    benchmark: str
    config_hash: str
    conditions: dict[str, Any]
    profile: ProfileReport
    protocol: str | None = Field(
        description="the protocol profile the run was made under (None: not recorded)"
    )
    judge: JudgeReport
    events_scored: int
    records_scored: int
    sessions: SessionCounts
    adapters: list[AdapterUse] = Field(
        default_factory=list, description="every adapter identity that served a session"
    )
    derived: dict[str, Any] = Field(description="values fixed from the data, e.g. readiness τ")
    notes: list[str]
    overall: Families
    by_task_type: dict[str, Families]
    by_source_benchmark: dict[str, Families]
    # Entries only a robustness run has: left out of a plain run's JSON (its bytes unchanged).
    by_variant: dict[str, Families] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="a robustness run's metrics per variant: `clean` and each perturbation, "
        "each on its own records (None: a run without variants)",
    )
    negative_streams: NegativeStreams | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="false alarms on a robustness run's negative streams",
    )
    # Only an incomplete export scored with --allow-partial has it (a complete one's JSON is
    # unchanged).
    partial: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="what the scored export lacks: it was scored with --allow-partial "
        "although incomplete, so these numbers cover only the lines it holds (None: complete)",
    )
    records: list[RecordResult] = Field(default_factory=list)

    def to_json(self, include_records: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; per-record results only when asked for."""
        return self.model_dump(mode="json", exclude=None if include_records else {"records"})

    def shown_metrics(self) -> dict[str, list[str]]:
        """The metrics the score output shows, by family (negative_streams: its numbers),
        for --explain."""
        shown = {family: list(metrics) for family, metrics in self.overall.items()}
        if self.negative_streams is not None:
            shown |= {entry: [h.name for h in helps] for entry, helps in RUN_LEVEL.items()}
        return shown

    def render(self, console: Console | None = None, explained: bool = False) -> None:
        render_scores(self, console or Console(), explained)


@dataclass
class EvaluatedRun:
    """Everything scoring computed, before it is shaped into RunScores."""

    source: RunSource
    profile: ScoringProfile
    evaluations: list[RecordEvaluation]
    judge: JudgeSummary
    derived: dict[str, Any]  # what the families fixed from the whole run (readiness τ)
    events: int

    def table(self) -> FieldTable:
        rows = [fields(evaluation, self.profile) for evaluation in self.evaluations]
        return FieldTable(
            [scalars for scalars, _ in rows],
            [lists for _, lists in rows],
            [evaluation.record.video_path for evaluation in self.evaluations],
        )


def evaluate_source(
    source: RunSource,
    profile: ScoringProfile | str = "trace-paper-v1",
    judge: Judge | None = None,
) -> EvaluatedRun:
    profile = get_profile(profile)
    ordered = sorted(source.records, key=lambda data: data["record_id"])
    records = {data["record_id"]: parse_record(data) for data in ordered}
    frame_level = is_frame_level(source.protocol)
    evaluated: dict[str, RecordEvaluation] = {}
    events = 0
    # A session's events come together (scorer/episodes.py), so its trace is complete when
    # the next session's begin: its record is evaluated then and the trace dropped.
    for trace in assemble(source.events(None)):
        record = records.get(trace.session_id)
        if record is None:
            raise ScoreError(
                f"run {source.run_id!r}: session {trace.session_id!r} matches no record"
            )
        evaluated[trace.session_id] = _evaluated(record, trace, profile, frame_level)
        events += trace.event_count
    evaluations = [
        evaluated.get(record_id)
        or _evaluated(record, SessionTrace(record_id), profile, frame_level)
        for record_id, record in records.items()
    ]
    requests: list[JudgeRequest] = [r for e in evaluations for r in judge_requests(e)]
    scores, summary = (judge or ExactJudge()).judge(requests)
    for evaluation in evaluations:
        apply_judgements(evaluation, scores, profile)
    derived = settle(evaluations, profile)
    return EvaluatedRun(source, profile, evaluations, summary, derived, events)


def _evaluated(
    record: QARecord | ProactiveRecord,
    trace: SessionTrace,
    profile: ScoringProfile,
    frame_level: bool,
) -> RecordEvaluation:
    """The record evaluated, its trace dropped: what stays is its families' results and
    its session's outcome, a few hundred bytes, whatever the number of its events."""
    evaluation = evaluate_record(record, trace, profile, frame_level)
    evaluation.drop_trace()
    return evaluation


def scores_of(run: EvaluatedRun) -> RunScores:
    profile = run.profile
    table = run.table()
    families = profile.families
    groups = _variant_groups(run)
    # A robustness run's headline numbers are its clean records'; each variant has its own.
    clean = list(range(len(run.evaluations))) if groups is None else groups.by_label[CLEAN]
    overall = summarise(table.subset(clean), families, profile, "overall")
    by_task_type = _slices(run, table, "task_type", clean)
    by_source = _slices(run, table, "source_benchmark", clean)
    statuses = Counter(evaluation.status for evaluation in run.evaluations)
    info = run.source.run
    config = info.get("config") or {}
    return RunScores(
        run_id=info["run_id"],
        run_status=info["status"],
        benchmark=info["benchmark"],
        config_hash=info["config_hash"],
        conditions={
            "declared": info.get("conditions") or {},
            "config": {key: config[key] for key in CONFIG_KEYS if key in config},
        },
        profile=profile_report(profile),
        protocol=run.source.protocol,
        judge=JudgeReport(incomplete=run.judge.incomplete, **asdict(run.judge)),
        events_scored=run.events,
        records_scored=len(run.evaluations),
        sessions=SessionCounts(**statuses, failed_infrastructure=_infrastructure_failures(run)),
        adapters=_adapters(run),
        derived=_derived(run),
        notes=_notes(run, config) + _robustness_notes(groups),
        overall=_models(overall),
        by_task_type=by_task_type,
        by_source_benchmark=by_source,
        by_variant=None if groups is None else _by_variant(run, table, groups, overall),
        negative_streams=None
        if groups is None or not groups.negative
        else negative_streams([run.evaluations[i] for i in groups.negative], profile),
        partial="; ".join(run.source.incomplete) or None,
        records=[RecordResult(**details(e, profile)) for e in run.evaluations],
    )


def profile_report(profile: ScoringProfile) -> ProfileReport:
    return ProfileReport(
        name=profile.name,
        version=profile.version,
        description=profile.description,
        protocols=list(profile.protocols),
        constants=profile.constants(),
        overrides=dict(profile.overrides),
    )


def _variant_groups(run: EvaluatedRun) -> VariantGroups | None:
    condition = read_condition(run.source.run.get("conditions") or {})
    return None if condition is None else group_records(condition, run.evaluations)


def _by_variant(
    run: EvaluatedRun,
    table: FieldTable,
    groups: VariantGroups,
    clean: dict[str, dict[str, Metric]],
) -> dict[str, Families]:
    """Clean (the overall metrics) and each perturbation, every metric on its own records;
    negative streams are left out (they have no windows: see `negative_streams`)."""
    by_variant = {CLEAN: _models(clean)}
    for label, rows in groups.by_label.items():
        if label != CLEAN:
            key = f"variant={label}"
            summary = summarise(table.subset(rows), run.profile.families, run.profile, key)
            by_variant[label] = _models(summary)
    return by_variant


def _robustness_notes(groups: VariantGroups | None) -> list[str]:
    if groups is None:
        return []
    notes = [
        f"robustness run: overall, per task type and per source benchmark cover the "
        f"{_count(len(groups.by_label[CLEAN]), 'clean record')} only; by_variant has every "
        "metric per variant, each on its own records"
    ]
    if groups.negative:
        notes.append(
            f"{_count(len(groups.negative), 'negative-stream record')} (streams with no "
            "event) count only in negative_streams (false alarms per hour)"
        )
    return notes


def _slices(
    run: EvaluatedRun, table: FieldTable, attribute: str, rows: list[int]
) -> dict[str, Families]:
    groups: dict[str, list[int]] = {}
    for position in rows:
        groups.setdefault(getattr(run.evaluations[position].record, attribute), []).append(position)
    return {
        name: _models(
            summarise(table.subset(rows), run.profile.families, run.profile, f"{attribute}={name}")
        )
        for name, rows in sorted(groups.items())
    }


def _models(families: dict[str, dict[str, Metric]]) -> Families:
    return {
        family: {name: MetricValue(**asdict(metric)) for name, metric in metrics.items()}
        for family, metrics in families.items()
    }


def _derived(run: EvaluatedRun) -> dict[str, Any]:
    derived: dict[str, Any] = {
        "response_delay_clocks": list(run.profile.response_delay_clocks),
        "pacing": sorted({e.session.pacing for e in run.evaluations if e.session.pacing}),
    }
    return derived | run.derived


def _infrastructure_failures(run: EvaluatedRun) -> int:
    return sum(
        1
        for e in run.evaluations
        if e.status == "failed" and e.session.failure_cause == FailureCause.INFRASTRUCTURE
    )


def _adapters(run: EvaluatedRun) -> list[AdapterUse]:
    """Each distinct adapter identity (name, version, declared conditions) and its sessions."""
    uses: Counter[str] = Counter()
    for evaluation in run.evaluations:
        hello = evaluation.session.adapter
        if hello is not None:
            identity = {"adapter": hello.adapter, "adapter_version": hello.adapter_version}
            identity["conditions"] = hello.conditions.model_dump(mode="json")
            uses[json.dumps(identity, sort_keys=True)] += 1
    return [AdapterUse(**json.loads(key), sessions=count) for key, count in sorted(uses.items())]


def _notes(run: EvaluatedRun, config: dict[str, Any]) -> list[str]:
    notes = []
    if run.judge.note and judges_content(run.profile):
        notes.append(run.judge.note)
    if run.judge.fallback_incomplete:
        notes.append(
            "judge-incomplete: TRACE's judge rules mark semantic task types scored by exact "
            "match (no judge endpoint) as incomplete"
        )
    if run.judge.failures:
        notes.append(
            f"judge-incomplete: {run.judge.failures} of {run.judge.semantic} semantic "
            "judgements failed and scored 0"
        )
    streamed = config.get("proactive_tolerance_s")
    if streamed is not None and streamed != run.profile.tolerance_s:
        notes.append(
            f"the run streamed proactive records with tolerance {streamed:g} s; scored with "
            f"{run.profile.tolerance_s:g} s"
        )
    if run.source.run["status"] != "finished":
        notes.append(
            f"run status is {run.source.run['status']!r}: records without a finished session "
            "count as not completed and stay in every denominator"
        )
    notes += _integrity_notes(run)
    notes += exclusion_note(run.evaluations)
    if REALSTREAM.name in run.profile.families and not run.profile.rs_floor_score_at_zero:
        notes.append(
            "RealStreamEval per-record scores are not floored at 0 (EvoStreaming Eq. 3); "
            "an early penalty can make a record's score negative"
        )
    return notes + _protocol_notes(run)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _integrity_notes(run: EvaluatedRun) -> list[str]:
    """Failures that are not model outcomes, and a run served by several adapters."""
    notes = []
    infrastructure = _infrastructure_failures(run)
    if infrastructure:
        notes.append(
            f"{_count(infrastructure, 'record')} failed for infrastructure reasons (adapter "
            "unreachable, crashed or timed out), not as model outcomes; as TRACE does, they "
            f"stay in every denominator; `streameval run --resume {run.source.run_id} "
            "--retry-failed` reruns just them"
        )
    adapters = _adapters(run)
    if len(adapters) > 1:
        names = "; ".join(
            f"{use.adapter} {use.adapter_version} ({use.conditions.get('model_name', '?')}): "
            f"{_count(use.sessions, 'session')}"
            for use in adapters
        )
        notes.append(
            f"this run mixes {len(adapters)} adapter identities (resumed with "
            f"--allow-adapter-change): {names}"
        )
    return notes + _readiness_notes(run)


def _readiness_notes(run: EvaluatedRun) -> list[str]:
    if READINESS.name not in run.profile.families:
        return []
    notes = []
    qa = [e for e in run.evaluations if e.result(QA) is not None]
    without = sum(1 for e in qa if not e.result(READINESS).turns)
    if without:
        notes.append(
            f"readiness: {without} of {len(qa)} QA records have no evidence window and are "
            "left out of the readiness population (see readiness.evidence_coverage)"
        )
    for task, tau in sorted(run.derived.get(TAUS, {}).items()):
        if tau <= 0:
            notes.append(
                f"readiness is not applicable to the {task} records: every evidence window "
                "is a point (τ = 0), so any answer after it would score 0"
            )
    return notes


def _protocol_notes(run: EvaluatedRun) -> list[str]:
    """What a scoring profile cannot see in a run of another protocol."""
    profile, protocol = run.profile, run.source.protocol
    evaluations = run.evaluations
    notes = []
    if protocol is not None and protocol not in profile.protocols:
        notes.append(
            f"scoring profile {profile.name} is meant for runs under protocol "
            f"{' or '.join(profile.protocols)}; this run was made under {protocol} (scored "
            f"as published by profile {scoring_profile_for(protocol)}), so these numbers are "
            "not comparable with published ones"
        )
    probed = sum(1 for e in evaluations if e.result(PROACTIVE) is not None and e.session.probed)
    if probed and OVO.name not in profile.families:
        notes.append(
            f"{probed} proactive records were asked as probes (no instruction was sent): "
            "the proactive metrics see no response from them; the ovo-offline profile "
            "scores the probe answers"
        )
    if OVO.name in profile.families:
        unscored = sum(
            1 for e in evaluations if e.record.task == "proactive" and e.result(OVO) is None
        )
        if unscored:
            notes.append(
                f"{unscored} proactive records have no probes: OVO-Bench's offline scoring "
                "asks forward tasks only as probes, so they are left out of the ovo metrics"
            )
    qa_records = any(e.result(QA) is not None for e in evaluations)
    if REALSTREAM.name in profile.families and qa_records and not is_frame_level(protocol):
        notes.append(
            "QA records get a RealStreamEval score only in runs of a frame-level protocol "
            "(realstream); here the realstream metrics cover proactive records"
        )
    return notes


def score_run(
    store: Store,
    run_id: str,
    profile: ScoringProfile | str = "trace-paper-v1",
    judge: Judge | None = None,
) -> RunScores:
    """Score a stored run; an LLM judge keeps its verdicts in the verdict cache."""
    judge = cached(judge)
    return scores_of(evaluate_source(store_source(store, run_id), profile, judge))


def cached(judge: Judge | None) -> Judge | None:
    """An LLM judge that has no cache of its own keeps its verdicts in the sidecar verdict
    cache (scorer/judging/cache.py), whichever store, if any, the run comes from."""
    if isinstance(judge, LLMJudge) and judge.cache is None:
        return judge.with_cache(JudgeCache())
    return judge


def score_exported(
    path: str | Path,
    profile: ScoringProfile | str = "trace-paper-v1",
    judge: Judge | None = None,
    allow_partial: bool = False,
) -> RunScores:
    """Score an exported JSONL event log (`streameval export`) with no store, reading it
    once, one session at a time (scorer/exported.py). An incomplete export is refused
    unless `allow_partial`; then its scores' `partial` says what it lacks."""
    source = load_exported(path, allow_partial)
    return scores_of(evaluate_source(source, profile, cached(judge)))


def load_exported(path: str | Path, allow_partial: bool = False) -> RunSource:
    """The export as a source: its header is read now, its events as they are scored."""
    return open_exported(path, allow_partial)


# --------------------------------------------------------------------------- rendering


def format_value(value: float | None) -> str:
    """A metric's value as every table shows it: four significant digits, `-` for none."""
    if value is None:
        return "-"
    return f"{value:.4g}"


def format_ci(ci95: tuple[float, float] | None) -> str:
    return "-" if ci95 is None else f"[{ci95[0]:.4g}, {ci95[1]:.4g}]"


def unit_label(family: str, metric: str) -> str:
    """The short unit of the console tables: `0-1` for a fraction, else the help's unit."""
    help = explain(f"{family}.{metric}")
    if help is None:
        return ""
    return "0-1" if help.unit == FRACTION else help.unit


PARTIAL_LINE = (
    "scored with --allow-partial from an incomplete export, so these numbers cover only "
    "the lines it holds"
)
SCORE_COLUMNS = (
    Column("metric", key=True),
    Column("value", justify="right"),
    Column("unit"),
    Column("95% CI", justify="right"),
    Column("coverage", justify="right"),
)


def render_scores(scores: RunScores, console: Console, explained: bool = False) -> None:
    """The overall metrics, one group per family, then the headline metric per task type;
    with `explained`, what each metric shown means."""
    rows: list[list[str] | str] = []
    for family, metrics in scores.overall.items():
        rows.append(family)
        rows += [
            [
                name,
                format_value(metric.value),
                unit_label(family, name),
                format_ci(metric.ci95),
                f"{metric.observed}/{metric.population} {metric.unit}",
            ]
            for name, metric in metrics.items()
        ]
    title = (
        f"run {scores.run_id} · protocol {scores.protocol or '?'} · profile "
        f"{scores.profile.name} v{scores.profile.version} · judge {scores.judge.kind}"
    )
    if scores.partial is not None:
        console.print(f"partial: {PARTIAL_LINE}: {scores.partial}", highlight=False, soft_wrap=True)
    print_table(console, SCORE_COLUMNS, rows, title=title)
    _render_task_types(scores, console)
    _render_variants(scores, console)
    sessions = scores.sessions
    console.print(
        f"{scores.records_scored} records, {scores.events_scored} events; sessions: "
        f"{sessions.finished} finished, {sessions.failed} failed, {sessions.incomplete} "
        f"incomplete, {sessions.not_run} not run",
        highlight=False,
    )
    for note in scores.notes:
        console.print(f"note: {note}", highlight=False)
    if explained:
        render_explanations(console, scores.shown_metrics())


def _render_task_types(scores: RunScores, console: Console) -> None:
    """Each family's headline metric per task type, with its population (n)."""
    shown = [
        (family, FAMILIES[family].headline)
        for family in scores.profile.constants.get("families", [])
        if FAMILIES[family].headline
    ]
    columns = [Column("task type", key=True)] + [
        Column(f"{family} {headline} ({unit_label(family, headline)})", justify="right")
        for family, headline in shown
    ]
    rows = []
    for task_type, families in scores.by_task_type.items():
        cells = [task_type]
        for family, headline in shown:
            metric = families.get(family, {}).get(headline)
            cells.append(
                "" if metric is None else f"{format_value(metric.value)} (n={metric.population})"
            )
        rows.append(cells)
    print_table(console, columns, rows, title="per task type")


def _difference(value: float | None, clean: float | None) -> str:
    return "" if value is None or clean is None else f" ({value - clean:+.4g})"


def _render_variants(scores: RunScores, console: Console) -> None:
    """A robustness run: every metric per variant next to clean, with its difference to
    clean; then the false alarms on negative streams."""
    if scores.by_variant is not None:
        clean = scores.by_variant[CLEAN]
        variants = [label for label in scores.by_variant if label != CLEAN]
        columns = [Column("metric", key=True), Column(CLEAN, justify="right")] + [
            Column(label, justify="right") for label in variants
        ]
        rows: list[list[str] | str] = []
        for family, metrics in clean.items():
            rows.append(family)
            for name, metric in metrics.items():
                cells = [name, format_value(metric.value)]
                for label in variants:
                    other = scores.by_variant[label].get(family, {}).get(name)
                    value = None if other is None else other.value
                    cells.append(format_value(value) + _difference(value, metric.value))
                rows.append(cells)
        title = "per variant (value, and its difference to clean)"
        print_table(console, columns, rows, title=title)
    if scores.negative_streams is not None:
        console.print(negative_streams_line(scores.negative_streams), highlight=False)


def negative_streams_line(negative: NegativeStreams) -> str:
    return (
        f"negative streams: {_count(negative.sessions, 'session')}, {negative.hours:.4g} h "
        f"watched, {_count(negative.false_alarms, 'false alarm')}: "
        f"{format_value(negative.false_alarms_per_hour)} per hour, "
        f"95% CI {format_ci(negative.ci95)}"
    )


def render_explanations(console: Console, metrics: dict[str, list[str]]) -> None:
    """Unit, scale and meaning of each named metric, by family, then of the columns."""
    console.print("what the numbers mean (docs/metrics.md defines each in full):")
    for family, names in metrics.items():
        console.print(Text(family, style="bold"))
        for name in names:
            help = explain(f"{family}.{name}")
            if help is not None:
                _print_help(console, help, indent=2)
    console.print(Text("columns", style="bold"))
    for help in COLUMNS:
        _print_help(console, help, indent=2)


def glossary_metrics() -> dict[str, list[str]]:
    """Every metric any profile reports, by family."""
    return {family: [help.name for help in helps] for family, helps in family_glossary().items()}


def _print_help(console: Console, help: MetricHelp, indent: int) -> None:
    facts = " · ".join(part for part in (help.unit, help.scale) if part)
    console.print(Padding(Text(f"{help.name} · {facts}"), (0, 0, 0, indent), expand=False))
    console.print(Padding(Text(help.meaning, style="dim"), (0, 0, 0, indent + 4), expand=False))


def explanations_json(metrics: dict[str, list[str]]) -> dict[str, dict[str, dict[str, str]]]:
    """The help of each named metric, by family, as JSON."""
    return {
        family: {
            name: {"unit": help.unit, "scale": help.scale, "meaning": help.meaning}
            for name in names
            if (help := explain(f"{family}.{name}")) is not None
        }
        for family, names in metrics.items()
    }
