"""Stream perturbations: seeded transforms of a session's timeline (docs/robustness.md).

A robustness run streams each record again under every perturbation it names
(perturb_spec.py says how they are written); the Core applies it to the session's timeline
before playing it, so no adapter can apply, undo or even see it:

    >>> perturbed = perturb(timeline, parse_spec("drop:p=0.2"), seed=0, base_record_id="r1")

Everything here is pure: the same timeline, variant, seed and base record give the same
perturbed timeline, and another record gets another draw (`session_rng`).

A timeline is perturbed frame by frame: each frame travels with the items that follow it
up to the next frame (its steps, and the tasks placed after it). A frame followed by a
question or an instruction is never left out: a task always comes after the frame it is
asked at. Steps are renumbered 0, 1, ... afterwards, so a left-out frame leaves no gap.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from streameval.core.streams.perturb_spec import session_rng
from streameval.core.streams.timeline import Timeline, TimelineItem
from streameval.variants import ParamValue, Variant

# Jittered time stamps stay this far apart at least (a stream's time stamps only increase).
MIN_GAP_S = 0.001
# Perturbed times are rounded to the microsecond: stable text in events and tests.
TIME_DIGITS = 6


@dataclass(frozen=True)
class _Group:
    """A frame and the items that follow it up to the next frame."""

    frame: TimelineItem
    after: tuple[TimelineItem, ...]

    @property
    def keeps_a_task(self) -> bool:
        """A question or instruction follows the frame: it may not be left out."""
        return any(item.kind in ("question", "instruction") for item in self.after)

    def without_steps(self) -> _Group:
        return _Group(self.frame, tuple(item for item in self.after if item.kind != "step"))


def perturb(timeline: Timeline, variant: Variant, seed: int, base_record_id: str) -> Timeline:
    """The timeline as the Core plays it under a perturbation variant."""
    transform = TRANSFORMS[variant.label.partition(":")[0]]
    head, groups = _grouped(timeline.items)
    rng = session_rng(seed, variant.label, base_record_id)
    changed = transform(groups, dict(variant.params), rng) if groups else groups
    items = [*head, *(item for group in changed for item in (group.frame, *group.after))]
    return replace(timeline, items=_renumbered(items))


def _grouped(items: Sequence[TimelineItem]) -> tuple[list[TimelineItem], list[_Group]]:
    head: list[TimelineItem] = []
    groups: list[_Group] = []
    for item in items:
        if item.kind == "frame":
            groups.append(_Group(item, ()))
        elif groups:
            groups[-1] = _Group(groups[-1].frame, (*groups[-1].after, item))
        else:
            head.append(item)
    return head, groups


def _renumbered(items: list[TimelineItem]) -> tuple[TimelineItem, ...]:
    steps = iter(range(len(items)))
    return tuple(replace(item, step=next(steps)) if item.kind == "step" else item for item in items)


def _rounded(t: float) -> float:
    return round(t, TIME_DIGITS)


def _jitter(groups: list[_Group], params: dict, rng: random.Random) -> list[_Group]:
    """Each frame's time stamp moved by a uniform draw in [-max, +max], then kept >= 0 and
    at least MIN_GAP_S after the previous one; the frame's steps carry its new time."""
    spread = float(params["max"])
    out: list[_Group] = []
    previous: float | None = None
    for group in groups:
        t = group.frame.t + rng.uniform(-spread, spread)
        t = _rounded(max(t, 0.0) if previous is None else max(t, 0.0, previous + MIN_GAP_S))
        previous = t
        after = tuple(replace(item, t=t) if item.kind == "step" else item for item in group.after)
        out.append(_Group(replace(group.frame, t=t), after))
    return out


def _drop(groups: list[_Group], params: dict, rng: random.Random) -> list[_Group]:
    """Each frame (with its steps) left out with probability p; one draw per frame."""
    p = float(params["p"])
    return [g for g in groups if rng.random() >= p or g.keeps_a_task]


def _duplicate(groups: list[_Group], params: dict, rng: random.Random) -> list[_Group]:
    """Each frame sent twice in a row with probability p (the copy has no steps of its
    own: the decision comes after both); one draw per frame."""
    p = float(params["p"])
    out: list[_Group] = []
    for group in groups:
        if rng.random() < p:
            # Sent back to back with its copy: never dropped as late under wall clock.
            out.append(_Group(replace(group.frame, send_t=group.frame.t), ()))
        out.append(group)
    return out


def _rate(groups: list[_Group], params: dict, _rng: random.Random) -> list[_Group]:
    """Periods of `period` seconds from the first frame; in every second one (the 2nd, 4th,
    ...) only a share `factor` of the frames is kept, evenly spread: the period's frame j
    (from 0) is kept when floor(j * factor) steps up, so the first one always is."""
    factor, period = float(params["factor"]), float(params["period"])
    origin = groups[0].frame.t
    out: list[_Group] = []
    current, j = -1, 0
    for group in groups:
        index = math.floor((group.frame.t - origin) / period)
        j = j + 1 if index == current else 0
        current = index
        kept = (
            index % 2 == 0
            or j == 0
            or math.floor(j * factor + 1e-9) > math.floor((j - 1) * factor + 1e-9)
        )
        if kept or group.keeps_a_task:
            out.append(group)
    return out


def _burst(groups: list[_Group], params: dict, _rng: random.Random) -> list[_Group]:
    """From the first frame, every `every` seconds the frames of the next `hold` seconds
    are held back and sent together at the last one's time (wall clock), with no step
    between them (the last one keeps its steps). A task releases what is held before it."""
    every, hold = float(params["every"]), float(params["hold"])
    origin = groups[0].frame.t
    out: list[_Group] = []
    held: list[_Group] = []
    held_in: int | None = None  # which hold window the held frames belong to

    def release() -> None:
        if held:
            send_t = held[-1].frame.t
            for group in held[:-1]:
                frame = replace(group.frame, send_t=send_t)
                out.append(_Group(frame, group.without_steps().after))
            out.append(held[-1])
            held.clear()

    for group in groups:
        since = group.frame.t - origin
        window = math.floor(since / every)
        if window >= 1 and since - window * every < hold:
            if held_in != window:
                release()
            held_in = window
            held.append(group)
            if group.keeps_a_task:
                release()
        else:
            release()
            out.append(group)
    release()
    return out


def _cut(groups: list[_Group], params: dict, _rng: random.Random) -> list[_Group]:
    """One connection cut after the last frame at or before `at` (seconds of video, or a
    share of the span from the first to the last frame) and the items that follow it."""
    at = params["at"]
    first, last = groups[0].frame.t, groups[-1].frame.t
    if isinstance(at, str):
        cut_t = _rounded(first + float(at.removesuffix("%")) / 100 * (last - first))
    else:
        cut_t = float(at)
    position = max([0, *(k for k, g in enumerate(groups) if g.frame.t <= cut_t)])
    group = groups[position]
    cut = TimelineItem("cut", max(cut_t, group.frame.t))
    return [*groups[:position], _Group(group.frame, (*group.after, cut)), *groups[position + 1 :]]


Transform = Callable[[list[_Group], dict[str, ParamValue], random.Random], list[_Group]]

# Each perturbation of perturb_spec.SPECS, by name.
TRANSFORMS: dict[str, Transform] = {
    "jitter": _jitter,
    "drop": _drop,
    "duplicate": _duplicate,
    "rate": _rate,
    "burst": _burst,
    "cut": _cut,
}
