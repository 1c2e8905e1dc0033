"""Versioned scoring profiles: every constant the scorer uses, named and recorded.

A profile is the complete set of constants a score depends on; its name, version and every
constant are stored with the results, so two numbers are comparable only when their profiles
agree. `with_overrides` derives a variant (e.g. tolerance 10 s) that records what changed.

Each profile also names the protocol profiles (core_server/config.py) whose runs it is
meant for: together they reproduce a source's published protocol. Scoring a run made under
another protocol still works, and the results say so in a note.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from streameval.scorer.errors import ScoreError
from streameval.scorer.parsing import is_answer, normalise, normalise_extended

# Fields of a profile that are not scoring constants.
_BOOKKEEPING = ("name", "version", "description", "protocols", "overrides")
ALL_TASK_TYPES = "*"


# Constants that take one (or, for a tuple, some) of a fixed set of values.
_CHOICES = {
    "option_parser": ("strict", "recoverable", "extended"),
    "normalisation": ("trace", "extended"),
    "response_delay_clocks": ("runtime", "video"),
    "latency_population": ("responded", "records"),
    "sb_rules": ("streamingbench", "extended"),
    "ovo_rules": ("published", "extended"),
    "judge_rules": ("trace", "extended"),
}


class ProfileError(ScoreError):
    """An unknown profile name or an invalid override."""


@dataclass(frozen=True)
class ScoringProfile:
    name: str
    version: str
    description: str
    # The metric families it reports, by name. scorer/metrics/registry.py resolves the names:
    # it imports the families, whose modules import this one, so this one names them only.
    families: tuple[str, ...]
    protocols: tuple[str, ...]  # protocol profiles whose runs it is meant for

    # TRACE QA and proactive (metrics spec sections 2-3). The defaults are the rules of
    # TRACE's public scorer; `trace-extended` holds this project's own readings.
    option_parser: str = "recoverable"  # strict | recoverable (TRACE's) | extended (ours)
    # How answers are normalised for the silence test and exact matching: "trace", or
    # "extended" (ours: leading role lines dropped, an unclosed <think> swallows the rest,
    # and trailing "." / "!" ignored by the silence test, so "Silent." is silence).
    normalisation: str = "trace"
    silence_tokens: tuple[str, ...] = ("wait",)
    exact_match_accepted_facts: bool = False  # exact judge: the trigger's answer only
    tolerance_s: float = 5.0  # point-trigger window length Δ
    # Task types whose content the semantic judge scores; the rest use exact match. Under
    # TRACE's judge rules a task type matches whatever its case ("ssr" is SSR).
    semantic_task_types: tuple[str, ...] = ("SSR", "CRR")
    # How the LLM judge is asked (scorer/judging/judges.py): "trace" (TRACE's prompt, the
    # normalised answer, one attempt, TRACE's reply parsing) or "extended" (ours).
    judge_rules: str = "trace"
    # Which response delays are reported: "runtime" (TRACE's: first token arrival minus the
    # send time of the first delivered frame at or after the window start) and/or "video"
    # (onset video time minus the window start).
    response_delay_clocks: tuple[str, ...] = ("runtime",)
    # Population of the TTFT/latency coverage: "responded" (TRACE's: QA queries that
    # produced any response or decision) or "records" (every QA record).
    latency_population: str = "responded"

    # Workload: which adapter workload kinds are images submitted to the model.
    # A native adapter submits each frame once into its state (state_commit); a
    # non-native one submits images with each model call, replays included.
    submission_kinds: tuple[str, ...] = ("model_call", "replay", "state_commit")

    # RealStreamEval (section 4, EvoStreaming Eq. 3-4).
    rs_far_task_types: tuple[str, ...] = ("REC", "SSR", "CRR")
    rs_far_delta_steps: int = 1  # δ for forward active responding (project's choice)
    rs_other_delta_steps: int = 0  # δ for real-time perception / backward tracing
    rs_early_penalty: float = 0.1  # P_early for FAR tasks
    rs_rate_threshold: float = 0.4  # M = 1 below this answer rate
    rs_rate_bins: int = 5  # M = max(1 - rs_rate_slope * floor(rs_rate_bins * R), floor)
    rs_rate_slope: float = 0.2
    rs_multiplier_floor: float = 0.2
    rs_repetition_multiplier: float = 0.5  # non-FAR: same answer on consecutive turns
    rs_floor_score_at_zero: bool = False  # the paper's Eq. 3 has no floor
    rs_semantic_task_types: tuple[str, ...] = (ALL_TASK_TYPES,)

    # Answer Readiness Score (section 5); γ_e, γ_l, ε are this project's defaults.
    ars_gamma_e: float = 2.0
    ars_gamma_l: float = 0.5
    ars_epsilon: float = 1e-6

    # OVO-Bench: "published" (its utils/OVOBenchScore.py, rule for rule) or "extended" (ours).
    ovo_rules: str = "published"

    # StreamingBench's own proactive scoring: a hit within ±this of the ground-truth time.
    sb_hit_tolerance_s: float = 2.0
    # StreamingBench's rules: "streamingbench" (its count.py: first character, raw substring,
    # empty answers excluded) or "extended" (ours: docs/metrics.md lists the differences).
    sb_rules: str = "streamingbench"

    # Aggregation (section 7).
    bootstrap_resamples: int = 1000
    bootstrap_seed: int = 0
    ci_level: float = 0.95

    overrides: dict[str, Any] = field(default_factory=dict, compare=False)

    def constants(self) -> dict[str, Any]:
        """Every constant, JSON-ready (tuples as lists), without the bookkeeping fields."""
        return {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in asdict(self).items()
            if key not in _BOOKKEEPING
        }

    def is_answer(self, text: str) -> bool:
        """An answered episode: not empty and not a silence token, after normalisation."""
        extended = self.normalisation == "extended"
        return is_answer(text, self.silence_tokens, ignore_trailing_punctuation=extended)

    def exact_rules(self) -> dict[str, Any]:
        """How this profile's judges read texts (the `JudgeRequest` fields)."""
        return {
            "normalisation": self.normalisation,
            "exact_accepts_facts": self.exact_match_accepted_facts,
            "judge_rules": self.judge_rules,
        }

    def normalise(self, text: str) -> str:
        """The text as exact matching compares it."""
        return normalise_extended(text) if self.normalisation == "extended" else normalise(text)

    def is_semantic(self, task_type: str, realstream: bool = False) -> bool:
        chosen = self.rs_semantic_task_types if realstream else self.semantic_task_types
        if self.judge_rules == "trace":
            # TRACE strips and upper-cases both sides of the test.
            return ALL_TASK_TYPES in chosen or task_type.strip().upper() in {
                kind.strip().upper() for kind in chosen
            }
        return ALL_TASK_TYPES in chosen or task_type in chosen

    def with_overrides(self, **changes: Any) -> ScoringProfile:
        """A variant with some constants changed; the changes are recorded as overrides."""
        known = {f.name for f in fields(self)} - set(_BOOKKEEPING)
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ProfileError(
                f"profile {self.name} has no constant(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        changed = {key: value for key, value in changes.items() if getattr(self, key) != value}
        if not changed:
            return self
        variant = replace(self, **changed, overrides={**self.overrides, **changed})
        variant.validate()
        return variant

    def validate(self) -> None:
        for name, allowed in _CHOICES.items():
            value = getattr(self, name)
            chosen = value if isinstance(value, tuple) else (value,)
            if not chosen or not set(chosen) <= set(allowed):
                raise ProfileError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if not self.tolerance_s > 0:
            raise ProfileError(f"tolerance_s must be positive, got {self.tolerance_s!r}")
        if not self.sb_hit_tolerance_s >= 0:
            raise ProfileError(
                f"sb_hit_tolerance_s must not be negative, got {self.sb_hit_tolerance_s!r}"
            )
        if self.bootstrap_resamples < 0:
            raise ProfileError("bootstrap_resamples must be >= 0")
        if not 0 < self.ci_level < 1:
            raise ProfileError(f"ci_level must lie in (0, 1), got {self.ci_level!r}")


_TRACE_FAMILIES = ("qa", "proactive", "workload")
TRACE_PROTOCOLS = ("trace", "trace-full-prefix", "trace-autonomous")
# This project's own readings where TRACE's public scorer decides otherwise (docs/metrics.md,
# "Where each profile differs from TRACE's public scorer").
EXTENDED_RULES: dict[str, Any] = {
    "option_parser": "extended",
    "normalisation": "extended",
    "silence_tokens": ("wait", "silent", "<silent>"),
    "exact_match_accepted_facts": True,
    "response_delay_clocks": ("runtime", "video"),
    "latency_population": "records",
    "judge_rules": "extended",
}

SCORING_PROFILES: dict[str, ScoringProfile] = {
    profile.name: profile
    for profile in (
        ScoringProfile(
            name="trace-paper-v1",
            version="3",
            description=(
                "TRACE's public scorer, rule for rule: its recoverable option parser, 5 s "
                "windows, semantic judge for SSR and CRR, exact match on the trigger's answer "
                "elsewhere, response delay on the runtime clock"
            ),
            families=_TRACE_FAMILIES,
            protocols=TRACE_PROTOCOLS,
        ),
        ScoringProfile(
            name="trace-strict",
            version="3",
            description="TRACE's public scorer with its strict option parse (one bare label)",
            families=_TRACE_FAMILIES,
            protocols=TRACE_PROTOCOLS,
            option_parser="strict",
        ),
        ScoringProfile(
            name="trace-extended",
            version="1",
            description=(
                "TRACE's metrics under this project's own readings: a wider option parser, "
                "more silence tokens, accepted facts in exact matching, delays on both clocks, "
                "TTFT coverage over every QA record"
            ),
            families=_TRACE_FAMILIES,
            protocols=TRACE_PROTOCOLS,
            **EXTENDED_RULES,
        ),
        ScoringProfile(
            name="realstream",
            version="2",
            description=(
                "RealStreamEval score (EvoStreaming Eq. 3-4) on proactive records, and on QA "
                "records of frame-level runs, with the TRACE metrics alongside; every content "
                "judgement by the semantic judge; the frame-level protocol's explicit "
                "'Silent' is silence"
            ),
            families=(*_TRACE_FAMILIES, "realstream"),
            protocols=("realstream",),
            **EXTENDED_RULES,
        ),
        ScoringProfile(
            name="readiness",
            version="3",
            description=(
                "Answer Readiness Score (EP, LP, ARS, Acc_e) over questions with an evidence "
                "window, with the TRACE metrics as TRACE's public scorer computes them"
            ),
            families=(*_TRACE_FAMILIES, "readiness"),
            protocols=TRACE_PROTOCOLS,
        ),
        ScoringProfile(
            name="ovo-offline",
            version="2",
            description=(
                "OVO-Bench's utils/OVOBenchScore.py, rule for rule: gold letter anywhere in "
                "the raw response (silence tokens too), REC digits joined equal the count, "
                "SSR/CRR yes/no; a forward task's accuracy pooled over all its probes; total "
                "= mean of the three category means, each the mean of its task accuracies"
            ),
            families=("ovo", "workload"),
            protocols=("ovo-offline",),
        ),
        ScoringProfile(
            name="ovo-extended",
            version="1",
            description=(
                "OVO-Bench's metrics under this project's readings: silence tokens and empty "
                "texts unanswered, a forward task the mean of its records' probe accuracies, "
                "tasks without an OVO category in the total"
            ),
            families=("ovo", "workload"),
            protocols=("ovo-offline",),
            ovo_rules="extended",
            **EXTENDED_RULES,
        ),
        ScoringProfile(
            name="streamingbench",
            version="2",
            description=(
                "StreamingBench's count.py, rule for rule: the response's first character "
                "against the gold letter, questions with an empty answer left out (and "
                "counted), a proactive hit within 2 s of the ground-truth time whose raw "
                "answer contains the expected output, case-sensitive"
            ),
            families=("streamingbench", "workload"),
            protocols=("streamingbench-polling",),
            **EXTENDED_RULES,
        ),
        ScoringProfile(
            name="streamingbench-extended",
            version="1",
            description=(
                "StreamingBench's metrics under this project's own readings: the first "
                "standalone option letter, the expected output in the normalised answer, an "
                "empty answer counted wrong"
            ),
            families=("streamingbench", "workload"),
            protocols=("streamingbench-polling",),
            **EXTENDED_RULES,
            sb_rules="extended",
        ),
    )
}


def is_frame_level(protocol: str | None) -> bool:
    """Whether runs of this protocol profile ask for a decision at every step."""
    # Imported here: the command line lists the scoring profiles without the protocol models.
    from streameval.core.config import PROTOCOL_PROFILES

    known = PROTOCOL_PROFILES.get(protocol or "")
    return known is not None and known.frame_level_steps


def scoring_profile_for(protocol: str) -> str:
    """The scoring profile that, with this protocol profile, reproduces a published
    protocol (trace-paper-v1 for a protocol no profile names)."""
    return next(
        (profile.name for profile in SCORING_PROFILES.values() if protocol in profile.protocols),
        "trace-paper-v1",
    )


def get_profile(name: str | ScoringProfile) -> ScoringProfile:
    if isinstance(name, ScoringProfile):
        return name
    try:
        return SCORING_PROFILES[name]
    except KeyError:
        from streameval.core.config import PROTOCOL_PROFILES, unknown_profile

        message = unknown_profile("scoring", name, SCORING_PROFILES, PROTOCOL_PROFILES)
        raise ProfileError(message) from None
