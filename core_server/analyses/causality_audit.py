"""The causality audit (docs/robustness.md): does anything an adapter says before time T
depend on the video after T?

The audit streams two copies of one short synthetic video, identical up to the cut T; from
T on, copy B shows a code word (the marker) that copy A never shows. Every task is streamed
three times as sessions of one ordinary run (RunExecutor, logical pacing, every event
recorded): over A, over A again (A') and over B. Before T nothing tells the copies apart, so

- an output before T that differs between A and B while A and A' agree is a leak;
- an output before T that names the marker is a leak;
- an adapter whose A and A' already differ before T is nondeterministic: its A-B
  differences prove nothing, and the verdict is `inconclusive` unless it names the marker.

"Before T" is the Core's video clock when the output arrived (`Event.video_t`, the last frame
sent): an answer still streaming when the frame at T went out is not counted against it.

Record ids and video names are digests, so an adapter cannot tell a copy from its ids; the
marker is in no record (only in the frames, and in the verdict stored with the run).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont
from pydantic import BaseModel

from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord, Trigger
from streameval.core.benchmark.synthetic import (
    COLOUR_INDEX,
    COLOURS,
    FPS,
    HEIGHT,
    I_COUNT_CHANGE,
    Q_PRESENT_COLOUR,
    Q_PRESENT_COUNT,
    UNABLE,
    WIDTH,
    Scene,
    Shape,
    render_indices,
    write_video,
)
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.errors import CoreError
from streameval.core.store.store import Store
from streameval.events import Event, EventKind

AUDIT_VERSION = "1"
ANALYSIS = "causality"  # the analysis name in the store (Store.put_analysis)
CUT_S = 12
VIDEO_S = 24
# Code words: none is part of another, of a question, an instruction or an option.
WORDS = (
    "QUOKKA",
    "ZEPHYR",
    "FJORD",
    "KAYAK",
    "BANJO",
    "WALRUS",
    "VORTEX",
    "GIZMO",
    "NEBULA",
    "TUNDRA",
    "PLINTH",
    "JIGSAW",
)
MARKER_PX = 44  # letter height: about a fifth of the frame, readable after 1/3 downscaling
# x264 without lookahead or B-frames encodes each frame from earlier ones only, so the two
# copies' bytes, and so their decoded frames, are equal up to T (checked after writing).
CAUSAL_X264 = {"tune": "zerolatency"}

Copy = Literal["A", "A'", "B"]
COPIES: tuple[Copy, ...] = ("A", "A'", "B")
VIDEO_OF_COPY: dict[Copy, str] = {"A": "A", "A'": "A", "B": "B"}

Q_WORD = "What word is written on the screen?"
I_WORD = "Tell me when a word appears on screen."
NO_WORD = "No word is shown"

# The scene: a square changing colour, circles coming and going, changes on both sides of T.
SQUARE_CHANGES_S = (0.0, 3.0, 6.5, 13.0, 18.0)
CIRCLES_SHOWN_S = ((0, VIDEO_S), (4, 15), (8, 15), (20, VIDEO_S))
INSTRUCTION_S = 2.0
QA_TIMES_S = {"qa-word": 11.0, "qa-colour": 9.0, "qa-count": 6.0}


class AuditError(CoreError):
    """The audit's videos could not be made as the method needs them."""


@dataclass(frozen=True)
class AuditTask:
    """One task of the audit, streamed once per copy: the record id of each copy."""

    name: str
    copies: dict[Copy, str]


@dataclass(frozen=True)
class AuditBenchmark:
    """The generated audit benchmark: where it lies, its cut, marker and tasks."""

    path: Path  # benchmark.json; the videos lie under videos/ beside it
    seed: int
    cut_s: float
    marker: str
    tasks: tuple[AuditTask, ...]


# ----------------------------------------------------------------------------- generation


def audit_dir(cache_dir: Path, seed: int) -> Path:
    return Path(cache_dir) / "causality" / f"seed-{seed}"


