"""The synthetic benchmark: small generated videos whose ground truth is known exactly.

Every video is a dark background with coloured shapes moving in a fixed grid of slots and,
on the right, large seven-segment digits. Each video is first described as a scene (which
shape is where, in which colour, when; which digit is shown when) and the records are
derived from that description, never from pixels. The scene is then rendered and encoded.

All times inside a scene are frame numbers at `FPS` (10 fps, so one frame is 0.1 s); question
and instruction times are whole seconds so that any sampling grid of 1 or 2 fps lands on
them. Everything is drawn from one seeded numpy Generator per video: the same seed gives the
same records and byte-identical videos.

The visual vocabulary (palette, shapes, digit glyphs) is public because a pixel-reading
policy may know it, as any image-analysis program would; the scenes are not.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from math import ceil, floor
from pathlib import Path
from typing import TypeVar

import av
import numpy as np

from streameval.core.benchmark.benchmark_json import load_benchmark_file
from streameval.core.benchmark.importing import BenchmarkError
from streameval.core.benchmark.records import (
    Benchmark,
    EvidenceSpan,
    ProactiveRecord,
    QARecord,
    Record,
    Trigger,
)
from streameval.core.benchmark.synthetic_sound import (
    BEEP_HZ,
    PITCHES_HZ,
    SAMPLE_RATE,
    Soundtrack,
    Tone,
    pitch_text,
    render_pcm,
)
from streameval.progress import NO_PROGRESS, Phase, Progress

GENERATOR_VERSION = "1"
SOURCE = "synthetic"
# The edition with sound: the silent one's videos, then three whose tasks need the sound.
AUDIO_VISUAL_NAME = "synthetic-av"

T = TypeVar("T")

# ----------------------------------------------------------------------------- vocabulary

WIDTH, HEIGHT, FPS, GOP = 320, 240, 10, 20
BACKGROUND_RGB = (16, 16, 24)
# Far apart in RGB so that JPEG/H.264 noise and 4:2:0 chroma never move a colour to another.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (230, 30, 30),
    "green": (30, 200, 50),
    "blue": (40, 80, 240),
    "yellow": (240, 220, 30),
    "white": (245, 245, 245),
}
COLOURS = tuple(PALETTE)
SHAPES = ("circle", "square", "triangle")
SHAPE_SIZE = 36
DIGIT_COLOUR = "white"
UNABLE = "Unable to answer"

# Seven-segment glyph: segments are filled rectangles (x0, y0, x1, y1) in a 44x76 box. The
# vertical segments overlap the horizontal ones so every digit is one connected blob.
GLYPH_W, GLYPH_H, GLYPH_T = 44, 76, 10
_MID = (GLYPH_H - GLYPH_T) // 2
SEGMENT_RECTS: dict[str, tuple[int, int, int, int]] = {
    "a": (0, 0, GLYPH_W, GLYPH_T),
    "b": (GLYPH_W - GLYPH_T, 0, GLYPH_W, _MID + GLYPH_T),
    "c": (GLYPH_W - GLYPH_T, _MID, GLYPH_W, GLYPH_H),
    "d": (0, GLYPH_H - GLYPH_T, GLYPH_W, GLYPH_H),
    "e": (0, _MID, GLYPH_T, GLYPH_H),
    "f": (0, 0, GLYPH_T, _MID + GLYPH_T),
    "g": (0, _MID, GLYPH_W, _MID + GLYPH_T),
}
DIGIT_SEGMENTS: dict[int, str] = {
    0: "abcdef",
    1: "bc",
    2: "abdeg",
    3: "abcdg",
    4: "bcfg",
    5: "acdfg",
    6: "acdefg",
    7: "abc",
    8: "abcdefg",
    9: "abcdfg",
}

# Layout: shapes live in a 3x4 grid of 80x60 slots on the left 240 pixels and slide +-10 px
# horizontally, which keeps neighbours at least 24 px apart; digits sit right of the grid.
_SLOT_CENTRES = tuple((40 + 80 * col, 30 + 60 * row) for row in range(4) for col in range(3))
_SLIDE_PX = 10
_DIGIT_X = 262

# ----------------------------------------------------------------------------- questions

Q_PRESENT_COLOUR = "What colour is the {shape} right now?"
Q_PRESENT_COUNT = "How many {shape}s are there right now?"
Q_PRESENT_DIGIT = "Which digit is shown right now?"
Q_LAST_DIGIT = "What was the last digit shown on screen?"
I_COUNT_CHANGE = "Each time the number of {shape}s changes, say the new number."
I_COLOUR_STATE = "Say '{colour}' whenever the {shape} is {colour}."
Q_BEEP_COUNT = "How many beeps have you heard so far?"
Q_FIRST_PITCH = "Two tones of different pitch just played. What was the pitch of the first one?"
Q_BEEP_DIGIT = "Which digit appeared on screen when the last beep sounded?"
I_BEEP_ONSET = "Say 'beep' each time a beep starts."
BEEP_FRAMES = 3  # a beep lasts 0.3 s
PITCH_FRAMES = 4  # a tone of the pitch-order task 0.4 s

# ----------------------------------------------------------------------------- scenes


@dataclass(frozen=True)
class Shape:
    kind: str
    slot: int
    colours: tuple[tuple[int, str], ...]  # (first frame, colour), sorted, the first at 0
    shown: tuple[int, int]  # [first frame, end frame)
    phase: int  # where in its slide the shape starts

    def colour_at(self, frame: int) -> str:
        current = self.colours[0][1]
        for start, colour in self.colours:
            if start > frame:
                break
            current = colour
        return current

    def change_frames(self) -> list[int]:
        return [start for start, _ in self.colours[1:]]


@dataclass(frozen=True)
class Digit:
    value: int
    start: int
    end: int


@dataclass(frozen=True)
class Scene:
    name: str
    frames: int
    shapes: tuple[Shape, ...]
    digits: tuple[Digit, ...] = ()
    digit_y: int = 80
    sound: Soundtrack | None = None  # None: the video has no audio track

    @property
    def video_path(self) -> str:
        return f"videos/{self.name}.mp4"

    def the(self, kind: str) -> Shape:
        """The one shape of this kind in the scene (questions say "the square")."""
        (shape,) = [s for s in self.shapes if s.kind == kind]
        return shape


def _sec(frame: int) -> float:
    return frame / FPS


def _constant(colour: str) -> tuple[tuple[int, str], ...]:
    return ((0, colour),)


def _pick(rng: np.random.Generator, items: Sequence[T], exclude: Sequence[T | None] = ()) -> T:
    allowed = [item for item in items if item not in exclude]
    return allowed[int(rng.integers(len(allowed)))]


def _shuffled(rng: np.random.Generator, items: Sequence[str]) -> list[str]:
    return [items[int(i)] for i in rng.permutation(len(items))]


def _colour_timeline(
    rng: np.random.Generator, frames: int, min_len: int = 50, max_len: int = 90
) -> tuple[tuple[int, str], ...]:
    """Colours held min_len..max_len frames each (5-9 s by default), never twice in a row."""
    timeline: list[tuple[int, str]] = []
    start, previous = 0, None
    while start < frames:
        previous = _pick(rng, COLOURS, exclude=[previous])
        timeline.append((start, previous))
        start += int(rng.integers(min_len, max_len + 1))
    return tuple(timeline)


def _shape(
    rng: np.random.Generator,
    kind: str,
    slot: int,
    colours: tuple[tuple[int, str], ...],
    shown: tuple[int, int] = (0, 1 << 30),
) -> Shape:
    return Shape(kind, int(slot), colours, shown, int(rng.integers(4 * _SLIDE_PX)))


def _slots(rng: np.random.Generator, count: int) -> list[int]:
    return rng.choice(len(_SLOT_CENTRES), count, replace=False).tolist()


def _stable_seconds(changes: Sequence[int], frames: int, used: Sequence[int] = ()) -> list[int]:
    """Whole seconds at which a state has held for 2 s and will hold for 1 s more.

    The margins let every 1 or 2 fps sampling grid see the state before the question.
    """
    return [
        second
        for second in range(5, frames // FPS - 1)
        if second not in used and not any(-2 * FPS < f - second * FPS <= FPS for f in changes)
    ]


def _last_change(changes: Sequence[int], frame: int) -> int:
    return max([0, *(f for f in changes if f <= frame)])


def _digit_sequence(rng: np.random.Generator, first: int, frames: int) -> tuple[Digit, ...]:
    """Digits shown 3-4 s each with 4-6 s gaps; two in a row always differ."""
    digits: list[Digit] = []
    start, previous = first, None
    while True:
        shown = int(rng.integers(30, 41))
        if start + shown + 2 * FPS > frames:
            return tuple(digits)
        previous = _pick(rng, range(10), exclude=[previous])
        digits.append(Digit(previous, start, start + shown))
        start += shown + int(rng.integers(40, 61))


# ----------------------------------------------------------------------------- records


class _Records:
    """Builds the records of one benchmark, numbering them in creation order."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.records: list[Record] = []

    def _meta(self, scene: Scene) -> dict:
        video = {"duration_s": _sec(scene.frames), "fps": FPS, "width": WIDTH, "height": HEIGHT}
        if scene.sound is not None:
            # The soundtrack's ground truth: every tone, for checks and timelines.
            tones = [
                {
                    "onset_s": _sec(tone.onset),
                    "end_s": _sec(tone.onset + tone.frames),
                    "hz": tone.hz,
                }
                for tone in scene.sound.tones
            ]
            audio = {"sample_rate": SAMPLE_RATE, "channels": 1, "codec": "pcm_s16le"}
            video["audio"] = {**audio, "tones": tones}
        return {"seed": self.seed, "generator_version": GENERATOR_VERSION, "video": video}

    def _next_id(self, task: str) -> str:
        return f"{SOURCE}:{task}:{sum(r.task == task for r in self.records):03d}"

    def qa(
        self,
        rng: np.random.Generator,
        scene: Scene,
        task_type: str,
        question: str,
        answer: str | None,
        distractors: Sequence[str],
        *,
        at_s: int,
        anchor: int,
        span: tuple[int, int] | None = None,
        answer_at: int | None = None,
        needs_audio: bool = False,
    ) -> None:
        """A QA asked at whole second `at_s`, its evidence starting at frame `anchor`.

        Options: four candidates in random order (the answer at position `answer_at` when
        given), then "Unable to answer" unless the question needs the sound (those are
        always answerable). `distractors` are used in the order given (callers shuffle them);
        `answer` None means the video cannot answer the question. The evidence span defaults
        to [anchor, question].
        """
        candidates = [d for d in dict.fromkeys(distractors) if d != answer]
        texts = candidates[: 4 if answer is None else 3]
        if answer is not None:
            texts.insert(int(rng.integers(4)) if answer_at is None else answer_at, answer)
        if not needs_audio:
            texts.append(UNABLE)
        labels = "ABCDE"[: len(texts)]
        spans: tuple[EvidenceSpan, ...] = ()
        if answer is not None:
            start, end = span or (anchor, at_s * FPS)
            spans = (EvidenceSpan(start_s=_sec(start), end_s=_sec(end), description=task_type),)
        self.records.append(
            QARecord(
                record_id=self._next_id("qa"),
                source_id=f"{scene.name}@{at_s}s",
                source_benchmark=SOURCE,
                task_type=task_type,
                video_path=scene.video_path,
                question=question,
                options=tuple(
                    f"{label}. {text}" for label, text in zip(labels, texts, strict=True)
                ),
                answer=labels[texts.index(UNABLE if answer is None else answer)],
                question_time_s=float(at_s),
                evidence_anchor_s=_sec(anchor),
                evidence_spans=spans,
                metadata=self._meta(scene),
                needs_audio=needs_audio,
            )
        )

    def proactive(
        self,
        scene: Scene,
        task_type: str,
        instruction: str,
        instruction_s: int,
        triggers: Sequence[Trigger],
        needs_audio: bool = False,
    ) -> None:
        self.records.append(
            ProactiveRecord(
                record_id=self._next_id("proactive"),
                source_id=f"{scene.name}@{instruction_s}s",
                source_benchmark=SOURCE,
                task_type=task_type,
                video_path=scene.video_path,
                instruction=instruction,
                instruction_time_s=float(instruction_s),
                triggers=tuple(triggers),
                metadata=self._meta(scene),
                needs_audio=needs_audio,
            )
        )

    def present_colour(
        self, rng: np.random.Generator, scene: Scene, kind: str, used: list[int]
    ) -> None:
        """The colour of the one `kind` shape, asked at a second not in `used` (then added)."""
        shape = scene.the(kind)
        changes = shape.change_frames()
        second = _pick(rng, _stable_seconds(changes, scene.frames, used))
        used.append(second)
        question = Q_PRESENT_COLOUR.format(shape=kind)
        colour = shape.colour_at(second * FPS)
        anchor = _last_change(changes, second * FPS)
        distractors = _shuffled(rng, COLOURS)
        self.qa(
            rng, scene, "present_color", question, colour, distractors, at_s=second, anchor=anchor
        )

    def past_digit(self, rng: np.random.Generator, scene: Scene, index: int) -> None:
        """Asked >= 1 s after the digit went away, >= 1 s before the next one, <= 10 s after
        its onset (so the Core's 10 s history before the anchor holds all of it)."""
        digit = scene.digits[index]
        latest = digit.start + 10 * FPS
        if index + 1 < len(scene.digits):
            latest = min(latest, scene.digits[index + 1].start - FPS)
        second = int(rng.integers(ceil((digit.end + FPS) / FPS), floor(latest / FPS) + 1))
        # The digit shown before is the most tempting wrong answer, so offer it when there is one.
        earlier = [str(scene.digits[index - 1].value)] if index > 0 else []
        distractors = [*earlier, *_shuffled(rng, [str(v) for v in range(10)])]
        self.qa(
            rng,
            scene,
            "past_digit",
            Q_LAST_DIGIT,
            str(digit.value),
            distractors,
            at_s=second,
            anchor=digit.start,
            span=(digit.start, digit.end),
        )

    def present_digit(self, rng: np.random.Generator, scene: Scene, index: int) -> None:
        """Asked while the digit is on screen, >= 1 s after it appeared."""
        digit = scene.digits[index]
        second = int(rng.integers(ceil((digit.start + FPS) / FPS), (digit.end - 1) // FPS + 1))
        distractors = _shuffled(rng, [str(v) for v in range(10)])
        self.qa(
            rng,
            scene,
            "present_digit",
            Q_PRESENT_DIGIT,
            str(digit.value),
            distractors,
            at_s=second,
            anchor=digit.start,
        )

    def unanswerable(
        self,
        rng: np.random.Generator,
        scene: Scene,
        question: str,
        options: Sequence[str],
        at_s: int,
        anchor: int,
    ) -> None:
        self.qa(
            rng,
            scene,
            "unanswerable",
            question,
            None,
            _shuffled(rng, options),
            at_s=at_s,
            anchor=anchor,
        )


# ----------------------------------------------------------------------------- videos


def _colours_video(rng: np.random.Generator, records: _Records) -> Scene:
    """One shape of each kind, each changing colour every 5-9 s; four present-colour QAs."""
    frames = 40 * FPS
    shapes = tuple(
        _shape(rng, kind, slot, _colour_timeline(rng, frames))
        for kind, slot in zip(SHAPES, _slots(rng, 3), strict=True)
    )
    scene = Scene("v0_colours", frames, shapes)
    used: list[int] = []
    for kind in (*SHAPES, _pick(rng, SHAPES)):
        records.present_colour(rng, scene, kind, used)
    return scene


def _digits_video(rng: np.random.Generator, records: _Records) -> Scene:
    """Digits come and go among two steady shapes; three past-digit QAs, one present-digit."""
    frames = 45 * FPS
    shapes = tuple(
        _shape(rng, kind, slot, _constant(_pick(rng, COLOURS)))
        for kind, slot in zip(("circle", "triangle"), _slots(rng, 2), strict=True)
    )
    digits = _digit_sequence(rng, int(rng.integers(20, 31)), frames)
    scene = Scene("v1_digits", frames, shapes, digits, int(rng.integers(20, 145)))
    for index in range(3):
        records.past_digit(rng, scene, index)
    records.present_digit(rng, scene, 3)
    return scene


def _no_triangle_video(rng: np.random.Generator, records: _Records) -> Scene:
    """Circles and a square, no triangle and no digit ever: two unanswerable QAs."""
    frames = 25 * FPS
    shapes = tuple(
        _shape(rng, kind, slot, _colour_timeline(rng, frames))
        for kind, slot in zip(("circle", "circle", "square"), _slots(rng, 3), strict=True)
    )
    scene = Scene("v2_no_triangle", frames, shapes)
    second = int(rng.integers(8, 16))
    question = Q_PRESENT_COLOUR.format(shape="triangle")
    records.unanswerable(rng, scene, question, COLOURS, at_s=second, anchor=second * FPS)
    # Anchored at 0 so that every profile delivers the whole video: no digit anywhere in it.
    digits = [str(v) for v in range(10)]
    records.unanswerable(rng, scene, Q_LAST_DIGIT, digits, at_s=int(rng.integers(16, 24)), anchor=0)
    return scene


def _count_video(rng: np.random.Generator, records: _Records, name: str) -> Scene:
    """Circles appear and vanish 3-5 times, 4-8 s apart (at least one gap under 5 s)."""
    instruction_s = int(rng.integers(2, 4))
    n_changes = int(rng.integers(3, 6))
    gaps = rng.integers(40, 81, size=n_changes - 1)
    gaps[int(rng.integers(n_changes - 1))] = int(rng.integers(40, 49))
    first = instruction_s * FPS + int(rng.integers(30, 51))
    change_frames = [first, *(first + np.cumsum(gaps)).tolist()]
    frames = change_frames[-1] + int(rng.integers(60, 91))

    counts = [int(rng.integers(1, 4))]
    for _ in change_frames:
        nearby = range(max(1, counts[-1] - 2), min(5, counts[-1] + 2) + 1)
        counts.append(_pick(rng, nearby, exclude=[counts[-1]]))

    # Each circle keeps its slot and colour while shown; the set changes only at change frames.
    square_slot, *circle_slots = rng.permutation(len(_SLOT_CENTRES)).tolist()
    alive: dict[int, tuple[int, str]] = {}  # slot -> (first frame shown, colour)
    circles: list[Shape] = []
    for frame, count in zip([0, *change_frames], counts, strict=True):
        while len(alive) > count:
            slot = _pick(rng, sorted(alive))
            since, colour = alive.pop(slot)
            circles.append(_shape(rng, "circle", slot, _constant(colour), (since, frame)))
        while len(alive) < count:
            alive[_pick(rng, circle_slots, exclude=list(alive))] = (frame, _pick(rng, COLOURS))
    for slot, (since, colour) in sorted(alive.items()):
        circles.append(_shape(rng, "circle", slot, _constant(colour), (since, frames)))
    square = _shape(rng, "square", square_slot, _constant(_pick(rng, COLOURS)))
    scene = Scene(name, frames, (square, *circles))

    ends = [*change_frames[1:], frames]
    triggers = [
        Trigger(
            trigger_type="event_onset",
            answer=str(count),
            point_s=_sec(frame),
            evidence_start_s=_sec(frame),
            evidence_end_s=_sec(end),
        )
        for frame, end, count in zip(change_frames, ends, counts[1:], strict=True)
    ]
    instruction = I_COUNT_CHANGE.format(shape="circle")
    records.proactive(scene, "count_change", instruction, instruction_s, triggers)

    second = _pick(rng, _stable_seconds(change_frames, frames))
    count = counts[sum(f <= second * FPS for f in change_frames)]
    question = Q_PRESENT_COUNT.format(shape="circle")
    distractors = _shuffled(rng, [str(n) for n in range(7)])
    anchor = _last_change(change_frames, second * FPS)
    records.qa(
        rng, scene, "present_count", question, str(count), distractors, at_s=second, anchor=anchor
    )
    return scene


def _state_video(rng: np.random.Generator, records: _Records) -> Scene:
    """The square cycles n, A, n, B, n, A, ... (n: any other colour); one colour-state task
    for A (three intervals) and one for B (two), plus a present-colour QA."""
    target_a = _pick(rng, COLOURS)
    target_b = _pick(rng, COLOURS, exclude=[target_a])
    pattern = ["n", target_a, "n", target_b] * 2 + ["n", target_a, "n"]
    timeline: list[tuple[int, str]] = []
    start = 0
    for position, colour in enumerate(pattern):
        if colour == "n":
            colour = _pick(rng, COLOURS, exclude=[target_a, target_b])
        timeline.append((start, colour))
        # The first colour lasts past both instructions; later ones 3-5 s.
        start += int(rng.integers(50, 71) if position == 0 else rng.integers(30, 51))
    frames = start

    square_slot, *other_slots = _slots(rng, 3)
    square = _shape(rng, "square", square_slot, tuple(timeline))
    distractors = tuple(
        _shape(rng, kind, slot, _colour_timeline(rng, frames))
        for kind, slot in zip(("circle", "triangle"), other_slots, strict=True)
    )
    scene = Scene("v5_state", frames, (square, *distractors))

    ends = [s for s, _ in timeline[1:]] + [frames]
    for target, instruction_s in ((target_a, 2), (target_b, 3)):
        triggers = [
            Trigger(
                trigger_type="state_interval",
                answer=target,
                interval_start_s=_sec(s),
                interval_end_s=_sec(e),
                evidence_start_s=_sec(s),
                evidence_end_s=_sec(e),
            )
            for (s, colour), e in zip(timeline, ends, strict=True)
            if colour == target
        ]
        instruction = I_COLOUR_STATE.format(colour=target, shape="square")
        records.proactive(scene, "color_state", instruction, instruction_s, triggers)
    records.present_colour(rng, scene, "square", [])
    return scene


def _mixed_video(rng: np.random.Generator, records: _Records) -> Scene:
    """A changing circle, a steady square and digits: past digit, present colour, no triangle."""
    frames = 30 * FPS
    circle_slot, square_slot = _slots(rng, 2)
    circle = _shape(rng, "circle", circle_slot, _colour_timeline(rng, frames))
    square = _shape(rng, "square", square_slot, _constant(_pick(rng, COLOURS)))
    digits = _digit_sequence(rng, int(rng.integers(30, 61)), frames)
    scene = Scene("v6_mixed", frames, (circle, square), digits, int(rng.integers(20, 145)))
    records.past_digit(rng, scene, 1)
    records.present_colour(rng, scene, "circle", [])
    second = int(rng.integers(10, 28))
    question = Q_PRESENT_COLOUR.format(shape="triangle")
    records.unanswerable(rng, scene, question, COLOURS, at_s=second, anchor=second * FPS)
    return scene


# ----------------------------------------------------------------------------- videos with sound


def _sound_answer_at(records: _Records) -> int:
    """Where the next sound question puts its answer among its four options.

    The eight sound questions of a seed take the positions of a seeded shuffle of
    0,0,1,1,2,2,3,3: every label is right twice, so an adapter that cannot hear and always
    picks one label scores exactly 1/4, the chance of a uniform guess among four options.
    """
    done = sum(isinstance(r, QARecord) and r.needs_audio for r in records.records)
    order = np.random.default_rng([records.seed, len(SILENT.videos)]).permutation(8) // 2
    return int(order[done])


def _noise_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(1 << 31))


def _beeps_video(rng: np.random.Generator, records: _Records) -> Scene:
    """4-6 beeps 5-8 s apart among two shapes changing colour at other times: a proactive
    task (say when each beep starts) and three beep counts."""
    instruction_s = 2
    n_beeps = int(rng.integers(4, 7))
    first = instruction_s * FPS + int(rng.integers(30, 51))
    onsets = [first, *(first + np.cumsum(rng.integers(50, 81, size=n_beeps - 1))).tolist()]
    frames = onsets[-1] + int(rng.integers(60, 81))
    shapes = tuple(
        _shape(rng, kind, slot, _colour_timeline(rng, frames))
        for kind, slot in zip(("circle", "square"), _slots(rng, 2), strict=True)
    )
    beeps = tuple(Tone(onset, BEEP_FRAMES, BEEP_HZ) for onset in onsets)
    scene = Scene("v7_beeps", frames, shapes, sound=Soundtrack(beeps, _noise_seed(rng)))
    triggers = [
        Trigger(
            trigger_type="event_onset",
            answer="beep",
            point_s=_sec(onset),
            evidence_start_s=_sec(onset),
            evidence_end_s=_sec(onset + BEEP_FRAMES),
        )
        for onset in onsets
    ]
    records.proactive(scene, "beep_onset", I_BEEP_ONSET, instruction_s, triggers, needs_audio=True)
    for heard in sorted(rng.choice(np.arange(1, n_beeps + 1), 3, replace=False).tolist()):
        # Asked >= 1 s after the beep ended, >= 0.5 s before the next one starts.
        after = onsets[heard - 1] + BEEP_FRAMES + FPS
        before = (onsets[heard] if heard < n_beeps else frames) - FPS // 2
        second = int(rng.integers(ceil(after / FPS), before // FPS + 1))
        distractors = _shuffled(rng, [str(n) for n in range(1, 9)])
        records.qa(
            rng,
            scene,
            "beep_count",
            Q_BEEP_COUNT,
            str(heard),
            distractors,
            at_s=second,
            anchor=onsets[0],
            span=(onsets[0], onsets[heard - 1] + BEEP_FRAMES),
            answer_at=_sound_answer_at(records),
            needs_audio=True,
        )
    return scene


def _pitches_video(rng: np.random.Generator, records: _Records) -> Scene:
    """Two pairs of tones of two different pitches, 8-12 s apart, among steady shapes: for
    each pair, which pitch came first."""
    shapes = tuple(
        _shape(rng, kind, slot, _constant(_pick(rng, COLOURS)))
        for kind, slot in zip(("triangle", "square"), _slots(rng, 2), strict=True)
    )
    first = int(rng.integers(30, 61))
    starts = [first, first + int(rng.integers(80, 121))]
    tones: list[Tone] = []
    for start in starts:
        pitches = rng.choice(len(PITCHES_HZ), 2, replace=False).tolist()
        second_onset = start + PITCH_FRAMES + int(rng.integers(2, 5))
        for onset, pitch in zip((start, second_onset), pitches, strict=True):
            tones.append(Tone(onset, PITCH_FRAMES, PITCHES_HZ[pitch]))
    frames = tones[-1].onset + PITCH_FRAMES + int(rng.integers(40, 61))
    scene = Scene("v8_pitches", frames, shapes, sound=Soundtrack(tuple(tones), _noise_seed(rng)))
    for pair, start in enumerate(starts):
        opening, closing = tones[2 * pair], tones[2 * pair + 1]
        end = closing.onset + PITCH_FRAMES
        before = (starts[pair + 1] if pair + 1 < len(starts) else frames) - FPS // 2
        second = int(rng.integers(ceil((end + FPS) / FPS), before // FPS + 1))
        records.qa(
            rng,
            scene,
            "pitch_order",
            Q_FIRST_PITCH,
            pitch_text(opening.hz),
            _shuffled(rng, [pitch_text(hz) for hz in PITCHES_HZ]),
            at_s=second,
            anchor=start,
            span=(start, end),
            answer_at=_sound_answer_at(records),
            needs_audio=True,
        )
    return scene


def _beep_digits_video(rng: np.random.Generator, records: _Records) -> Scene:
    """The ten digits once each, 2-2.5 s on screen with 1-1.5 s gaps; a beep sounds as the
    3rd, 6th and 9th appears. Each is asked about once one or two more digits have come, so
    neither the digit on screen nor the last one shown tells a viewer which it was."""
    values = rng.permutation(10).tolist()
    digits: list[Digit] = []
    start = int(rng.integers(20, 31))
    for value in values:
        shown = int(rng.integers(20, 26))
        digits.append(Digit(value, start, start + shown))
        start += shown + int(rng.integers(10, 16))
    frames = digits[-1].end + int(rng.integers(20, 31))
    beeped = (2, 5, 8)
    beeps = tuple(Tone(digits[j].start, BEEP_FRAMES, BEEP_HZ) for j in beeped)
    shapes = (_shape(rng, "circle", _slots(rng, 1)[0], _constant(_pick(rng, COLOURS))),)
    sound = Soundtrack(beeps, _noise_seed(rng))
    scene = Scene(
        "v9_beep_digits", frames, shapes, tuple(digits), int(rng.integers(20, 145)), sound
    )
    for j in beeped:
        later = int(rng.integers(1, 3)) if j + 2 < len(digits) else 1
        # Asked >= 1 s after the later digit appeared, >= 0.5 s before the next one does.
        after = digits[j + later].start + FPS
        before = (digits[j + later + 1].start if j + later + 1 < len(digits) else frames) - 5
        second = int(rng.integers(ceil(after / FPS), before // FPS + 1))
        # The digits around it, all shown within the Core's 10 s history before the beep.
        nearby = [str(digits[k].value) for k in range(j - 2, j + later + 1) if k != j]
        records.qa(
            rng,
            scene,
            "beep_digit",
            Q_BEEP_DIGIT,
            str(digits[j].value),
            _shuffled(rng, nearby),
            at_s=second,
            anchor=digits[j].start,
            span=(digits[j].start, digits[j].end),
            answer_at=_sound_answer_at(records),
            needs_audio=True,
        )
    return scene


# Builds one video's scene from its own Generator, adding its records.
VideoBuilder = Callable[[np.random.Generator, _Records], Scene]


@dataclass(frozen=True)
class Edition:
    """A benchmark the generator writes: its name and its videos, in order. Video i draws
    from Generator([seed, i]), so an edition that appends videos to another keeps that
    one's records and bytes, and its record numbers, for the videos they share."""

    name: str
    videos: tuple[VideoBuilder, ...]


SILENT = Edition(
    SOURCE,
    (
        _colours_video,
        _digits_video,
        _no_triangle_video,
        partial(_count_video, name="v3_count"),
        partial(_count_video, name="v4_count"),
        _state_video,
        _mixed_video,
    ),
)
AUDIO_VISUAL = Edition(
    AUDIO_VISUAL_NAME, (*SILENT.videos, _beeps_video, _pitches_video, _beep_digits_video)
)

# ----------------------------------------------------------------------------- rendering


def _sprite(kind: str) -> np.ndarray:
    size = SHAPE_SIZE
    ys, xs = np.mgrid[0:size, 0:size]
    centre = (size - 1) / 2
    if kind == "square":
        return np.ones((size, size), bool)
    if kind == "circle":
        return (ys - centre) ** 2 + (xs - centre) ** 2 <= (size / 2) ** 2
    # An upright triangle, apex at the top middle, base the full width of the bottom row.
    return np.abs(xs - centre) <= (ys + 1) / 2


_SPRITES = {kind: _sprite(kind) for kind in SHAPES}
COLOUR_INDEX = {name: i + 1 for i, name in enumerate(COLOURS)}  # 0 is the background


def _bt601(rgb: np.ndarray) -> np.ndarray:
    """RGB -> limited-range Y'CbCr (BT.601), what decoders assume for SD video."""
    matrix = np.array(
        [[65.481, 128.553, 24.966], [-37.797, -74.203, 112.0], [112.0, -93.786, -18.214]]
    )
    return rgb / 255.0 @ matrix.T + np.array([16.0, 128.0, 128.0])


# Y, U, V of each palette index (0 = background).
_YUV_OF_INDEX = np.rint(_bt601(np.array([BACKGROUND_RGB, *PALETTE.values()], float)))
_YUV_OF_INDEX = _YUV_OF_INDEX.astype(np.uint8).T.copy()


def render_digit(canvas: np.ndarray, value: int, x: int, y: int, ink: int) -> None:
    """Draw a seven-segment digit with its top-left corner at (x, y) into an index image."""
    for segment in DIGIT_SEGMENTS[value]:
        x0, y0, x1, y1 = SEGMENT_RECTS[segment]
        canvas[y + y0 : y + y1, x + x0 : x + x1] = ink


def _slide(frame: int, phase: int) -> int:
    """A triangle wave in whole pixels, -_SLIDE_PX..+_SLIDE_PX, one pixel per frame."""
    u = (frame + phase) % (4 * _SLIDE_PX)
    return u - _SLIDE_PX if u < 2 * _SLIDE_PX else 3 * _SLIDE_PX - u


def render_indices(scene: Scene, frame: int) -> np.ndarray:
    """The frame as palette indices (0 = background): exact, so encoding is the only noise."""
    canvas = np.zeros((HEIGHT, WIDTH), np.uint8)
    half = SHAPE_SIZE // 2
    for shape in scene.shapes:
        if not shape.shown[0] <= frame < shape.shown[1]:
            continue
        cx, cy = _SLOT_CENTRES[shape.slot]
        x, y = cx - half + _slide(frame, shape.phase), cy - half
        view = canvas[y : y + SHAPE_SIZE, x : x + SHAPE_SIZE]
        view[_SPRITES[shape.kind]] = COLOUR_INDEX[shape.colour_at(frame)]
    for digit in scene.digits:
        if digit.start <= frame < digit.end:
            render_digit(canvas, digit.value, _DIGIT_X, scene.digit_y, COLOUR_INDEX[DIGIT_COLOUR])
    return canvas


def _to_yuv420p(indices: np.ndarray) -> np.ndarray:
    """Index image -> PyAV's yuv420p array layout: Y rows, then the U plane, then V.

    Chroma takes the top-left sample of each 2x2 block: edges may be off by one pixel in
    colour, which the readers of these videos must tolerate anyway after JPEG.
    """
    y_of, u_of, v_of = _YUV_OF_INDEX
    block = indices[0::2, 0::2]
    planes = (np.take(y_of, indices), np.take(u_of, block), np.take(v_of, block))
    return np.concatenate([plane.reshape(-1, WIDTH) for plane in planes])


def _encode(scene: Scene, path: Path) -> None:
    pcm = None if scene.sound is None else render_pcm(scene.sound, scene.frames, FPS)
    write_video(path, scene.frames, partial(render_indices, scene), pcm=pcm)


def write_video(
    path: Path,
    frames: int,
    render: Callable[[int], np.ndarray],
    x264: Mapping[str, str] | None = None,
    pcm: np.ndarray | None = None,
) -> None:
    """H.264 in MP4 at FPS of `frames` index images (`render(frame)`: 0 the background, then
    the PALETTE colours in order), written to a temporary name first so a crash leaves no
    half video. `x264` adds encoder options (the causality audit's `tune`). `pcm` (int16
    mono at SAMPLE_RATE, one video frame's worth per frame) becomes an uncompressed audio
    track: PCM decodes to exactly these samples, where AAC would add priming samples and
    coding noise, so the onsets heard are the onsets written."""
    unfinished = path.with_suffix(".partial.mp4")
    with av.open(str(unfinished), "w") as container:
        # One x264 thread: the bytes then do not depend on how many cores the machine has.
        options = {"crf": "18", "preset": "superfast", "threads": "1", **(x264 or {})}
        stream = container.add_stream("libx264", rate=FPS, options=options)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.codec_context.gop_size = GOP
        sound = None if pcm is None else _audio_stream(container)
        per_frame = SAMPLE_RATE // FPS
        for frame in range(frames):
            image = av.VideoFrame.from_ndarray(_to_yuv420p(render(frame)), "yuv420p")
            image.pts = frame
            container.mux(stream.encode(image))
            if sound is not None and pcm is not None:
                samples = pcm[frame * per_frame : (frame + 1) * per_frame]
                chunk = av.AudioFrame.from_ndarray(samples[None, :], format="s16", layout="mono")
                chunk.sample_rate, chunk.pts = SAMPLE_RATE, frame * per_frame
                container.mux(sound.encode(chunk))
        container.mux(stream.encode(None))
        if sound is not None:
            container.mux(sound.encode(None))
    os.replace(unfinished, path)


def _audio_stream(container: av.container.OutputContainer) -> av.AudioStream:
    sound = container.add_stream("pcm_s16le", rate=SAMPLE_RATE)
    sound.layout, sound.format = "mono", "s16"
    return sound


# ----------------------------------------------------------------------------- public API


def _version(seed: int) -> str:
    return f"{GENERATOR_VERSION}+seed.{seed}"


def generate(
    out_dir: Path, seed: int = 0, progress: Progress = NO_PROGRESS, edition: Edition = SILENT
) -> Benchmark:
    """Write `videos/*.mp4` and `benchmark.json` of `edition` under `out_dir`; return the
    benchmark.

    `progress` hears of each video written (Phase.BENCHMARK)."""
    out_dir = Path(out_dir)
    progress.start(Phase.BENCHMARK, len(edition.videos))
    (out_dir / "videos").mkdir(parents=True, exist_ok=True)
    # The index goes first and comes back last: an interrupted run never leaves an index
    # that vouches for half-rewritten videos.
    (out_dir / "benchmark.json").unlink(missing_ok=True)
    records = _Records(seed)
    scenes = [
        build(np.random.default_rng([seed, i]), records) for i, build in enumerate(edition.videos)
    ]
    # Videos are independent and PyAV encodes without the GIL: one thread per core.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        writing = [pool.submit(_encode, scene, out_dir / scene.video_path) for scene in scenes]
        for written, video in enumerate(as_completed(writing), start=1):
            video.result()
            progress.advance(Phase.BENCHMARK, written)
    benchmark = Benchmark(
        name=edition.name, version=_version(seed), video_root=".", records=records.records
    )
    unfinished = out_dir / "benchmark.json.partial"
    unfinished.write_text(benchmark.model_dump_json(indent=1))
    os.replace(unfinished, out_dir / "benchmark.json")
    progress.finish(Phase.BENCHMARK)
    return benchmark.model_copy(update={"video_root": str(out_dir)})


def load_or_generate(
    out_dir: Path, seed: int = 0, progress: Progress = NO_PROGRESS, edition: Edition = SILENT
) -> Benchmark:
    """Reuse `out_dir` when it holds this generator version's output of `edition` for
    `seed`, else generate.

    An unreadable benchmark.json is only a stale cache here, so it is regenerated.
    `progress` hears of the videos generated, or that they were cached.
    """
    out_dir = Path(out_dir)
    path = out_dir / "benchmark.json"
    if path.exists():
        try:
            benchmark = load_benchmark_file(path)
        except BenchmarkError:
            return generate(out_dir, seed, progress, edition)
        root = Path(benchmark.video_root)
        videos = {root / record.video_path for record in benchmark.records}
        current = (benchmark.name, benchmark.version) == (edition.name, _version(seed))
        if current and all(video.is_file() for video in videos):
            progress.cached(Phase.BENCHMARK, len(videos))
            return benchmark
    return generate(out_dir, seed, progress, edition)
