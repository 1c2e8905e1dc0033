"""The perturbations a robustness run may name, and how a name is written (docs/robustness.md).

A perturbation is written `NAME[:KEY=VALUE,...]`; every parameter has a default, and the
label is the spec normalised (every parameter, in order, numbers in their shortest form):

    >>> parse_spec("drop:p=0.20").label
    'drop:p=0.2'
    >>> parse_spec("rate").label
    'rate:factor=0.5,period=30'
    >>> parse_spec("drop:p=2")
    PerturbationError: perturbation drop: p must be in [0, 1], got 2

The transforms themselves are in perturb.py; this module is light enough for the command
line and the run configuration to check a spec without loading the frame pipeline.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streameval.core.errors import CoreError
from streameval.variants import ParamValue, Variant

NEGATIVE = "negative"  # a variant, not a transform: negative_streams.py makes its records
# Far past any video, still a number a schedule can hold.
MAX_SECONDS = 1e6


class PerturbationError(CoreError, ValueError):
    """A perturbation spec or preset that cannot be used (one line, for the command line)."""


@dataclass(frozen=True)
class Param:
    """One parameter: its default and the range it must lie in."""

    name: str
    default: ParamValue
    low: float
    high: float
    low_open: bool = False  # (low, high] rather than [low, high]
    percent: bool = False  # also takes `F%` (a share of the session's span, 0-100)

    def parse(self, perturbation: str, text: str) -> ParamValue:
        percent = self.percent and text.endswith("%")
        try:
            value = float(text.removesuffix("%") if percent else text)
        except ValueError:
            raise PerturbationError(
                f"perturbation {perturbation}: {self.name} must be a number, got {text!r}"
            ) from None
        if percent:
            low, high, low_open = 0.0, 100.0, False
        else:
            low, high, low_open = self.low, self.high, self.low_open
        below = value <= low if low_open else value < low
        if below or not value <= high:  # NaN fails this too
            bounds = f"{'(' if low_open else '['}{number(low)}, {number(high)}]"
            raise PerturbationError(
                f"perturbation {perturbation}: {self.name} must be in {bounds}"
                f"{'%' if percent else ''}, got {text}"
            )
        return f"{number(value)}%" if percent else value


@dataclass(frozen=True)
class PerturbationSpec:
    name: str
    summary: str  # one line, for `streameval run --help` and the docs
    params: tuple[Param, ...]
    # Why a combination of valid values cannot be used (None: it can).
    check: Callable[[dict[str, ParamValue]], str | None] = lambda params: None


def number(value: float) -> str:
    """30.0 -> "30", 0.1 -> "0.1": the shortest text that reads back as the same float."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _label(name: str, params: dict[str, ParamValue]) -> str:
    shown = ",".join(
        f"{key}={value if isinstance(value, str) else number(float(value))}"
        for key, value in params.items()
    )
    return f"{name}:{shown}" if shown else name


def _hold_below_every(params: dict[str, ParamValue]) -> str | None:
    every, hold = float(params["every"]), float(params["hold"])
    if hold >= every:
        return f"hold must be less than every, got hold={number(hold)} and every={number(every)}"
    return None


SPECS: dict[str, PerturbationSpec] = {
    spec.name: spec
    for spec in (
        PerturbationSpec(
            "jitter",
            "each frame's time stamp (and wall-clock send time) moved by up to ±max s",
            (Param("max", 0.25, 0.0, 60.0, low_open=True),),
        ),
        PerturbationSpec(
            "drop", "each frame left out with probability p", (Param("p", 0.1, 0.0, 1.0),)
        ),
        PerturbationSpec(
            "duplicate",
            "each frame delivered twice in a row with probability p",
            (Param("p", 0.1, 0.0, 1.0),),
        ),
        PerturbationSpec(
            "rate",
            "in every other period s of video, only a share factor of the frames",
            (
                Param("factor", 0.5, 0.0, 1.0, low_open=True),
                Param("period", 30.0, 0.0, MAX_SECONDS, low_open=True),
            ),
        ),
        PerturbationSpec(
            "burst",
            "every s of video, the frames of the next hold s held back, then sent at once",
            (
                Param("every", 20.0, 0.0, MAX_SECONDS, low_open=True),
                Param("hold", 5.0, 0.0, MAX_SECONDS, low_open=True),
            ),
            _hold_below_every,
        ),
        PerturbationSpec(
            "cut",
            "the connection cut once at video time at (s, or F% of the session's span)",
            (Param("at", "50%", 0.0, MAX_SECONDS, percent=True),),
        ),
    )
}

# The presets of `--robustness`, each a fixed list of specs (docs/robustness.md).
PRESETS: dict[str, tuple[str, ...]] = {
    "standard": (
        "jitter:max=0.25",
        "drop:p=0.1",
        "duplicate:p=0.1",
        "rate:factor=0.5,period=30",
        "burst:every=20,hold=5",
        "cut:at=50%",
        NEGATIVE,
    ),
}
PRESET_HELP = "; ".join(f"{name} = {' '.join(specs)}" for name, specs in PRESETS.items())


def parse_spec(spec: str) -> Variant:
    """The variant a `NAME[:KEY=VALUE,...]` spec names, every parameter filled in, its
    label normalised; PerturbationError (one line) for anything else."""
    name, _, rest = spec.strip().partition(":")
    if not name:
        raise PerturbationError(f"empty perturbation {spec!r}; give NAME[:KEY=VALUE,...]")
    if name == NEGATIVE:
        if rest.strip():
            raise PerturbationError(f"perturbation {NEGATIVE} takes no parameters, got {rest!r}")
        return Variant(label=NEGATIVE, kind="negative", params={})
    found = SPECS.get(name)
    if found is None:
        raise PerturbationError(f"unknown perturbation {name!r}; known: {', '.join(NAMES)}")
    names = [p.name for p in found.params]
    given: dict[str, str] = {}
    for part in rest.split(",") if rest.strip() else []:
        key, equals, text = (piece.strip() for piece in part.partition("="))
        if key not in names:
            raise PerturbationError(
                f"perturbation {name}: unknown parameter {key!r}; it takes {', '.join(names)}"
            )
        if not equals or not text:
            raise PerturbationError(f"perturbation {name}: {key} needs a value ({key}=VALUE)")
        if key in given:
            raise PerturbationError(f"perturbation {name}: {key} is given twice")
        given[key] = text
    params = {
        p.name: p.parse(name, given[p.name]) if p.name in given else p.default for p in found.params
    }
    problem = found.check(params)
    if problem:
        raise PerturbationError(f"perturbation {name}: {problem}")
    return Variant(label=_label(name, params), kind="perturbation", params=params)


def run_variants(specs: Sequence[str], preset: str | None) -> tuple[Variant, ...]:
    """The variants a run streams: the preset's, then the specs', each label once."""
    if preset is not None and preset not in PRESETS:
        known = ", ".join(PRESETS)
        raise PerturbationError(f"unknown robustness preset {preset!r}; known: {known}")
    variants: dict[str, Variant] = {}
    for spec in (*PRESETS.get(preset or "", ()), *specs):
        variant = parse_spec(spec)
        variants.setdefault(variant.label, variant)
    return tuple(variants.values())


def session_rng(seed: int, label: str, base_record_id: str) -> random.Random:
    """The generator of one session's draws: the same for the same (seed, variant, record),
    another for another record (a str seed is hashed with SHA-512: stable across runs)."""
    return random.Random(f"{seed}\n{label}\n{base_record_id}")


NAMES = (*SPECS, NEGATIVE)