def prepare(cache_dir: Path, seed: int) -> AuditBenchmark:
    """The audit benchmark for `seed` under the cache directory, generated unless cached."""
    folder = audit_dir(cache_dir, seed)
    rng = np.random.default_rng([seed, 1])
    marker = WORDS[int(rng.integers(len(WORDS)))]
    scene = _scene(rng)
    videos = {name: f"videos/{_digest(seed, 'video', name)}.mp4" for name in ("A", "B")}
    tasks, records = _records(rng, seed, scene, marker, videos)
    benchmark = Benchmark(
        name="causality-audit",
        version=f"{AUDIT_VERSION}+seed.{seed}",
        video_root=".",
        records=sorted(records, key=lambda record: record.record_id),
    )
    path = folder / "benchmark.json"
    text = benchmark.model_dump_json(indent=1)
    paths = {name: folder / video for name, video in videos.items()}
    cached = path.is_file() and path.read_text() == text
    if not (cached and all(p.is_file() for p in paths.values())):
        path.unlink(missing_ok=True)  # no index vouches for half-written videos
        paths["A"].parent.mkdir(parents=True, exist_ok=True)
        cut_frame = CUT_S * FPS
        write_video(paths["A"], scene.frames, partial(render_indices, scene), CAUSAL_X264)
        marked = partial(_render_marked, scene, _marker_mask(marker), cut_frame)
        write_video(paths["B"], scene.frames, marked, CAUSAL_X264)
        _check_pair(paths["A"], paths["B"], cut_frame)
        path.write_text(text)
    return AuditBenchmark(path, seed, float(CUT_S), marker, tasks)


def _digest(seed: int, *parts: str) -> str:
    return hashlib.sha256("\n".join([str(seed), *parts]).encode()).hexdigest()[:10]


def _scene(rng: np.random.Generator) -> Scene:
    frames = VIDEO_S * FPS
    square_slot, *circle_slots = rng.permutation(12).tolist()
    colours: list[tuple[int, str]] = []
    for change_s in SQUARE_CHANGES_S:
        previous = colours[-1][1] if colours else None
        allowed = [c for c in COLOURS if c != previous]
        colours.append((round(change_s * FPS), allowed[int(rng.integers(len(allowed)))]))
    square = Shape("square", square_slot, tuple(colours), (0, frames), int(rng.integers(40)))
    circles = tuple(
        Shape(
            "circle",
            slot,
            ((0, COLOURS[int(rng.integers(len(COLOURS)))]),),
            (start * FPS, end * FPS),
            int(rng.integers(40)),
        )
        for slot, (start, end) in zip(circle_slots, CIRCLES_SHOWN_S, strict=False)
    )
    return Scene("causality", frames, (square, *circles))


def _circles_at(scene: Scene, t: float) -> int:
    frame = round(t * FPS)
    return sum(s.kind == "circle" and s.shown[0] <= frame < s.shown[1] for s in scene.shapes)


def _count_changes(scene: Scene) -> list[tuple[float, int]]:
    """(time, new count) at each change of the number of circles."""
    edges = sorted({e for s in scene.shapes if s.kind == "circle" for e in s.shown} - {0})
    seconds = [edge / FPS for edge in edges if edge < scene.frames]
    return [(t, _circles_at(scene, t)) for t in seconds]


def _options(rng: np.random.Generator, answer: str, others: Sequence[str]) -> tuple[tuple, str]:
    """Four candidates in a seeded order, then "Unable to answer"; the answer's label."""
    texts = [answer, *[o for o in others if o != answer][:3]]
    texts = [texts[int(i)] for i in rng.permutation(len(texts))] + [UNABLE]
    labels = "ABCDE"
    options = tuple(f"{label}. {text}" for label, text in zip(labels, texts, strict=False))
    return options, labels[texts.index(answer)]


