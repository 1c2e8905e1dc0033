"""TRACE proactive metrics of one record (metrics spec section 3).

Windows: point triggers t_1 < t_2 < ... with tolerance Δ give [t_i, min(t_i + Δ, t_next)),
t_next being the first window start strictly after t_i among all windows of the record; the
last one is [t_n, t_n + Δ). State intervals keep their annotated [start, end).

Assignment, windows in time order, each answered episode used at most once: the first
unused episode with its onset in the window is `in_window`; else the latest unused one with
its onset before the window start is `before_window` (consumed, scores 0); else `no_output`.

TRACE's eventual view, a second assignment of its own: windows in time order, each takes the
first answered episode not yet taken in this view with its onset from the window start up to
the next later window start (a state interval, or the last point window: its own end);
the answer is judged like an in-window one. It reports the eventual accuracy.

An in-window assignment has two delays, each on its own clock: on the runtime clock
(TRACE's) and in video seconds (onset video time minus the window start); the profile says
which are reported.

The family (`PROACTIVE`) reports over windows: in-window and eventual accuracy, miss and
before-window rates, median response delays and redundant responses; over answered
episodes the false alarm rate; over records the completion rate.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streameval.core.benchmark.records import ProactiveRecord, Trigger
from streameval.scorer.episodes import Episode, SessionTrace
from streameval.scorer.judging.judges import JudgeRequest
from streameval.scorer.metrics.family import Fields, MetricFamily, RecordEvaluation
from streameval.scorer.metrics.statistic import Quantile, Ratio, Statistic, Sum
from streameval.scorer.profiles import ScoringProfile

IN_WINDOW, BEFORE_WINDOW, NO_OUTPUT = "in_window", "before_window", "no_output"


@dataclass(frozen=True, slots=True)
class Window:
    trigger: int  # index of the trigger in the record
    trigger_type: str
    start: float
    end: float
    answer: str
    accepted: tuple[str, ...] = ()
    evidence: tuple[float, float] | None = None  # annotated evidence bounds, when given
    eventual_end: float = 0.0  # end of the eventual view: the next later window start

    def contains(self, t: float) -> bool:
        return self.start <= t < self.end


def build_windows(triggers: Sequence[Trigger], tolerance_s: float) -> list[Window]:
    starts = sorted({trigger.start_s for trigger in triggers})
    windows = []
    for index, trigger in enumerate(triggers):
        start = trigger.start_s
        later = bisect.bisect_right(starts, start)
        if trigger.is_state:
            end = trigger.interval_end_s if trigger.interval_end_s is not None else start
            eventual_end = end
        else:
            end = start + tolerance_s
            eventual_end = end
            if later < len(starts):
                end = min(end, starts[later])
                eventual_end = starts[later]
        evidence = None
        if trigger.evidence_start_s is not None and trigger.evidence_end_s is not None:
            evidence = (trigger.evidence_start_s, trigger.evidence_end_s)
        windows.append(
            Window(
                index,
                trigger.trigger_type,
                start,
                end,
                trigger.answer,
                tuple(trigger.accepted_facts),
                evidence,
                eventual_end,
            )
        )
    windows.sort(key=lambda window: (window.start, window.end, window.trigger))
    return windows


def assign(
    windows: Sequence[Window], onsets: Sequence[float | None]
) -> list[tuple[str, int | None]]:
    """(assignment, episode index) per window; `onsets` are the answered episodes' onsets."""
    order = sorted(
        (index for index, onset in enumerate(onsets) if onset is not None),
        key=lambda index: (onsets[index], index),
    )
    used: set[int] = set()
    result: list[tuple[str, int | None]] = []
    for window in windows:
        inside = next((i for i in order if i not in used and window.contains(onsets[i])), None)
        if inside is not None:
            used.add(inside)
            result.append((IN_WINDOW, inside))
            continue
        before = [i for i in order if i not in used and onsets[i] < window.start]
        if before:
            used.add(before[-1])
            result.append((BEFORE_WINDOW, before[-1]))
        else:
            result.append((NO_OUTPUT, None))
    return result


