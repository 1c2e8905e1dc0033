"""OVO-Bench's offline scoring of one record: its published script's rules (`ovo_rules`
"published", the `ovo-offline` profile) or this project's readings ("extended",
`ovo-extended`). docs/metrics.md lists the differences, with examples.

- Multiple choice: correct when the gold letter occurs anywhere in the response, case
  sensitive ("B" counts in "Because": the source's leniency, kept for comparability).
- Counting (REC probes, whose answer is a whole number): the digit runs of the response,
  joined, equal the count ("1, then 2" reads as 12).
- Yes/no (SSR and CRR probes): the response is exactly "Y" (gold Yes) or "N" (gold No), or
  it contains the gold word as written ("Yes" / "No"; "yes" does not count, as in OVO-Bench).
- A probe of any other answer: the answer occurs in the response.

A QA record is one question; a forward record is its probes, each answered by the last
episode of that probe's own task id after the probe was asked. A question without a closed
episode (a silent decision, a failed or never-run session) scores 0 and stays in the
denominator. Published rules read every closed episode's raw text, silence tokens included
("WAIT" holds the letter A); extended rules count a silence token or empty text as
unanswered too. A proactive record without probes is not scorable here (OVO-Bench asks
forward tasks only as probes): no result.

The family (`OVO`) reports, in percent, the total (mean of the category means, each the mean
of its task accuracies) and each category's mean, with the completion and unanswered rates.
A task's accuracy pools its questions (published: a forward task is correct probes over all
its probes, as OVO-Bench's script appends one score per probe) or averages its records'
scores (extended). The published total is over OVO-Bench's three categories; the extended
one includes `other`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from streameval.core.benchmark.ovo_bench import CATEGORIES, CATEGORY_OF
from streameval.core.benchmark.records import ProactiveRecord, Probe, QARecord
from streameval.events import probe_task_id
from streameval.scorer.episodes import Episode, SessionTrace, prediction
from streameval.scorer.metrics.family import Fields, MetricFamily, RecordEvaluation
from streameval.scorer.metrics.statistic import MacroMean, Ratio, Statistic
from streameval.scorer.parsing import gold_label
from streameval.scorer.profiles import ScoringProfile

OTHER = "other"  # the category of task types OVO-Bench does not have
CATEGORY_NAMES = (*CATEGORIES, OTHER)
# A record's score is aggregated from the field `ovo@{category}/{task type}`.
OVO_FIELD_PREFIX = "ovo@"
# Published rules: a record's questions, the weight of its correct count in that field.
OVO_WEIGHT_PREFIX = "ovo_asked@"
_DIGITS = re.compile(r"\d+")
_SHORT = {"Yes": "Y", "No": "N"}


def category_of(record: QARecord | ProactiveRecord) -> str:
    """The importer's `metadata.category`, else the OVO-Bench category of the task type
    (TRACE keeps OVO-Bench's task names), else `other`."""
    named = record.metadata.get("category")
    if named in CATEGORIES:
        return named
    return CATEGORY_OF.get(record.task_type, OTHER)


def choice_correct(response: str, gold: str) -> bool:
    return gold in response


def count_correct(response: str, count: str) -> bool:
    return "".join(_DIGITS.findall(response)) == count


def yes_no_correct(response: str, gold: str) -> bool:
    return response == _SHORT[gold] or gold in response


def probe_rule(probe: Probe) -> str:
    if probe.answer in _SHORT:
        return "yes_no"
    if probe.answer.isdecimal():
        return "count"
    return "choice" if probe.options else "contains"


def _correct(rule: str, response: str, gold: str) -> bool:
    if rule == "count":
        return count_correct(response, gold)
    if rule == "yes_no":
        return yes_no_correct(response, gold)
    return choice_correct(response, gold)  # "choice" and "contains" alike: a substring


@dataclass(frozen=True, slots=True)
class OvoAnswer:
    task_id: str
    t: float
    rule: str  # choice | count | yes_no | contains
    gold: str
    response: str | None  # None: unanswered
    correct: bool


@dataclass(frozen=True, slots=True)
class OvoResult:
    category: str
    answers: tuple[OvoAnswer, ...]

    @property
    def score(self) -> float:
        return sum(answer.correct for answer in self.answers) / len(self.answers)

    @property
    def unanswered(self) -> int:
        return sum(answer.response is None for answer in self.answers)


def published(profile: ScoringProfile) -> bool:
    return profile.ovo_rules == "published"


def _response(
    episodes: list[Episode], dispatch_ns: int | None, profile: ScoringProfile
) -> str | None:
    """The prediction's raw text; None when there is none (and, under extended rules, when
    it is silence)."""
    _, predicted = prediction(episodes, dispatch_ns)
    if predicted is None:
        return None
    if not published(profile) and not profile.is_answer(predicted.text):
        return None
    return predicted.text


def _answer(task_id: str, t: float, rule: str, gold: str, response: str | None) -> OvoAnswer:
    correct = response is not None and _correct(rule, response, gold)
    return OvoAnswer(task_id, t, rule, gold, response, correct)


def evaluate_ovo(
    trace: SessionTrace, record: QARecord | ProactiveRecord, profile: ScoringProfile
) -> OvoResult | None:
    category = category_of(record)
    if isinstance(record, QARecord):
        response = _response(trace.own_episodes, trace.task_ns, profile)
        gold = gold_label(record.answer)
        answer = _answer(record.record_id, record.question_time_s, "choice", gold, response)
        return OvoResult(category, (answer,))
    if not record.probes:
        return None
    answers = []
    for index, probe in enumerate(record.probes):
        task_id = probe_task_id(record.record_id, index)
        # A probe never asked (its session failed first) has no dispatch and no answer.
        response = _response(trace.episodes_of(task_id), trace.probes.get(task_id), profile)
        rule = probe_rule(probe)
        gold = gold_label(probe.answer) if rule == "choice" else probe.answer
        answers.append(_answer(task_id, probe.t, rule, gold, response))
    return OvoResult(category, tuple(answers))


class OvoFamily(MetricFamily[OvoResult]):
    name = "ovo"
    member = "ovo_n"
    constants = ("ovo_rules", "normalisation", "silence_tokens")
    headline = "total"

    def evaluate(self, evaluation: RecordEvaluation, profile: ScoringProfile) -> OvoResult | None:
        return evaluate_ovo(evaluation.trace, evaluation.record, profile)

    def fields(
        self, result: OvoResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> Fields:
        subgroup = f"{result.category}/{evaluation.record.task_type}"
        fields = {
            "ovo_n": 1.0,
            "ovo_finished": float(evaluation.status == "finished"),
            "ovo_questions": float(len(result.answers)),
            "ovo_unanswered": float(result.unanswered),
        }
        if not published(profile):
            return {**fields, OVO_FIELD_PREFIX + subgroup: result.score}
        correct = float(sum(answer.correct for answer in result.answers))
        return {
            **fields,
            OVO_FIELD_PREFIX + subgroup: correct,
            OVO_WEIGHT_PREFIX + subgroup: float(len(result.answers)),
        }

    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        # OVO-Bench's total is over its own three categories; ours adds `other`.
        if published(profile):
            unit, weights, in_total = "questions", OVO_WEIGHT_PREFIX, tuple(CATEGORIES)
        else:
            unit, weights, in_total = "records", None, CATEGORY_NAMES

        def macro_mean(groups: tuple[str, ...]) -> MacroMean:
            return MacroMean(OVO_FIELD_PREFIX, groups, unit, weights=weights)

        return {
            "total": macro_mean(in_total),
            **{category: macro_mean((category,)) for category in CATEGORY_NAMES},
            "completion_rate": Ratio("ovo_finished", "ovo_n", "records"),
            "unanswered_rate": Ratio("ovo_unanswered", "ovo_questions", "questions"),
        }

    def details(
        self, result: OvoResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> dict[str, Any]:
        answers = [asdict(answer) for answer in result.answers]
        return {"category": result.category, "score": result.score, "answers": answers}


OVO = OvoFamily()