def _records(
    rng: np.random.Generator, seed: int, scene: Scene, marker: str, videos: dict[str, str]
) -> tuple[tuple[AuditTask, ...], list[QARecord | ProactiveRecord]]:
    """The tasks and every copy's record: the copies differ only in id and video. The
    word question offers other code words, never the marker: naming it takes reading it."""
    square = next(s for s in scene.shapes if s.kind == "square")
    questions = {
        "qa-word": (Q_WORD, NO_WORD, [w for w in WORDS if w != marker]),
        "qa-colour": (
            Q_PRESENT_COLOUR.format(shape="square"),
            square.colour_at(round(QA_TIMES_S["qa-colour"] * FPS)),
            list(COLOURS),
        ),
        "qa-count": (
            Q_PRESENT_COUNT.format(shape="circle"),
            str(_circles_at(scene, QA_TIMES_S["qa-count"])),
            [str(n) for n in range(6)],
        ),
    }
    meta = {"seed": seed, "audit_version": AUDIT_VERSION, "cut_s": CUT_S}
    templates: dict[str, QARecord | ProactiveRecord] = {}
    for name, (question, answer, others) in questions.items():
        shuffled = [others[int(i)] for i in rng.permutation(len(others))]
        options, label = _options(rng, answer, shuffled)
        at = QA_TIMES_S[name]
        templates[name] = QARecord(
            record_id="",
            source_id=f"causality@{at:g}s",
            source_benchmark="causality-audit",
            task_type=name,
            video_path="",
            question=question,
            options=options,
            answer=label,
            question_time_s=at,
            evidence_anchor_s=0.0,
            metadata=meta,
        )
    word_trigger = Trigger(trigger_type="event_onset", answer="a word", point_s=float(CUT_S))
    count_triggers = [
        Trigger(trigger_type="event_onset", answer=str(count), point_s=t)
        for t, count in _count_changes(scene)
    ]
    instructions = {
        "watch-word": (I_WORD, [word_trigger]),
        "watch-count": (I_COUNT_CHANGE.format(shape="circle"), count_triggers),
    }
    for name, (instruction, triggers) in instructions.items():
        templates[name] = ProactiveRecord(
            record_id="",
            source_id=f"causality@{INSTRUCTION_S:g}s",
            source_benchmark="causality-audit",
            task_type=name,
            video_path="",
            instruction=instruction,
            instruction_time_s=INSTRUCTION_S,
            triggers=tuple(triggers),
            metadata=meta,
        )
    tasks, records = [], []
    for name, template in templates.items():
        copies = {copy: f"causality:{_digest(seed, name, copy)}" for copy in COPIES}
        tasks.append(AuditTask(name, copies))
        for copy, record_id in copies.items():
            video = videos[VIDEO_OF_COPY[copy]]
            update = {"record_id": record_id, "video_path": video}
            records.append(template.model_copy(update=update))
    return tuple(tasks), records


def _marker_mask(word: str) -> np.ndarray:
    """Where the marker's letters cover the frame: white capitals across the lower middle."""
    image = Image.new("L", (WIDTH, HEIGHT))
    font = ImageFont.load_default(size=MARKER_PX)
    ImageDraw.Draw(image).text((WIDTH / 2, HEIGHT * 0.8), word, fill=255, font=font, anchor="mm")
    return np.asarray(image) >= 128


def _render_marked(scene: Scene, mask: np.ndarray, cut_frame: int, frame: int) -> np.ndarray:
    indices = render_indices(scene, frame)
    if frame >= cut_frame:
        indices[mask] = COLOUR_INDEX["white"]
    return indices


def _decoded(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="yuv420p") for frame in container.decode(video=0)]


def _check_pair(a: Path, b: Path, cut_frame: int) -> None:
    """The method's premise: the copies decode to the same frames before the cut, and to
    different ones from it on."""
    frames_a, frames_b = _decoded(a), _decoded(b)
    if len(frames_a) != len(frames_b):
        raise AuditError(f"the audit videos {a} and {b} differ in length")
    for index, (x, y) in enumerate(zip(frames_a, frames_b, strict=True)):
        if (index < cut_frame) != np.array_equal(x, y):
            where = "before" if index < cut_frame else "after"
            raise AuditError(
                f"the audit videos {a} and {b} are {'different' if index < cut_frame else 'equal'}"
                f" at frame {index}, {where} the cut: this encoder is not causal"
            )


