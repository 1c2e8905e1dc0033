"""RealStreamEval score of one record (EvoStreaming Eq. 3-4, metrics spec section 4).

Proactive records: steps t = 1..T are the decision steps the Core sent, before the
instruction too (or, for autonomous adapters that get no steps, the delivered frames from
the instruction on). An answered episode belongs to the last step at or before its onset; a
trigger's ground-truth step is the first step at or after its start.

QA records under the frame-level protocol (the realstream protocol profile): the steps are
the decision steps before the question plus the question's own step (the question arrives
at its step and the decision there is the answer), so T counts every step of the session.
The question's step is the ground-truth step; J there is the multiple-choice correctness of
the answer under the profile's option parser (1 or 0), not a judge.

    S = quality * M - P_early
    quality = mean over ground-truth steps t* of max J(a_t, a*) over responses |t - t*| <= δ
    FAR (REC, SSR, CRR): δ = 1 step, P_early = 0.1 if a response comes before min t* - δ,
        M = 1 if R < 0.4 else max(1 - 0.2 * floor(5 R), 0.2), R = response steps / T
    other tasks: δ = 0, P_early = 0, M = 0.5 if one answer repeats on consecutive steps

The multiplier is computed in exact fractions: 0.2 * floor(5 * 3/5) must be 0.6, not
0.6000000000000001.

The family (`REALSTREAM`) reports the mean score (in percent) and its terms over its records,
the output tokens per response turn, and the score per token.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.scorer.episodes import Episode, SessionTrace, timed_answers
from streameval.scorer.judging.judges import JudgeRequest
from streameval.scorer.metrics.family import Fields, MetricFamily, RecordEvaluation
from streameval.scorer.metrics.statistic import Combined, Mean, Ratio, Statistic
from streameval.scorer.parsing import OPTION_PARSERS, gold_label, option_labels
from streameval.scorer.profiles import ScoringProfile


def verbosity_multiplier(response_steps: int, steps: int, profile: ScoringProfile) -> float:
    """M_FAR of Eq. 4 at answer rate R = response_steps / steps."""
    if steps == 0:
        return 1.0
    rate = Fraction(response_steps, steps)
    if rate < Fraction(str(profile.rs_rate_threshold)):
        return 1.0
    bins = math.floor(rate * profile.rs_rate_bins)
    decayed = 1 - Fraction(str(profile.rs_rate_slope)) * bins
    return float(max(decayed, Fraction(str(profile.rs_multiplier_floor))))


def step_grid(trace: SessionTrace) -> list[float]:
    if trace.step_t:
        return trace.step_t
    if trace.task_t is None:
        return []
    first = max(0, bisect.bisect_right(trace.frame_t, trace.task_t) - 1)
    return trace.frame_t[first:]


@dataclass(slots=True)
class RealstreamResult:
    far: bool
    delta: int
    steps: int  # T
    response_steps: list[int]  # per answered episode
    truth_steps: list[int]  # per trigger, in record order
    pairs: list[tuple[int, JudgeRequest]]  # (trigger, judgement) within δ
    fixed: list[tuple[int, float]]  # (target, J) known without a judge: QA option matches
    early: bool
    repeated: bool
    multiplier: float
    early_penalty: float
    tokens: int  # output tokens of answered episodes that reported them
    token_turns: int  # answered episodes that reported output tokens
    quality: float = 0.0
    score: float = 0.0
    best: list[float] = field(default_factory=list)  # per trigger

    @property
    def answer_rate(self) -> float:
        return len(set(self.response_steps)) / self.steps if self.steps else 0.0

    def requests(self) -> list[JudgeRequest]:
        return [request for _, request in self.pairs]

    def apply(self, scores: Mapping[JudgeRequest, float], profile: ScoringProfile) -> None:
        self.best = [0.0] * len(self.truth_steps)
        judged = [(trigger, scores[request]) for trigger, request in self.pairs]
        for trigger, score in judged + self.fixed:
            self.best[trigger] = max(self.best[trigger], score)
        self.quality = sum(self.best) / len(self.best) if self.best else 0.0
        score = self.quality * self.multiplier - self.early_penalty
        self.score = max(0.0, score) if profile.rs_floor_score_at_zero else score


def _step_of(grid: list[float], t: float) -> int:
    return max(0, bisect.bisect_right(grid, t) - 1)


def evaluate_realstream(
    trace: SessionTrace, record: ProactiveRecord, profile: ScoringProfile
) -> RealstreamResult:
    grid = step_grid(trace)
    answered = timed_answers(trace, profile)
    steps_of = [_step_of(grid, e.onset_t) for e in answered]
    truth = [bisect.bisect_left(grid, trigger.start_s) for trigger in record.triggers]
    far = record.task_type in profile.rs_far_task_types
    delta = profile.rs_far_delta_steps if far else profile.rs_other_delta_steps
    semantic = profile.is_semantic(record.task_type, realstream=True)
    pairs = [
        (
            index,
            JudgeRequest(
                task_type=record.task_type,
                question=record.instruction,
                reference=trigger.answer,
                prediction=episode.text,
                accepted=tuple(trigger.accepted_facts),
                semantic=semantic,
                **profile.exact_rules(),
            ),
        )
        for index, trigger in enumerate(record.triggers)
        for episode, step in zip(answered, steps_of, strict=True)
        if abs(step - truth[index]) <= delta
    ]
    return _result(far, delta, len(grid), answered, steps_of, truth, pairs, [], profile)


def evaluate_realstream_qa(
    trace: SessionTrace, record: QARecord, profile: ScoringProfile
) -> RealstreamResult:
    """A QA record under the frame-level protocol: the question's step is the target."""
    asked = trace.task_ns is not None and trace.task_position_t is not None
    grid = trace.step_t + ([trace.task_position_t] if asked else [])
    answered = timed_answers(trace, profile)
    steps_of = [_step_of(grid, e.onset_t) for e in answered]
    truth = [len(grid) - 1] if asked else []
    far = record.task_type in profile.rs_far_task_types
    delta = profile.rs_far_delta_steps if far else profile.rs_other_delta_steps
    parse = OPTION_PARSERS[profile.option_parser]
    labels, gold = option_labels(record.options), gold_label(record.answer)
    fixed = [
        (0, float(parse(episode.text, labels) == gold))
        for episode, step in zip(answered, steps_of, strict=True)
        if truth and abs(step - truth[0]) <= delta
    ]
    return _result(far, delta, len(grid), answered, steps_of, truth, [], fixed, profile)


