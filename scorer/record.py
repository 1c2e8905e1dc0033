"""One record, every metric family: evaluate its session trace, then (after the run's
content judgements are made) give its per-record result and its aggregation fields."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from streameval.core.benchmark.records import ProactiveRecord, QARecord, Record
from streameval.scorer.episodes import SessionTrace
from streameval.scorer.errors import ScoreError
from streameval.scorer.judges import JudgeRequest
from streameval.scorer.ovo import OVO_FIELD_PREFIX, OvoResult, evaluate_ovo
from streameval.scorer.proactive import (
    BEFORE_WINDOW,
    IN_WINDOW,
    ProactiveResult,
    evaluate_proactive,
)
from streameval.scorer.profiles import ScoringProfile
from streameval.scorer.qa import QAResult, evaluate_qa
from streameval.scorer.readiness import Readiness, Turn, proactive_turns, qa_turn
from streameval.scorer.realstream import (
    RealstreamResult,
    evaluate_realstream,
    evaluate_realstream_qa,
)
from streameval.scorer.streamingbench import SbResult, evaluate_streamingbench
from streameval.scorer.workload import WorkloadResult, evaluate_workload

_RECORD = TypeAdapter(Record)
NOT_RUN = "not_run"  # a record whose session recorded no event


def parse_record(data: dict[str, Any]) -> QARecord | ProactiveRecord:
    try:
        return _RECORD.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ScoreError(
            f"record {data.get('record_id', '?')!r} is not a valid benchmark record: "
            f"{where}: {first['msg']}"
        ) from None


@dataclass
class RecordEvaluation:
    record: QARecord | ProactiveRecord
    trace: SessionTrace
    workload: WorkloadResult
    qa: QAResult | None = None
    proactive: ProactiveResult | None = None
    realstream: RealstreamResult | None = None
    turns: list[Turn] = field(default_factory=list)  # readiness turns (evidence windows)
    readiness_applicable: bool = False  # in the readiness population (see report._readiness)
    readiness: Readiness | None = None
    ovo: OvoResult | None = None
    streamingbench: SbResult | None = None

    @property
    def status(self) -> str:
        return NOT_RUN if self.trace.event_count == 0 else self.trace.status

    def requests(self) -> list[JudgeRequest]:
        found = []
        if self.proactive is not None:
            found += self.proactive.requests()
        if self.realstream is not None:
            found += self.realstream.requests()
        return found

    def apply(self, scores: dict[JudgeRequest, float], profile: ScoringProfile) -> None:
        if self.proactive is not None:
            self.proactive.apply(scores)
        if self.realstream is not None:
            self.realstream.apply(scores, profile)


def evaluate_record(
    record: QARecord | ProactiveRecord,
    trace: SessionTrace,
    profile: ScoringProfile,
    frame_level: bool = False,
) -> RecordEvaluation:
    """`frame_level`: the run asked for a decision at every step (the realstream protocol),
    so its QA records are RealStreamEval turns too."""
    evaluation = RecordEvaluation(record, trace, evaluate_workload(trace, profile.submission_kinds))
    realstream = "realstream" in profile.families
    if isinstance(record, QARecord):
        evaluation.qa = evaluate_qa(trace, record, profile)
        turn = qa_turn(record, evaluation.qa.answer_t)
        evaluation.turns = [] if turn is None else [turn]
        if realstream and frame_level:
            evaluation.realstream = evaluate_realstream_qa(trace, record, profile)
    else:
        # Only the judged families read the TRACE windows: a profile without them asks
        # the judge nothing.
        if profile.judges_content:
            evaluation.proactive = evaluate_proactive(trace, record, profile)
            evaluation.turns = proactive_turns(evaluation.proactive)
        if realstream:
            evaluation.realstream = evaluate_realstream(trace, record, profile)
    if "ovo" in profile.families:
        evaluation.ovo = evaluate_ovo(trace, record, profile)
    if "streamingbench" in profile.families:
        evaluation.streamingbench = evaluate_streamingbench(trace, record, profile)
    return evaluation


def _num(value: float | int | bool | None) -> float:
    return math.nan if value is None else float(value)


def _timing_member(qa: QAResult, profile: ScoringProfile) -> float:
    """Whether the record is in the TTFT/latency population (NaN: it is not)."""
    return 1.0 if profile.latency_population == "records" or qa.responded else math.nan


def fields(
    evaluation: RecordEvaluation, profile: ScoringProfile
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The record's contribution to every metric (see aggregate.CATALOG)."""
    finished = evaluation.status == "finished"
    workload = evaluation.workload
    scalars: dict[str, float] = {"wl_n": 1.0}
    for name, value in asdict(workload).items():
        scalars[f"wl_{name}"] = _num(value)
    lists: dict[str, list[float]] = {}
    if evaluation.qa is not None:
        qa = evaluation.qa
        scalars |= {
            "qa_n": 1.0,
            "qa_correct": float(qa.correct),
            "qa_finished": float(finished),
            "qa_invalid": float(qa.invalid),
            "qa_ttft": _num(qa.ttft_s),
            "qa_latency": _num(qa.latency_s),
            "qa_timed_n": _timing_member(qa, profile),
        }
    if evaluation.proactive is not None:
        result = evaluation.proactive
        windows = len(result.windows)
        in_window = result.count(IN_WINDOW)
        scalars |= {
            "pr_n": 1.0,
            "pr_finished": float(finished),
            "pr_windows": float(windows),
            "pr_score": result.score_sum,
            "pr_in_window": float(in_window),
            "pr_missed": float(windows - in_window),
            "pr_before": float(result.count(BEFORE_WINDOW)),
            "pr_answered": float(len(result.answered)),
            "pr_false_alarms": float(sum(result.false_alarm)),
            "pr_redundant": float(result.redundant),
        }
        for clock in profile.response_delay_clocks:
            delays = (getattr(outcome, f"delay_{clock}_s") for outcome in result.windows)
            lists[f"pr_delays_{clock}"] = [delay for delay in delays if delay is not None]
    if evaluation.realstream is not None:
        rs = evaluation.realstream
        scalars |= {
            "rs_n": 1.0,
            "rs_score": rs.score,
            "rs_quality": rs.quality,
            "rs_rate": rs.answer_rate,
            "rs_multiplier": rs.multiplier,
            "rs_early": float(rs.early),
            "rs_tokens": float(rs.tokens),
            "rs_token_turns": float(rs.token_turns),
        }
    if "readiness" in profile.families:
        scalars |= _readiness_fields(evaluation)
    if evaluation.ovo is not None:
        ovo = evaluation.ovo
        scalars |= {
            "ovo_n": 1.0,
            "ovo_finished": float(finished),
            "ovo_questions": float(len(ovo.answers)),
            "ovo_unanswered": float(ovo.unanswered),
            f"{OVO_FIELD_PREFIX}{ovo.category}/{evaluation.record.task_type}": ovo.score,
        }
    if evaluation.streamingbench is not None:
        qa = isinstance(evaluation.record, QARecord)
        scalars |= _streamingbench_fields(evaluation.streamingbench, qa, finished)
    return scalars, lists