# ----------------------------------------------------------------------------- the run


def run_config(
    benchmark: AuditBenchmark, adapter_url: str, cache_dir: Path, concurrency: int = 4
) -> RunConfig:
    """An ordinary run of the audit benchmark: TRACE profile, logical pacing (every step
    waits for the adapter's decision, so a deterministic adapter answers the same every
    time whatever its speed)."""
    return RunConfig(
        benchmark=str(benchmark.path),
        endpoints=[EndpointConfig(url=adapter_url, concurrency=concurrency)],
        cache_dir=str(cache_dir),
        pacing="logical",
    )


# ----------------------------------------------------------------------------- the verdict

Verdict = Literal["pass", "fail", "inconclusive"]
EvidenceKind = Literal["marker", "differs", "nondeterministic", "session_failed"]


class Evidence(BaseModel):
    """One finding: the marker named, an output that differs between two copies, or a
    session that failed. `outputs` maps each copy involved to what was said there."""

    kind: EvidenceKind
    task: str
    point: str  # the Core's message it answers: "question", "step 3", "frame"; or "session"
    video_t: float | None
    sessions: dict[str, str]  # copy -> session id
    outputs: dict[str, str]  # copy -> what it said ("silent", '"2"', ...)


class CausalityVerdict(BaseModel):
    """What `Store.put_analysis(run_id, "causality", ...)` holds."""

    verdict: Verdict
    cut_s: float
    marker: str
    seed: int
    counts: dict[str, int]
    evidence: list[Evidence]

    def summary(self) -> str:
        """One line for people: the verdict and its first piece of evidence."""
        counts = self.counts
        head = f"causality: {self.verdict} (cut T={self.cut_s:g}s, marker {self.marker})"
        if self.verdict == "pass":
            return (
                f"{head}: {counts['points']} decision points before T, each the same in "
                "A, A' and B; no output named the marker"
            )
        first = self.evidence[0]
        where = f"task {first.task}, {first.point} at {first.video_t:g}s"
        said = "; ".join(
            f"{copy} ({first.sessions[copy]}): {text}" for copy, text in first.outputs.items()
        )
        reasons = {
            "marker": f"{counts['marker']} outputs before T name the marker",
            "differs": f"{counts['differs']} outputs before T differ between A and B while A "
            "and A' agree",
            "nondeterministic": f"{counts['nondeterministic']} outputs before T already differ "
            "between A and A' (a nondeterministic adapter)",
            "session_failed": f"{counts['failed_sessions']} sessions failed",
        }
        if first.kind == "session_failed":
            where = f"task {first.task}"
        return f"{head}: {reasons[first.kind]}; first: {where}: {said}"


@dataclass(frozen=True)
class _Point:
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

# What the adapter said at each point before the cut: ("silent",), ("delta", text), ...
Said = dict[_Point, list[tuple[str, str]]]


def _said_before(events: Iterable[Event], cut_s: float) -> Said:
    """Each point's outputs that arrived while the Core's video clock was before the cut."""
    said: Said = {}
    point = _Point("start", None)
    for event in events:
        payload = event.payload
        if event.kind in _POINTS:
            step = getattr(payload, "step", None)
            point = _Point(_POINTS[event.kind] + ("" if step is None else f" {step}"), payload.t)
        if event.video_t is None or event.video_t >= cut_s:
            continue
        if event.kind == EventKind.SILENT:
            said.setdefault(point, []).append(("silent", ""))
        elif event.kind == EventKind.RESPONSE_DELTA:
            kind = "snapshot" if payload.snapshot else "delta"
            said.setdefault(point, []).append((kind, payload.text))
        elif event.kind == EventKind.RESPONSE_FINAL:
            said.setdefault(point, []).append(("final", payload.text))
    return said


def _shown(items: list[tuple[str, str]] | None) -> str:
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


def _names_marker(items: list[tuple[str, str]], marker: str) -> bool:
    return any(marker.lower() in text.lower() for _, text in items)


