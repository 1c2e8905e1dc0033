"""What each reported metric means: its unit, its scale and one line of meaning.

The one source of metric help: `streameval score --explain`, `streameval compare --explain`,
the console tables' unit column and the dashboard's hover text all read it.

    >>> explain("latency_s_p95").unit
    's'
    >>> explain("readiness.early_penalty").scale
    '0-1, 1 = no penalty (higher is better)'

A metric is named as in the score output; a name that several families report with
different meanings (`accuracy`) is told apart by its family: `family.metric`. A bare name
gets the first family's help in registry order (qa before readiness and streamingbench).
The meanings follow docs/metrics.md, where every metric is defined in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Better = Literal["higher", "lower"]  # the way a metric improves


@dataclass(frozen=True)
class MetricHelp:
    name: str  # the metric name as in score output, e.g. "latency_s_p50"
    unit: str  # "s", "%", "fraction (0-1)", "count", ...; "" for a plain number
    scale: str  # e.g. "0-1, higher is better", "seconds, lower is better"
    meaning: str  # one line

    @property
    def better(self) -> Better | None:
        """Which way the value improves (higher or lower), as its scale says; None where
        neither is better (a count of work done, a share of records described)."""
        directions: tuple[Better, ...] = ("higher", "lower")
        for direction in directions:
            if f"{direction} is better" in self.scale:
                return direction
        return None


FRACTION = "fraction (0-1)"
PERCENT = "%"
SECONDS = "s"
COUNT = "count"
TOKENS = "tokens"

_HIGHER = "0-1, higher is better"
_LOWER = "0-1, lower is better"
_PERCENT_HIGHER = "0-100, higher is better"

_COMPLETION = MetricHelp(
    "completion_rate", FRACTION, _HIGHER, "records whose session finished / records"
)

# The quantile suffixes of the QA timings (ttft_s_p50, latency_s_max, ...).
_QUANTILES = {"p50": "median", "p95": "95th percentile", "max": "maximum"}
_TIMINGS = {
    "ttft_s": "time to first token, from the question's arrival to the answer's first token",
    "latency_s": "response latency, from the question's arrival to the final answer",
}


def _timings() -> list[MetricHelp]:
    return [
        MetricHelp(
            f"{stem}_{suffix}",
            SECONDS,
            "seconds, lower is better",
            f"{what}: the {quantile} over the records where it was observed",
        )
        for stem, what in _TIMINGS.items()
        for suffix, quantile in _QUANTILES.items()
    ]


def _sums(unit: str, scale: str, meanings: dict[str, str]) -> list[MetricHelp]:
    return [MetricHelp(name, unit, scale, meaning) for name, meaning in meanings.items()]


_SUMMED = "summed over records"

_FAMILIES: dict[str, list[MetricHelp]] = {
    "qa": [
        MetricHelp(
            "accuracy",
            FRACTION,
            _HIGHER,
            "QA records answered with the right option / QA records (failed, unanswered "
            "and unparsable ones count as wrong)",
        ),
        _COMPLETION,
        MetricHelp(
            "invalid_output_rate",
            FRACTION,
            _LOWER,
            "QA records with no legal option recovered (no answer, silence, unparsable, "
            "failed, not run) / QA records",
        ),
        *_timings(),
    ],
    "proactive": [
        MetricHelp(
            "in_window_accuracy",
            FRACTION,
            _HIGHER,
            "content scores of the answers given inside their window / windows (a window "
            "without one scores 0)",
        ),
        MetricHelp(
            "eventual_accuracy",
            FRACTION,
            _HIGHER,
            "TRACE's eventual view: content scores of the first answer from each window's start "
            "up to the next window's start, each answer taken once / windows",
        ),
        MetricHelp(
            "miss_rate",
            FRACTION,
            _LOWER,
            "windows without an answer inside them / windows (an answer before the window "
            "is a miss, a wrong one inside it is not)",
        ),
        MetricHelp(
            "before_window_rate",
            FRACTION,
            _LOWER,
            "windows whose answer came before the window opened / windows (part of the misses)",
        ),
        MetricHelp(
            "false_alarm_rate",
            FRACTION,
            _LOWER,
            "answers outside every window and before a later window / answered episodes",
        ),
        MetricHelp(
            "median_response_delay_runtime_s",
            SECONDS,
            "seconds on the Core's clock, lower is better",
            "median over in-window answers of first token minus the send time of the "
            "window's first frame (under logical pacing: processing time)",
        ),
        MetricHelp(
            "median_response_delay_video_s",
            SECONDS,
            "video seconds, lower is better",
            "median over in-window answers of the answer's onset video time minus the window start",
        ),
        MetricHelp(
            "redundant_responses",
            COUNT,
            "answers, lower is better",
            "answers inside a window beyond its first, summed over windows",
        ),
        _COMPLETION,
    ],
    "workload": [
        *_sums(
            COUNT,
            _SUMMED,
            {
                "submitted_images": "image occurrences submitted to the model, replays included",
                "unique_submitted_frames": "distinct frames submitted to the model",
                "replayed_occurrences": "submitted images - unique submitted frames: frames "
                "submitted again (history replays)",
                "delivered_frames": "frames the Core sent to the adapter",
                "dropped_frames": "delivered frames the model never took as input "
                "(distinct delivered - unique submitted: a duplicated frame counts once)",
                "core_dropped_frames": "frames the Core skipped while lagging behind the wall "
                "clock (wall-clock pacing only)",
                "evicted_frames": "frames a native adapter removed from its state to bound "
                "its memory",
                "prefix_shared_images": "images of model calls after a session's first that "
                "the previous call had at the same place at its prompt's head",
                "following_images": "images of the model calls after a session's first",
            },
        ),
        MetricHelp(
            "prefix_share",
            FRACTION,
            "0-1; higher: more of each prompt's images a prefix cache can reuse",
            "prefix-shared images / following images: the share of a call's images that "
            "the session's previous call had at the head of its prompt",
        ),
        *_sums(
            TOKENS,
            _SUMMED,
            {
                "output_tokens": "output tokens of the answers",
                "input_tokens": "input tokens of every model call, as the adapter reported them",
                "reprefill_tokens": "tokens the model recomputed to compact its state after "
                "evictions",
                "audio_tokens": "audio tokens of the model calls, as the adapter reported "
                "them (records with sound)",
            },
        ),
        *_sums(
            SECONDS,
            _SUMMED,
            {
                "audio_streamed_s": "seconds of sound the Core streamed to the adapter "
                "(samples / sample rate; records with sound)",
                "audio_submitted_s": "seconds of sound the model calls took in, as the "
                "adapter reported them (records with sound)",
            },
        ),
        *_sums(
            COUNT,
            _SUMMED,
            {
                "audio_chunks": "audio chunks the Core streamed to the adapter",
                "silent_audio_chunks": "streamed audio chunks of a video without sound "
                "(zeros standing in for it)",
            },
        ),
    ],
    "realstream": [
        MetricHelp(
            "score",
            PERCENT,
            "percent, higher is better; can be negative",
            "RealStreamEval: mean over records of S = quality x M - P_early (EvoStreaming Eq. 3)",
        ),
        MetricHelp(
            "quality",
            FRACTION,
            _HIGHER,
            "mean over records of the best judge score of an answer within δ steps of "
            "each ground-truth step",
        ),
        MetricHelp(
            "answer_rate",
            FRACTION,
            "0-1, answering often lowers the multiplier",
            "mean over records of the share of steps with an answer (R)",
        ),
        MetricHelp(
            "multiplier",
            "",
            "0.2-1, 1 = no reduction",
            "mean verbosity or repetition multiplier M (EvoStreaming Eq. 4)",
        ),
        MetricHelp(
            "early_penalty_rate",
            FRACTION,
            _LOWER,
            "records penalised (P_early) for answering before the first ground-truth step "
            "/ records",
        ),
        MetricHelp(
            "tokens_per_response_turn",
            TOKENS,
            "tokens per answer",
            "mean output tokens per answered episode that reported its count",
        ),
        MetricHelp(
            "per_token_score",
            "% per token",
            "higher is better",
            "score / tokens per response turn (η)",
        ),
    ],
    "readiness": [
        MetricHelp(
            "evidence_coverage",
            FRACTION,
            "0-1, the share readiness describes",
            "records with an evidence window (the readiness population) / records",
        ),
        MetricHelp(
            "ars",
            FRACTION,
            _HIGHER,
            "Answer Readiness Score: mean over records of EP x LP; 1 = answered between "
            "the evidence's start and end",
        ),
        MetricHelp(
            "early_penalty",
            FRACTION,
            "0-1, 1 = no penalty (higher is better)",
            "EP: 1 for an answer at or after the evidence starts, towards 0 the earlier "
            "before it (mean over records)",
        ),
        MetricHelp(
            "late_penalty",
            FRACTION,
            "0-1, 1 = no penalty (higher is better)",
            "LP: 1 for an answer until the evidence ends, then falling linearly to 0 "
            "(mean over records)",
        ),
        MetricHelp(
            "accuracy",
            FRACTION,
            _HIGHER,
            "(right QA answers + proactive content scores) / (QA records + windows), over "
            "the readiness population",
        ),
        MetricHelp("acc_e", FRACTION, _HIGHER, "accuracy x ARS: right, and given in time"),
    ],
    "ovo": [
        MetricHelp(
            "backward",
            PERCENT,
            _PERCENT_HIGHER,
            "OVO-Bench backward tracing: the mean of its task accuracies",
        ),
        MetricHelp(
            "realtime",
            PERCENT,
            _PERCENT_HIGHER,
            "OVO-Bench real-time perception: the mean of its task accuracies",
        ),
        MetricHelp(
            "forward",
            PERCENT,
            _PERCENT_HIGHER,
            "OVO-Bench forward active responding (probe answers): the mean of its task accuracies",
        ),
        MetricHelp(
            "other",
            PERCENT,
            _PERCENT_HIGHER,
            "task types OVO-Bench does not have: the mean of their task accuracies",
        ),
        MetricHelp(
            "total",
            PERCENT,
            _PERCENT_HIGHER,
            "OVO-Bench's overall score: the mean of the category means present (under "
            "ovo-offline OVO-Bench's three only, as its script; ovo-extended adds other)",
        ),
        _COMPLETION,
        MetricHelp(
            "unanswered_rate",
            FRACTION,
            _LOWER,
            "questions without an answer / questions (each probe is a question)",
        ),
    ],
    "streamingbench": [
        MetricHelp(
            "accuracy",
            PERCENT,
            _PERCENT_HIGHER,
            "StreamingBench's pooled accuracy: (right QA answers + proactive hits) / "
            "(counted questions + targets)",
        ),
        MetricHelp(
            "qa_accuracy",
            PERCENT,
            _PERCENT_HIGHER,
            "multiple-choice questions answered right / counted questions (under "
            "`streamingbench`, a question with an empty answer or none is not counted)",
        ),
        MetricHelp(
            "proactive_accuracy",
            PERCENT,
            _PERCENT_HIGHER,
            "targets hit (first answer within the hit tolerance, 2 s by default, containing "
            "the expected output) / targets: StreamingBench's answer accuracy",
        ),
        MetricHelp(
            "proactive_time_accuracy",
            PERCENT,
            _PERCENT_HIGHER,
            "targets whose first answer lies within the hit tolerance, whatever it says / "
            "targets: StreamingBench's time accuracy",
        ),
        MetricHelp(
            "excluded_answers",
            COUNT,
            "questions, lower is better",
            "questions with an empty answer or none, left out of the accuracy denominators "
            "as StreamingBench's count.py leaves them out (`streamingbench` only)",
        ),
        _COMPLETION,
    ],
}

# Numbers of a run that belong to no metric family: a robustness run's negative streams
# (scorer/metrics/robustness.py). Their per-variant metrics are the families' own.
_RUN_LEVEL: dict[str, list[MetricHelp]] = {
    "negative_streams": [
        MetricHelp(
            "false_alarms_per_hour",
            "per hour",
            "alarms per video hour, lower is better (0 = never spoke)",
            "answered episodes that began after the instruction on streams with no event / "
            "video hours watched after the instruction, over the negative-stream sessions",
        ),
        MetricHelp(
            "false_alarms",
            COUNT,
            "answers, lower is better",
            "answered episodes (closed, not a silence token) that began after the "
            "instruction on a negative stream, summed over sessions",
        ),
        MetricHelp(
            "hours",
            "h",
            "video hours",
            "video time watched under the instruction: the last delivered frame's time "
            "minus the instruction's, summed over negative-stream sessions",
        ),
        MetricHelp(
            "sessions",
            COUNT,
            "sessions",
            "negative-stream sessions that ran (finished or failed)",
        ),
    ],
}

# The columns every metric table shows beside the value.
COLUMNS: list[MetricHelp] = [
    MetricHelp(
        "95% CI",
        "",
        "same unit as the value",
        "bootstrap interval clustered by video (none where the value draws on fewer than two "
        "videos, or for a maximum)",
    ),
    MetricHelp(
        "coverage",
        "",
        "observed/population",
        "units with an observed value / units in the metric's population (records, "
        "windows, ...); a missing value is never 0, so a sum with coverage below 1 is a "
        "lower bound",
    ),
]


def family_glossary() -> dict[str, list[MetricHelp]]:
    """Every metric's help, by family (registry order of scorer/metrics/registry.py)."""
    return {family: list(helps) for family, helps in _FAMILIES.items()}


def run_level_glossary() -> dict[str, list[MetricHelp]]:
    """The help of the numbers that belong to no family, by the entry that reports them."""
    return {entry: list(helps) for entry, helps in _RUN_LEVEL.items()}


def glossary() -> list[MetricHelp]:
    """Every metric's help once; a name with different meanings in different families
    (`accuracy`) appears once per meaning."""
    seen: list[MetricHelp] = []
    for helps in _FAMILIES.values():
        seen += [help for help in helps if help not in seen]
    return seen


def explain(name: str) -> MetricHelp | None:
    """The help of a metric named as in score output (`latency_s_p50`), or qualified by its
    family (`streamingbench.accuracy`); None for an unknown name."""
    family, dot, metric = name.rpartition(".")
    known = _FAMILIES | _RUN_LEVEL
    if dot and family not in known:
        return None
    families = [family] if dot else list(known)
    for candidate in families:
        for help in known[candidate]:
            if help.name == metric:
                return help
    return None