def _readiness_fields(evaluation: RecordEvaluation) -> dict[str, float]:
    """Every record counts towards the readiness coverage; only one in the readiness
    population (an evidence window, τ > 0) has readiness and accuracy fields."""
    out = {"rd_all": 1.0}
    if not evaluation.readiness_applicable:
        return out
    ready = evaluation.readiness
    if evaluation.qa is not None:
        correct, items = float(evaluation.qa.correct), 1.0
    else:
        assert evaluation.proactive is not None
        correct, items = evaluation.proactive.score_sum, float(len(evaluation.proactive.windows))
    return out | {
        "rd_n": 1.0,
        "rd_ars": _num(None if ready is None else ready.ars),
        "rd_ep": _num(None if ready is None else ready.ep),
        "rd_lp": _num(None if ready is None else ready.lp),
        "rd_acc": correct,
        "rd_acc_n": items,
    }


def _streamingbench_fields(result: SbResult, qa: bool, finished: bool) -> dict[str, float]:
    """A QA record is one question; a proactive record, one item per target."""
    common = {"sb_n": 1.0, "sb_finished": float(finished)}
    if qa:
        correct = float(result.correct)
        return common | {
            "sb_qa_n": 1.0,
            "sb_qa_correct": correct,
            "sb_items": 1.0,
            "sb_correct": correct,
        }
    targets, hits = float(len(result.targets)), float(result.hits)
    return common | {
        "sb_targets": targets,
        "sb_hits": hits,
        "sb_items": targets,
        "sb_correct": hits,
    }


