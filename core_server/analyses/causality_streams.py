"""What the causality audit streams (docs/robustness.md): two short synthetic videos
identical up to the cut T, the marker after T in one of them, and every task's records,
generated afresh for every audit from a random seed.

Nothing an adapter can see or read tells an audit from an ordinary run of the synthetic
benchmark: record ids are numbered as the synthetic benchmark numbers them (in a seeded
order, so a number says nothing about the stream), videos are named as its count videos,
under a folder of the cache named by a random token, and no benchmark file is written: the
records, with their answers, are held in memory and stored with the runs, as every run
stores its records. The cut, the marker and which video is marked are in no record, only in
the verdict.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from streameval.core.analyses.causality_rule import REPEATS
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord, Trigger
from streameval.core.benchmark.synthetic import (
    COLOUR_INDEX,
    COLOURS,
    FPS,
    GENERATOR_VERSION,
    HEIGHT,
    I_COUNT_CHANGE,
    Q_PRESENT_COLOUR,
    Q_PRESENT_COUNT,
    SOURCE,
    UNABLE,
    WIDTH,
    Scene,
    Shape,
    render_indices,
    write_video,
)
from streameval.core.errors import CoreError

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
# videos' bytes, and so their decoded frames, are equal up to T (checked after writing).
CAUSAL_X264 = {"tune": "zerolatency"}
# The synthetic benchmark's count videos (synthetic.py): the audit's videos take their names.
VIDEO_NAMES = ("v3_count", "v4_count")

# The groups of copies, in the order they are streamed (one run each): A over the plain
# video, B over the marked one, A+ over the plain one again once B's future has been shown.
Group = Literal["A", "B", "A+"]
GROUPS: tuple[Group, ...] = ("A", "B", "A+")
MARKED: dict[Group, bool] = {"A": False, "B": True, "A+": False}

Q_WORD = "What word is written on the screen?"
I_WORD = "Tell me when a word appears on screen."
NO_WORD = "No word is shown"
INSTRUCTION_S = 2.0
QA_TIMES_S = {"qa-word": 11.0, "qa-colour": 9.0, "qa-count": 6.0}


class AuditError(CoreError):
    """The audit's videos could not be made as the method needs them."""


@dataclass(frozen=True)
class AuditTask:
    """One task of the audit: the record id of each copy, by label ("A1", "B3", "A+2")."""

    name: str
    copies: dict[str, str]

    def group(self, group: Group) -> dict[str, str]:
        return {label: rid for label, rid in self.copies.items() if label[:-1] == group}


@dataclass(frozen=True)
class AuditStreams:
    """One audit's streams: where its videos lie, its seed, cut, marker, tasks, and the
    benchmark each group streams (in memory only)."""

    folder: Path  # videos/ lies below it
    seed: int
    cut_s: float
    marker: str
    tasks: tuple[AuditTask, ...]
    groups: dict[Group, Benchmark]


def new_seed() -> int:
    """A seed nobody could have seen before: every audit's videos are new."""
    return secrets.randbits(63)


def prepare(cache_dir: Path, seed: int) -> AuditStreams:
    """Generate the audit of `seed` into a new folder of the cache's synthetic folder."""
    folder = Path(cache_dir) / SOURCE / secrets.token_hex(6)
    rng = np.random.default_rng([seed, 2])
    marker = WORDS[int(rng.integers(len(WORDS)))]
    scene = _scene(rng)
    plain, marked = (f"videos/{name}.mp4" for name in rng.permutation(VIDEO_NAMES).tolist())
    tasks, records = _records(rng, seed, scene, {False: plain, True: marked})
    version = f"{GENERATOR_VERSION}+seed.{seed}"
    groups = {
        group: Benchmark(
            name=SOURCE,
            version=version,
            video_root=str(folder),
            records=sorted(records[group], key=lambda record: record.record_id),
        )
        for group in GROUPS
    }
    (folder / "videos").mkdir(parents=True)
    cut_frame = CUT_S * FPS
    write_video(folder / plain, scene.frames, partial(render_indices, scene), CAUSAL_X264)
    render_marked = partial(_render_marked, scene, _marker_mask(marker), cut_frame)
    write_video(folder / marked, scene.frames, render_marked, CAUSAL_X264)
    _check_pair(folder / plain, folder / marked, cut_frame)
    return AuditStreams(folder, seed, float(CUT_S), marker, tasks, groups)


def _scene(rng: np.random.Generator) -> Scene:
    """A square changing colour and circles coming and going, on both sides of T, at seeded
    times: the count is steady around its question (6 s), the colour around its own (9 s)."""
    frames = VIDEO_S * FPS
    square_slot, *circle_slots = rng.permutation(12).tolist()
    after = sorted(rng.choice(np.arange(13, 23), 2, replace=False).tolist())
    changes_s = [0, int(rng.integers(3, 7)), 11, *after]
    colours: list[tuple[int, str]] = []
    for change_s in changes_s:
        previous = colours[-1][1] if colours else None
        allowed = [c for c in COLOURS if c != previous]
        colours.append((change_s * FPS, allowed[int(rng.integers(len(allowed)))]))
    square = Shape("square", square_slot, tuple(colours), (0, frames), int(rng.integers(40)))
    # Circle 0 stays; two leave after T, each having come at 0, 3-4 s or 8-10 s; one comes
    # after T. No two edges at the same second.
    edges = rng.permutation([0, 3, 4, 8, 9, 10]).tolist()[:2]
    ends = rng.choice(np.arange(13, 23), 3, replace=False).tolist()
    shown = [(0, VIDEO_S), (edges[0], ends[0]), (edges[1], ends[1]), (ends[2] + 1, VIDEO_S)]
    circles = tuple(
        Shape(
            "circle",
            slot,
            ((0, COLOURS[int(rng.integers(len(COLOURS)))]),),
            (start * FPS, end * FPS),
            int(rng.integers(40)),
        )
        for slot, (start, end) in zip(circle_slots, shown, strict=False)
    )
    return Scene("audit", frames, (square, *circles))


