"""The causality audit (docs/robustness.md): does anything an adapter says before time T
depend on the video after T, whether it reads the future or remembers it?

The audit streams two copies of one short synthetic video, identical up to the cut T; from
T on, copy B shows a code word (the marker) that copy A never shows (causality_streams.py,
new videos for every audit). Every task is streamed REPEATS times in each of three groups,
one ordinary run each, in this order (logical pacing, every event recorded):

- A: over the plain video, which the adapter has never been shown;
- B: over the marked one;
- A+: over the plain one again, after B's future has been shown.

Before T nothing tells the streams apart, so what the adapter says before T must not
depend on the group: A and B apart is a leak, A and A+ apart a memory of an earlier
session's future, any output naming the marker a leak. When outputs differ within a group
the adapter is nondeterministic; the decision rule (causality_rule.py) tells such
differences from evidence and states its chance of accusing an honest adapter.

"Before T" is the Core's video clock when the output arrived (`Event.video_t`, the last frame
sent): an answer still streaming when the frame at T went out is not counted against it.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from streameval.core.analyses.causality_rule import (
    DecisionRule,
    EvidenceKind,
    Verdict,
    decide,
    decision_rule,
)
from streameval.core.analyses.causality_streams import GROUPS, AuditStreams, AuditTask, Group
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.store.store import Store
from streameval.events import Event, EventKind
from streameval.progress import NO_PROGRESS, Progress

AUDIT_VERSION = "2"
ANALYSIS = "causality"  # the analysis name in the store (Store.put_analysis)

# ----------------------------------------------------------------------------- the runs


def run_config(
    streams: AuditStreams, adapter_url: str, cache_dir: Path, concurrency: int = 4
) -> RunConfig:
    """An ordinary run over the audit's videos: TRACE profile, logical pacing (every step
    waits for the adapter's decision, so a deterministic adapter answers the same every
    time whatever its speed). The records come from memory (RunExecutor's `benchmark`):
    the folder named as the benchmark holds no benchmark file, so the run cannot be resumed
    from it."""
    return RunConfig(
        benchmark=str(streams.folder),
        video_root=str(streams.folder),
        endpoints=[EndpointConfig(url=adapter_url, concurrency=concurrency)],
        cache_dir=str(cache_dir),
        pacing="logical",
    )


async def run_groups(
    streams: AuditStreams, config: RunConfig, store: Store, progress: Progress = NO_PROGRESS
) -> dict[Group, str]:
    """Stream the groups one after another, a run each; their run ids."""
    from streameval.core.run.runner import RunExecutor

    runs: dict[Group, str] = {}
    for group in GROUPS:
        executor = RunExecutor(config, store, progress, benchmark=streams.groups[group])
        runs[group] = (await executor.execute(await executor.prepare())).run_id
    return runs


def discard_videos(streams: AuditStreams) -> None:
    """The audit's videos are used once; their frames stay in the frame cache."""
    shutil.rmtree(streams.folder, ignore_errors=True)


# ----------------------------------------------------------------------------- the verdict


class Evidence(BaseModel):
    """One finding: the marker named, two groups apart, a group that disagreed within
    itself, or a session that failed. `outputs` maps a copy ("A2") or a unanimous group
    ("A") to what was said there; `sessions` the same keys to their session ids."""

    kind: EvidenceKind
    task: str
    point: str  # the Core's message it answers: "question", "step 3", "frame"; or "session"
    video_t: float | None
    sessions: dict[str, str]
    outputs: dict[str, str]  # "silent", '"2"', ...


class CausalityVerdict(BaseModel):
    """What `Store.put_analysis(run_id, "causality", ...)` holds, for each of the runs."""

    verdict: Verdict
    audit_version: str = AUDIT_VERSION
    cut_s: float
    marker: str
    seed: int
    runs: dict[str, str]  # group -> run id
    rule: DecisionRule
    counts: dict[str, int]
    evidence: list[Evidence]

    def summary(self) -> str:
        """One line for people: the verdict and its first piece of evidence."""
        counts = self.counts
        head = f"causality: {self.verdict} (cut T={self.cut_s:g}s, marker {self.marker})"
        if self.verdict == "pass":
            return (
                f"{head}: {counts['points']} decision points before T, each the same in A, B "
                f"and A+ over {self.rule.repeats} repeats; no output named the marker"
            )
        first = self.evidence[0]
        where = f"task {first.task}, {first.point} at {first.video_t:g}s"
        said = "; ".join(
            f"{copy} ({first.sessions[copy]}): {text}" for copy, text in first.outputs.items()
        )
        reasons = {
            "marker": f"{counts['marker']} outputs before T name the marker",
            "differs": f"{counts['differs']} points before T differ between A and B, each "
            "group unanimous",
            "memory": f"{counts['memory']} points before T differ between A and A+ (after B's "
            "future was shown), each group unanimous",
            "nondeterministic": f"{counts['nondeterministic']} outputs before T differ within "
            f"their group, more than p={self.rule.p0:g} explains",
            "session_failed": f"{counts['failed_sessions']} sessions failed",
        }
        if first.kind == "session_failed":
            where = f"task {first.task}"
        return f"{head}: {reasons[first.kind]}; first: {where}: {said}"


@dataclass(frozen=True)
class Point:
    """A moment the adapter spoke at: the Core's last task message before it."""

    point: str
    t: float | None


# The Core's messages an output answers: the last one sent before it.
_POINTS = {
    EventKind.FRAME_SENT: "frame",
    EventKind.QUESTION_SENT: "question",
    EventKind.INSTRUCTION_SENT: "instruction",
    EventKind.STEP_SENT: "step",
}

# What the adapter said at a point: (("silent", ""),), (("delta", text), ("final", text)), ...
Output = tuple[tuple[str, str], ...]
Said = dict[Point, Output]


def said_before(events: Iterable[Event], cut_s: float) -> Said:
    """Each point's outputs that arrived while the Core's video clock was before the cut."""
    said: dict[Point, list[tuple[str, str]]] = {}
    point = Point("start", None)
    for event in events:
        payload = event.payload
        if event.kind in _POINTS:
            step = getattr(payload, "step", None)
            point = Point(_POINTS[event.kind] + ("" if step is None else f" {step}"), payload.t)
        if event.video_t is None or event.video_t >= cut_s:
            continue
        if event.kind == EventKind.SILENT:
            said.setdefault(point, []).append(("silent", ""))
        elif event.kind == EventKind.RESPONSE_DELTA:
            kind = "snapshot" if payload.snapshot else "delta"
            said.setdefault(point, []).append((kind, payload.text))
        elif event.kind == EventKind.RESPONSE_FINAL:
            said.setdefault(point, []).append(("final", payload.text))
    return {p: tuple(items) for p, items in said.items()}


def _shown(items: Output) -> str:
    """How an output reads in the evidence: `silent`, `"text"`, or the deltas when they do
    not add up to the final text."""
    if not items:
        return "nothing"
    finals = [text for kind, text in items if kind == "final"]
    parts = "".join(text for kind, text in items if kind == "delta")
    if [kind for kind, _ in items] == ["silent"]:
        return "silent"
    if len(finals) == 1 and parts == finals[0] and all(k != "snapshot" for k, _ in items):
        return f'"{finals[0]}"'
    return " ".join("silent" if kind == "silent" else f'{kind} "{text}"' for kind, text in items)


def analyse(store: Store, runs: dict[Group, str], streams: AuditStreams) -> CausalityVerdict:
    """The verdict on the audit's finished runs, from their recorded events."""
    found: list[Evidence] = []
    points = 0
    for task in streams.tasks:
        found += _failed_sessions(store, runs, task)
        said = {
            label: said_before(store.iter_events(runs[label[:-1]], record_id), streams.cut_s)
            for label, record_id in task.copies.items()
        }
        compared = sorted({p for outputs in said.values() for p in outputs}, key=_point_order)
        points += len(compared)
        for point in compared:
            found += compare_point(task, point, said, streams.marker)
    rule = decision_rule(points)
    sessions = sum(len(task.copies) for task in streams.tasks)
    counts = evidence_counts(found, sessions, points)
    verdict, lead = decide(counts, rule)
    # The evidence the verdict rests on comes first, then the rest in _ORDER.
    found.sort(key=lambda e: (e.kind != lead, _ORDER.index(e.kind)))
    return CausalityVerdict(
        verdict=verdict,
        cut_s=streams.cut_s,
        marker=streams.marker,
        seed=streams.seed,
        runs=dict(runs),
        rule=rule,
        counts=counts,
        evidence=found,
    )


def evidence_counts(found: list[Evidence], sessions: int, points: int) -> dict[str, int]:
    """The verdict's counts: of findings by kind, and of outputs off their group's most
    common one (the nondeterminism the rule weighs)."""
    return {
        "sessions": sessions,
        "points": points,
        **{kind: sum(e.kind == kind for e in found) for kind in ("marker", "differs", "memory")},
        "nondeterministic": sum(_minority(e) for e in found if e.kind == "nondeterministic"),
        "failed_sessions": sum(e.kind == "session_failed" for e in found),
    }


def _failed_sessions(store: Store, runs: dict[Group, str], task: AuditTask) -> list[Evidence]:
    found = []
    for label, record_id in task.copies.items():
        session = next(s for s in store.sessions(runs[label[:-1]]) if s.session_id == record_id)
        if session.status != "finished":
            said = f"{session.status}: {session.failure_reason or 'did not finish'}"
            found.append(
                Evidence(
                    kind="session_failed",
                    task=task.name,
                    point="session",
                    video_t=None,
                    sessions={label: record_id},
                    outputs={label: said},
                )
            )
    return found


def compare_point(
    task: AuditTask, point: Point, said: dict[str, Said], marker: str
) -> list[Evidence]:
    """What one point of one task shows: the marker named in any copy; a group whose
    repeats disagree; two unanimous groups apart (A-B a leak, A-A+ a memory)."""

    def evidence(kind: EvidenceKind, outputs: dict[str, Output], sessions: dict[str, str]):
        shown = {key: _shown(output) for key, output in outputs.items()}
        return Evidence(
            kind=kind, task=task.name, point=point.point, video_t=point.t, sessions=sessions,
            outputs=shown,
        )  # fmt: skip

    found = [
        evidence("marker", {label: said[label].get(point, ())}, {label: rid})
        for label, rid in task.copies.items()
        if any(marker.lower() in text.lower() for _, text in said[label].get(point, ()))
    ]
    unanimous: dict[Group, Output] = {}
    for group in GROUPS:
        copies = task.group(group)
        outputs = {label: said[label].get(point, ()) for label in copies}
        if len(set(outputs.values())) == 1:
            unanimous[group] = next(iter(outputs.values()))
        else:
            found.append(evidence("nondeterministic", outputs, copies))
    for other, kind in (("B", "differs"), ("A+", "memory")):
        if {"A", other} <= set(unanimous) and unanimous["A"] != unanimous[other]:
            groups = ("A", other)
            outputs = {group: unanimous[group] for group in groups}
            sessions = {group: ", ".join(task.group(group).values()) for group in groups}
            found.append(evidence(kind, outputs, sessions))
    return found


def _minority(evidence: Evidence) -> int:
    """Outputs of a group that differ from its most common one."""
    return len(evidence.outputs) - max(Counter(evidence.outputs.values()).values())


# Evidence in the order it weighs: the marker named is a leak whatever else happened.
_ORDER: tuple[EvidenceKind, ...] = (
    "marker",
    "differs",
    "memory",
    "nondeterministic",
    "session_failed",
)


def _point_order(point: Point) -> tuple[float, str]:
    return (-1.0 if point.t is None else point.t, point.point)


def store_verdict(store: Store, verdict: CausalityVerdict) -> None:
    """The verdict, stored with each of the audit's runs."""
    for run_id in verdict.runs.values():
        store.put_analysis(run_id, ANALYSIS, verdict.model_dump(mode="json"))