def details(evaluation: RecordEvaluation, profile: ScoringProfile) -> dict[str, Any]:
    """The per-record result: what was predicted and assigned, and why it scored so."""
    record, trace = evaluation.record, evaluation.trace
    out: dict[str, Any] = {
        "record_id": record.record_id,
        "task": record.task,
        "task_type": record.task_type,
        "source_benchmark": record.source_benchmark,
        "video_path": record.video_path,
        "status": evaluation.status,
        "failure_stage": trace.failure_stage,
        "failure_reason": trace.failure_reason,
        "failure_cause": trace.failure_cause,
        "events": trace.event_count,
        "workload": asdict(evaluation.workload),
        "qa": None if evaluation.qa is None else asdict(evaluation.qa),
        "proactive": None,
        "realstream": None,
        "readiness": None,
        "ovo": None,
        "streamingbench": None,
    }
    if evaluation.proactive is not None:
        out["proactive"] = _proactive_details(evaluation.proactive)
    if evaluation.realstream is not None:
        rs = evaluation.realstream
        out["realstream"] = {
            "far": rs.far,
            "delta_steps": rs.delta,
            "steps": rs.steps,
            "response_steps": sorted(set(rs.response_steps)),
            "answer_rate": rs.answer_rate,
            "truth_steps": rs.truth_steps,
            "best_judgement": rs.best,
            "quality": rs.quality,
            "multiplier": rs.multiplier,
            "early_penalty": rs.early_penalty,
            "repeated": rs.repeated,
            "score": rs.score,
            "output_tokens": rs.tokens,
            "token_turns": rs.token_turns,
        }
    if evaluation.ovo is not None:
        ovo = evaluation.ovo
        answers = [asdict(answer) for answer in ovo.answers]
        out["ovo"] = {"category": ovo.category, "score": ovo.score, "answers": answers}
    if evaluation.streamingbench is not None:
        out["streamingbench"] = asdict(evaluation.streamingbench) | {
            "hits": evaluation.streamingbench.hits
        }
    if "readiness" in profile.families:
        ready = evaluation.readiness
        out["readiness"] = {
            "applicable": evaluation.readiness_applicable,
            "turns": [asdict(turn) for turn in evaluation.turns],
            "ars": None if ready is None else ready.ars,
            "early_penalty": None if ready is None else ready.ep,
            "late_penalty": None if ready is None else ready.lp,
        }
    return out


def _proactive_details(result: ProactiveResult) -> dict[str, Any]:
    windows = []
    for outcome in result.windows:
        episode = None if outcome.episode is None else result.answered[outcome.episode]
        windows.append(
            {
                "trigger": outcome.window.trigger,
                "trigger_type": outcome.window.trigger_type,
                "start": outcome.window.start,
                "end": outcome.window.end,
                "answer": outcome.window.answer,
                "assignment": outcome.assignment,
                "response_id": None if episode is None else episode.response_id,
                "onset_t": None if episode is None else episode.onset_t,
                "prediction": None if episode is None else episode.text,
                "score": outcome.score,
                "delay_runtime_s": outcome.delay_runtime_s,
                "delay_video_s": outcome.delay_video_s,
                "answered_inside": outcome.onsets_inside,
            }
        )
    return {
        "windows": windows,
        "score_sum": result.score_sum,
        "answered_episodes": len(result.answered),
        "unanswered_episodes": result.unanswered_episodes,
        "false_alarms": sum(result.false_alarm),
        "tail_responses": sum(result.tail),
        "redundant": result.redundant,
    }