def analyse(store: Store, run_id: str, benchmark: AuditBenchmark) -> CausalityVerdict:
    """The verdict on a finished audit run, from its recorded events."""
    unfinished = {s.session_id: s for s in store.sessions(run_id) if s.status != "finished"}
    found: list[Evidence] = []
    points = 0
    for task in benchmark.tasks:
        for copy, session_id in task.copies.items():
            if session_id in unfinished:
                session = unfinished[session_id]
                said = f"{session.status}: {session.failure_reason or 'did not finish'}"
                found.append(
                    Evidence(
                        kind="session_failed",
                        task=task.name,
                        point="session",
                        video_t=None,
                        sessions={copy: session_id},
                        outputs={copy: said},
                    )
                )
        said = {
            copy: _said_before(store.iter_events(run_id, session_id), benchmark.cut_s)
            for copy, session_id in task.copies.items()
        }
        compared = sorted({p for outputs in said.values() for p in outputs}, key=_point_order)
        points += len(compared)
        for point in compared:
            found += _compare(task, point, said, benchmark.marker)
    found_of = {kind: sum(e.kind == kind for e in found) for kind in _ORDER}
    counts = {
        "sessions": sum(len(task.copies) for task in benchmark.tasks),
        "points": points,
        "marker": found_of["marker"],
        "differs": found_of["differs"],
        "nondeterministic": found_of["nondeterministic"],
        "failed_sessions": found_of["session_failed"],
    }
    verdict, lead = _verdict(counts)
    # The evidence the verdict rests on comes first, then the rest in _ORDER.
    found.sort(key=lambda e: (e.kind != lead, _ORDER.index(e.kind)))
    return CausalityVerdict(
        verdict=verdict,
        cut_s=benchmark.cut_s,
        marker=benchmark.marker,
        seed=benchmark.seed,
        counts=counts,
        evidence=found,
    )


def _compare(task: AuditTask, point: _Point, said: dict[Copy, Said], marker: str) -> list[Evidence]:
    """What one point of one task shows: the marker named in any copy; A and A' apart (the
    adapter is nondeterministic there), else A and B apart (a leak)."""

    def evidence(kind: EvidenceKind, copies: Sequence[Copy]) -> Evidence:
        return Evidence(
            kind=kind,
            task=task.name,
            point=point.point,
            video_t=point.t,
            sessions={copy: task.copies[copy] for copy in copies},
            outputs={copy: _shown(said[copy].get(point)) for copy in copies},
        )

    found = [
        evidence("marker", [copy])
        for copy in COPIES
        if _names_marker(said[copy].get(point, []), marker)
    ]
    a, again, b = (said[copy].get(point) for copy in COPIES)
    if a != again:
        found.append(evidence("nondeterministic", ["A", "A'"]))
    elif a != b:
        found.append(evidence("differs", ["A", "B"]))
    return found


# Evidence in the order it weighs: the marker named is a leak whatever else happened.
_ORDER: tuple[EvidenceKind, ...] = ("marker", "differs", "nondeterministic", "session_failed")


def _verdict(counts: dict[str, int]) -> tuple[Verdict, EvidenceKind | None]:
    """The verdict and the kind of evidence it rests on. A named marker fails; A-B
    differences fail only a deterministic adapter (A and A' the same everywhere before T)
    whose sessions all finished; otherwise any doubt makes the audit inconclusive."""
    if counts["marker"]:
        return "fail", "marker"
    if counts["nondeterministic"]:
        return "inconclusive", "nondeterministic"
    if counts["failed_sessions"]:
        return "inconclusive", "session_failed"
    return ("fail", "differs") if counts["differs"] else ("pass", None)


def _point_order(point: _Point) -> tuple[float, str]:
    return (-1.0 if point.t is None else point.t, point.point)


def store_verdict(store: Store, run_id: str, verdict: CausalityVerdict) -> None:
    store.put_analysis(run_id, ANALYSIS, verdict.model_dump(mode="json"))