def _circles_at(scene: Scene, t: float) -> int:
    frame = round(t * FPS)
    return sum(s.kind == "circle" and s.shown[0] <= frame < s.shown[1] for s in scene.shapes)


def count_changes(scene: Scene) -> list[tuple[float, int]]:
    """(time, new count) at each change of the number of circles."""
    edges = sorted({e for s in scene.shapes if s.kind == "circle" for e in s.shown} - {0})
    seconds = [edge / FPS for edge in edges if edge < scene.frames]
    changes = [(t, _circles_at(scene, t)) for t in seconds]
    return [(t, n) for i, (t, n) in enumerate(changes) if i == 0 or n != changes[i - 1][1]]


def _options(rng: np.random.Generator, answer: str, others: Sequence[str]) -> tuple[tuple, str]:
    """Four candidates in a seeded order, then "Unable to answer"; the answer's label."""
    texts = [answer, *[o for o in others if o != answer][:3]]
    texts = [texts[int(i)] for i in rng.permutation(len(texts))] + [UNABLE]
    labels = "ABCDE"
    options = tuple(f"{label}. {text}" for label, text in zip(labels, texts, strict=False))
    return options, labels[texts.index(answer)]


def _templates(
    rng: np.random.Generator, seed: int, scene: Scene
) -> dict[str, QARecord | ProactiveRecord]:
    """Every task's record but its id and video. The word question offers other code
    words, never the marker (no record holds it): naming it takes reading it."""
    square = next(s for s in scene.shapes if s.kind == "square")
    meta = {
        "seed": seed,
        "generator_version": GENERATOR_VERSION,
        "video": {"duration_s": float(VIDEO_S), "fps": FPS, "width": WIDTH, "height": HEIGHT},
    }
    questions = {
        "qa-word": (Q_WORD, NO_WORD, list(WORDS)),
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
    base = {"record_id": "", "source_benchmark": SOURCE, "video_path": "", "metadata": meta}
    templates: dict[str, QARecord | ProactiveRecord] = {}
    for name, (question, answer, others) in questions.items():
        shuffled = [others[int(i)] for i in rng.permutation(len(others))]
        options, label = _options(rng, answer, shuffled)
        at = QA_TIMES_S[name]
        templates[name] = QARecord(
            **base,
            source_id=f"@{at:g}s",
            task_type=name,
            question=question,
            options=options,
            answer=label,
            question_time_s=at,
            evidence_anchor_s=0.0,
        )
    word = Trigger(trigger_type="event_onset", answer="a word", point_s=float(CUT_S))
    counts = [
        Trigger(trigger_type="event_onset", answer=str(count), point_s=t)
        for t, count in count_changes(scene)
    ]
    for name, instruction, triggers in (
        ("watch-word", I_WORD, [word]),
        ("watch-count", I_COUNT_CHANGE.format(shape="circle"), counts),
    ):
        templates[name] = ProactiveRecord(
            **base,
            source_id=f"@{INSTRUCTION_S:g}s",
            task_type=name,
            instruction=instruction,
            instruction_time_s=INSTRUCTION_S,
            triggers=tuple(triggers),
        )
    return templates


def _records(
    rng: np.random.Generator, seed: int, scene: Scene, videos: dict[bool, str]
) -> tuple[tuple[AuditTask, ...], dict[Group, list[QARecord | ProactiveRecord]]]:
    """Every task's copies, REPEATS per group, differing only in id and video; ids numbered
    per kind in a seeded order, as the synthetic benchmark numbers its records."""
    templates = _templates(rng, seed, scene)
    copies = [
        (name, f"{group}{n}", group)
        for name in templates
        for group in GROUPS
        for n in range(1, REPEATS + 1)
    ]
    numbers: dict[str, list[int]] = {}
    for kind in ("qa", "proactive"):
        of_kind = sum(templates[name].task == kind for name, _, _ in copies)
        numbers[kind] = rng.permutation(of_kind).tolist()
    by_task: dict[str, dict[str, str]] = {name: {} for name in templates}
    records: dict[Group, list[QARecord | ProactiveRecord]] = {group: [] for group in GROUPS}
    for name, label, group in copies:
        template = templates[name]
        record_id = f"{SOURCE}:{template.task}:{numbers[template.task].pop():03d}"
        video = videos[MARKED[group]]
        source_id = Path(video).stem + template.source_id
        update = {"record_id": record_id, "video_path": video, "source_id": source_id}
        records[group].append(template.model_copy(update=update))
        by_task[name][label] = record_id
    tasks = tuple(AuditTask(name, labels) for name, labels in by_task.items())
    return tasks, records


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
    """The method's premise: the videos decode to the same frames before the cut, and to
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