def _result(
    far: bool,
    delta: int,
    steps: int,
    answered: list[Episode],
    steps_of: list[int],
    truth: list[int],
    pairs: list[tuple[int, JudgeRequest]],
    fixed: list[tuple[int, float]],
    profile: ScoringProfile,
) -> RealstreamResult:
    """The penalty terms of Eq. 3-4, shared by proactive and QA records."""
    early = far and bool(truth) and any(step < min(truth) - delta for step in steps_of)
    repeated = not far and _repeats(answered, steps_of, profile)
    if far:
        multiplier = verbosity_multiplier(len(set(steps_of)), steps, profile)
    else:
        multiplier = profile.rs_repetition_multiplier if repeated else 1.0
    reported = [e.output_tokens for e in answered if e.output_tokens is not None]
    return RealstreamResult(
        far=far,
        delta=delta,
        steps=steps,
        response_steps=steps_of,
        truth_steps=truth,
        pairs=pairs,
        fixed=fixed,
        early=early,
        repeated=repeated,
        multiplier=multiplier,
        early_penalty=profile.rs_early_penalty if early else 0.0,
        tokens=sum(reported),
        token_turns=len(reported),
    )


def _repeats(answered: list[Episode], steps_of: list[int], profile: ScoringProfile) -> bool:
    """The same (normalised) answer on two consecutive steps."""
    by_step: dict[int, set[str]] = {}
    for episode, step in zip(answered, steps_of, strict=True):
        by_step.setdefault(step, set()).add(profile.normalise(episode.text))
    return any(by_step[step] & by_step.get(step + 1, set()) for step in by_step)


class RealstreamFamily(MetricFamily[RealstreamResult]):
    name = "realstream"
    member = "rs_n"
    constants = (
        "rs_far_task_types",
        "rs_far_delta_steps",
        "rs_other_delta_steps",
        "rs_early_penalty",
        "rs_rate_threshold",
        "rs_rate_bins",
        "rs_rate_slope",
        "rs_multiplier_floor",
        "rs_repetition_multiplier",
        "rs_floor_score_at_zero",
        "rs_semantic_task_types",
        "judge_rules",
        "option_parser",
        "normalisation",
        "silence_tokens",
        "exact_match_accepted_facts",
    )
    judged = True
    headline = "score"

    def evaluate(
        self, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> RealstreamResult | None:
        """Every proactive record; a QA record only in a frame-level run (its question's
        step is then a RealStreamEval turn)."""
        record, trace = evaluation.record, evaluation.trace
        if isinstance(record, ProactiveRecord):
            return evaluate_realstream(trace, record, profile)
        return evaluate_realstream_qa(trace, record, profile) if evaluation.frame_level else None

    def requests(self, result: RealstreamResult) -> list[JudgeRequest]:
        return result.requests()

    def apply(
        self,
        result: RealstreamResult,
        scores: Mapping[JudgeRequest, float],
        profile: ScoringProfile,
    ) -> None:
        result.apply(scores, profile)

    def fields(
        self, result: RealstreamResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> Fields:
        return {
            "rs_n": 1.0,
            "rs_score": result.score,
            "rs_quality": result.quality,
            "rs_rate": result.answer_rate,
            "rs_multiplier": result.multiplier,
            "rs_early": float(result.early),
            "rs_tokens": float(result.tokens),
            "rs_token_turns": float(result.token_turns),
        }

    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        score = Mean("rs_score", "rs_n", "records", scale=100.0)
        tokens = Ratio("rs_tokens", "rs_token_turns", "response turns")
        return {
            "score": score,
            "quality": Mean("rs_quality", "rs_n", "records"),
            "answer_rate": Mean("rs_rate", "rs_n", "records"),
            "multiplier": Mean("rs_multiplier", "rs_n", "records"),
            "early_penalty_rate": Mean("rs_early", "rs_n", "records"),
            "tokens_per_response_turn": tokens,
            "per_token_score": Combined(score, tokens, "/", like=score),
        }

    def details(
        self, result: RealstreamResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> dict[str, Any]:
        return {
            "far": result.far,
            "delta_steps": result.delta,
            "steps": result.steps,
            "response_steps": sorted(set(result.response_steps)),
            "answer_rate": result.answer_rate,
            "truth_steps": result.truth_steps,
            "best_judgement": result.best,
            "quality": result.quality,
            "multiplier": result.multiplier,
            "early_penalty": result.early_penalty,
            "repeated": result.repeated,
            "score": result.score,
            "output_tokens": result.tokens,
            "token_turns": result.token_turns,
        }


REALSTREAM = RealstreamFamily()