def assign_eventual(windows: Sequence[Window], onsets: Sequence[float | None]) -> list[int | None]:
    """TRACE's eventual view: the episode index each window takes, or None."""
    order = sorted(
        (index for index, onset in enumerate(onsets) if onset is not None),
        key=lambda index: (onsets[index], index),
    )
    used: set[int] = set()
    result: list[int | None] = []
    for window in windows:
        taken = next(
            (i for i in order if i not in used and window.start <= onsets[i] < window.eventual_end),
            None,
        )
        if taken is not None:
            used.add(taken)
        result.append(taken)
    return result


@dataclass(slots=True)
class WindowOutcome:
    window: Window
    assignment: str
    episode: int | None  # index into ProactiveResult.answered
    request: JudgeRequest | None = None  # content judgement of an in-window answer
    score: float = 0.0
    delay_runtime_s: float | None = None
    delay_video_s: float | None = None
    onsets_inside: int = 0  # answered episodes with their onset in the window
    eventual_episode: int | None = None  # the eventual view's episode
    eventual_request: JudgeRequest | None = None
    eventual_score: float = 0.0


@dataclass(slots=True)
class ProactiveResult:
    windows: list[WindowOutcome]
    answered: list[Episode]  # answered episodes, in the order they began
    false_alarm: list[bool]  # per answered episode
    tail: list[bool]  # per answered episode: outside every window, after the last one began
    unanswered_episodes: int = 0  # closed episodes that were empty or a silence token

    @property
    def score_sum(self) -> float:
        return sum(outcome.score for outcome in self.windows)

    def count(self, assignment: str) -> int:
        return sum(1 for outcome in self.windows if outcome.assignment == assignment)

    @property
    def eventual_score_sum(self) -> float:
        return sum(outcome.eventual_score for outcome in self.windows)

    @property
    def redundant(self) -> int:
        return sum(max(0, outcome.onsets_inside - 1) for outcome in self.windows)

    def requests(self) -> list[JudgeRequest]:
        strict = [outcome.request for outcome in self.windows]
        eventual = [outcome.eventual_request for outcome in self.windows]
        return [request for request in strict + eventual if request is not None]

    def apply(self, scores: Mapping[JudgeRequest, float]) -> None:
        for outcome in self.windows:
            if outcome.request is not None:
                outcome.score = scores[outcome.request]
            if outcome.eventual_request is not None:
                outcome.eventual_score = scores[outcome.eventual_request]


def evaluate_proactive(
    trace: SessionTrace, record: ProactiveRecord, profile: ScoringProfile
) -> ProactiveResult:
    windows = build_windows(record.triggers, profile.tolerance_s)
    # An episode cut off by a failure (never closed) is not an answer; answers to probe
    # questions are not responses to the proactive task.
    episodes = [episode for episode in trace.own_episodes if episode.closed]
    answered = [e for e in episodes if profile.is_answer(e.text)]
    onsets = [episode.onset_t for episode in answered]
    semantic = profile.is_semantic(record.task_type)

    def request(window: Window, episode: Episode, primary: bool) -> JudgeRequest:
        return JudgeRequest(
            task_type=record.task_type,
            question=record.instruction,
            reference=window.answer,
            prediction=episode.text,
            accepted=window.accepted,
            semantic=semantic,
            primary=primary,
            **profile.exact_rules(),
        )

    outcomes = []
    eventual = assign_eventual(windows, onsets)
    for window, (assignment, index), later in zip(
        windows, assign(windows, onsets), eventual, strict=True
    ):
        outcome = WindowOutcome(window, assignment, index, eventual_episode=later)
        outcome.onsets_inside = sum(1 for t in onsets if t is not None and window.contains(t))
        if later is not None:
            outcome.eventual_request = request(window, answered[later], primary=False)
        if assignment == IN_WINDOW:
            episode = answered[index]
            outcome.request = request(window, episode, primary=True)
            outcome.delay_runtime_s = runtime_delay(trace, window, episode)
            if episode.onset_t is not None:
                outcome.delay_video_s = episode.onset_t - window.start
        outcomes.append(outcome)
    return ProactiveResult(
        windows=outcomes,
        answered=answered,
        false_alarm=[_outside(t, windows) and _later_start(t, windows) for t in onsets],
        tail=[_outside(t, windows) and not _later_start(t, windows) for t in onsets],
        unanswered_episodes=len(episodes) - len(answered),
    )


# A false alarm is an answered episode outside every window of its record that began before
# some later window start; one after the last window began ("tail") is not a false alarm.
def _outside(onset: float | None, windows: Sequence[Window]) -> bool:
    return onset is not None and not any(window.contains(onset) for window in windows)


