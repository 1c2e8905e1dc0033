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

from core_server.config import PROFILES as PROTOCOL_PROFILES
from scorer.errors import ScoreError

FAMILIES = ("qa", "proactive", "workload", "realstream", "readiness", "ovo", "streamingbench")
JUDGED_FAMILIES = ("proactive", "realstream", "readiness")
# Fields of a profile that are not scoring constants.
_BOOKKEEPING = ("name", "version", "description", "protocols", "overrides")
ALL_TASK_TYPES = "*"


class ProfileError(ScoreError):
    """An unknown profile name or an invalid override."""


@dataclass(frozen=True)
class ScoringProfile:
    name: str
    version: str
    description: str
    families: tuple[str, ...]
    protocols: tuple[str, ...]  # protocol profiles whose runs it is meant for

    # TRACE QA (metrics spec section 2).
    option_parser: str = "recoverable"  # "strict" | "recoverable"

    # TRACE proactive (section 3).
    tolerance_s: float = 5.0  # point-trigger window length Δ
    silence_tokens: tuple[str, ...] = ("wait", "silent", "<silent>")
    # Task types whose content the semantic judge scores; the rest use exact match.
    semantic_task_types: tuple[str, ...] = ("SSR", "CRR")

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

    # StreamingBench's own proactive scoring: a hit within ±this of the ground-truth time.
    sb_hit_tolerance_s: float = 2.0

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

    @property
    def judges_content(self) -> bool:
        """Whether a family of this profile needs content judgements (TRACE proactive
        windows, through them readiness, and RealStreamEval); the source benchmarks' own
        scorings match text by rule."""
        return any(family in JUDGED_FAMILIES for family in self.families)

    def is_semantic(self, task_type: str, realstream: bool = False) -> bool:
        chosen = self.rs_semantic_task_types if realstream else self.semantic_task_types
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
        if self.option_parser not in ("strict", "recoverable"):
            raise ProfileError(
                f"option_parser must be strict or recoverable, got {self.option_parser!r}"
            )
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
        unknown = set(self.families) - set(FAMILIES)
        if unknown:
            raise ProfileError(f"unknown metric families {sorted(unknown)}")


_TRACE_FAMILIES = ("qa", "proactive", "workload")
TRACE_PROTOCOLS = ("trace", "trace-full-prefix", "trace-autonomous")

PROFILES: dict[str, ScoringProfile] = {
    profile.name: profile
    for profile in (
        ScoringProfile(
            name="trace-paper-v1",
            version="1",
            description=(
                "TRACE as published: recoverable option parser, 5 s windows, semantic judge "
                "for SSR and CRR, exact match elsewhere"
            ),
            families=_TRACE_FAMILIES,
            protocols=TRACE_PROTOCOLS,
        ),
        ScoringProfile(
            name="trace-strict",
            version="1",
            description="TRACE with the strict option parser (bare labels only)",
            families=_TRACE_FAMILIES,
            protocols=TRACE_PROTOCOLS,
            option_parser="strict",
        ),
        ScoringProfile(
            name="realstream",
            version="1",
            description=(
                "RealStreamEval score (EvoStreaming Eq. 3-4) on proactive records, and on QA "
                "records of frame-level runs, with the TRACE metrics alongside; every content "
                "judgement by the semantic judge"
            ),
            families=(*_TRACE_FAMILIES, "realstream"),
            protocols=("realstream",),
        ),
        ScoringProfile(
            name="readiness",
            version="1",
            description="Answer Readiness Score (EP, LP, ARS, Acc_e) with the TRACE metrics",
            families=(*_TRACE_FAMILIES, "readiness"),
            protocols=TRACE_PROTOCOLS,
        ),
        ScoringProfile(
            name="ovo-offline",
            version="1",
            description=(
                "OVO-Bench's own offline scoring: gold letter in the response, REC digits "
                "joined equal the count, SSR/CRR yes/no per probe; total = mean of the "
                "category means, each the mean of its task accuracies"
            ),
            families=("ovo", "workload"),
            protocols=("ovo-offline",),
        ),
        ScoringProfile(
            name="streamingbench",
            version="1",
            description=(
                "StreamingBench's own scoring: multiple-choice accuracy (first standalone "
                "option letter), proactive hit within 2 s of the ground-truth time whose "
                "text contains the expected output"
            ),
            families=("streamingbench", "workload"),
            protocols=("streamingbench-polling",),
        ),
    )
}


def is_frame_level(protocol: str | None) -> bool:
    """Whether runs of this protocol profile ask for a decision at every step."""
    known = PROTOCOL_PROFILES.get(protocol or "")
    return known is not None and known.frame_level_steps


def scoring_profile_for(protocol: str) -> str:
    """The scoring profile that, with this protocol profile, reproduces a published
    protocol (trace-paper-v1 for a protocol no profile names)."""
    return next(
        (profile.name for profile in PROFILES.values() if protocol in profile.protocols),
        "trace-paper-v1",
    )


def get_profile(name: str | ScoringProfile) -> ScoringProfile:
    if isinstance(name, ScoringProfile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(
            f"unknown scoring profile {name!r}; known: {', '.join(PROFILES)}"
        ) from None