def _later_start(onset: float | None, windows: Sequence[Window]) -> bool:
    return onset is not None and any(window.start > onset for window in windows)


def runtime_delay(trace: SessionTrace, window: Window, episode: Episode) -> float | None:
    """TRACE's response delay, under both pacings, on the Core's runtime clock: the first
    token's arrival minus the send time of the first delivered frame at or after the window
    start. No frame there, or a first token before it: no observation. Under logical pacing
    this measures processing time, not video time."""
    position = bisect.bisect_left(trace.frame_t, window.start)
    if position == len(trace.frame_t) or episode.onset_ns < trace.frame_ns[position]:
        return None
    return (episode.onset_ns - trace.frame_ns[position]) / 1e9


DELAY_CLOCKS = ("runtime", "video")


def delay_metric(clock: str) -> str:
    """A response delay's name says its clock: two clocks never share one name."""
    return f"median_response_delay_{clock}_s"


class ProactiveFamily(MetricFamily[ProactiveResult]):
    name = "proactive"
    member = "pr_n"
    constants = (
        "tolerance_s",
        "normalisation",
        "silence_tokens",
        "semantic_task_types",
        "judge_rules",
        "exact_match_accepted_facts",
        "response_delay_clocks",
    )
    judged = True
    headline = "in_window_accuracy"
    timing = frozenset(delay_metric(clock) for clock in DELAY_CLOCKS)

    def evaluate(
        self, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> ProactiveResult | None:
        record = evaluation.record
        if not isinstance(record, ProactiveRecord):
            return None
        return evaluate_proactive(evaluation.trace, record, profile)

    def requests(self, result: ProactiveResult) -> list[JudgeRequest]:
        return result.requests()

    def apply(
        self,
        result: ProactiveResult,
        scores: Mapping[JudgeRequest, float],
        profile: ScoringProfile,
    ) -> None:
        result.apply(scores)

    def fields(
        self, result: ProactiveResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> Fields:
        windows = len(result.windows)
        in_window = result.count(IN_WINDOW)
        fields: Fields = {
            "pr_n": 1.0,
            "pr_finished": float(evaluation.status == "finished"),
            "pr_windows": float(windows),
            "pr_score": result.score_sum,
            "pr_eventual_score": result.eventual_score_sum,
            "pr_in_window": float(in_window),
            "pr_missed": float(windows - in_window),
            "pr_before": float(result.count(BEFORE_WINDOW)),
            "pr_answered": float(len(result.answered)),
            "pr_false_alarms": float(sum(result.false_alarm)),
            "pr_redundant": float(result.redundant),
        }
        for clock in profile.response_delay_clocks:
            delays = (getattr(outcome, f"delay_{clock}_s") for outcome in result.windows)
            fields[f"pr_delays_{clock}"] = [delay for delay in delays if delay is not None]
        return fields

    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        delays = {
            delay_metric(clock): Quantile(
                f"pr_delays_{clock}", 0.5, "pr_in_window", "in-window windows"
            )
            for clock in DELAY_CLOCKS
            if clock in profile.response_delay_clocks
        }
        return {
            "in_window_accuracy": Ratio("pr_score", "pr_windows", "windows"),
            "eventual_accuracy": Ratio("pr_eventual_score", "pr_windows", "windows"),
            "miss_rate": Ratio("pr_missed", "pr_windows", "windows"),
            "before_window_rate": Ratio("pr_before", "pr_windows", "windows"),
            "false_alarm_rate": Ratio("pr_false_alarms", "pr_answered", "answered episodes"),
            **delays,
            "redundant_responses": Sum("pr_redundant", "pr_windows", "windows"),
            "completion_rate": Ratio("pr_finished", "pr_n", "records"),
        }

    def details(
        self, result: ProactiveResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> dict[str, Any]:
        windows = []
        for outcome in result.windows:
            episode = None if outcome.episode is None else result.answered[outcome.episode]
            later = outcome.eventual_episode
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
                    "eventual_end": outcome.window.eventual_end,
                    "eventual_response_id": (
                        None if later is None else result.answered[later].response_id
                    ),
                    "eventual_score": outcome.eventual_score,
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


PROACTIVE = ProactiveFamily()
