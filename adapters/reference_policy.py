"""The reference policy: answers the synthetic benchmark from pixels and, for the tasks
of `synthetic-av`, from the sound it hears (reference_audio.py).

It knows what any image-analysis program written for these videos would know (the palette,
the three shapes, the seven-segment digit glyphs, the four named pitches and the question
templates) and nothing else: no scene description, no ground truth, no I/O. Each frame is
reduced to a small summary (which shapes in which colours, which digit) and the frame itself
is dropped. A question about sound it has not heard gets no reply of its own (the options
of those questions have no "Unable to answer", so it guesses the first label).

Per frame: subsample to about 160 pixels wide, map every pixel to a palette colour or to
nothing through a lookup table (pixels far from every palette colour, such as JPEG-blurred
edges, map to nothing), label connected components of equal colour, and classify each
component by its bounding box: tall ones are digits (read by probing the seven segment
centres), roughly square ones are shapes (a triangle is bottom-heavy, a square fills its
box, a circle fills ~79% of it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streameval.adapters.reference_audio import Hearing
from streameval.core.benchmark.synthetic import (
    DIGIT_SEGMENTS,
    GLYPH_H,
    GLYPH_W,
    PALETTE,
    SEGMENT_RECTS,
    SHAPES,
    UNABLE,
)
from streameval.core.benchmark.synthetic_sound import PITCHES_HZ, pitch_text

WORK_WIDTH = 160
# A pixel belongs to a palette colour when it lies within this RGB distance of it. The
# palette colours are >= 190 apart and the background ~250 from the nearest, so 80 keeps
# JPEG noise inside a shape and drops the blurred rims, which are about halfway between.
MAX_COLOUR_DISTANCE = 80.0
# Components smaller than this share of the analysed image are noise (a shape is ~1.3%).
MIN_AREA_SHARE = 0.002

_COLOUR_NAMES = tuple(PALETTE)
_DIGIT_OF_SEGMENTS = {frozenset(segments): digit for digit, segments in DIGIT_SEGMENTS.items()}
# Where to probe each segment, as fractions of the glyph box: the centre of its rectangle,
# which no other segment covers.
_SEGMENT_PROBES = {
    name: ((x0 + x1) / 2 / GLYPH_W, (y0 + y1) / 2 / GLYPH_H)
    for name, (x0, y0, x1, y1) in SEGMENT_RECTS.items()
}
# A "1" lights only the right column: its box is as wide as one segment is thick.
_ONE_MAX_ASPECT = 0.3


def _colour_table() -> np.ndarray:
    """Palette index (1-based, 0 = none) for every RGB colour quantised to 32 levels."""
    centres = np.arange(32) * 8 + 4
    grid = np.stack(np.meshgrid(centres, centres, centres, indexing="ij"), axis=-1)
    palette = np.array(list(PALETTE.values()), dtype=float)
    distance = np.linalg.norm(grid.reshape(-1, 1, 3) - palette, axis=-1)
    nearest = distance.argmin(axis=1)
    inside = distance[np.arange(len(nearest)), nearest] <= MAX_COLOUR_DISTANCE
    return np.where(inside, nearest + 1, 0).astype(np.uint8)


_COLOUR_TABLE = _colour_table()


def classify_pixels(rgb: np.ndarray, work_width: int = WORK_WIDTH) -> np.ndarray:
    """HxWx3 uint8 -> HxW palette indices (0 = no palette colour), at about `work_width`
    pixels wide."""
    step = max(1, round(rgb.shape[1] / work_width))
    work = rgb[::step, ::step] >> 3
    code = (work[..., 0].astype(np.uint16) << 10) | (work[..., 1].astype(np.uint16) << 5)
    return np.take(_COLOUR_TABLE, code | work[..., 2])


# ----------------------------------------------------------------------------- components


@dataclass(frozen=True, slots=True)
class Blob:
    """A 4-connected component of one palette colour; the box is [x0, x1) x [y0, y1).

    `top_area` counts its pixels in the upper half of the box (the middle row of an odd
    height included), which tells a triangle, wide at the bottom, from everything else.
    """

    colour: int
    x0: int
    y0: int
    x1: int
    y1: int
    area: int
    top_area: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    @property
    def height(self) -> int:
        return self.y1 - self.y0


def _runs(classes: np.ndarray) -> tuple[np.ndarray, ...]:
    """Horizontal runs of one nonzero class: (row, start, end, class), in raster order."""
    padded = np.pad(classes, ((0, 0), (1, 1)))
    rows, cols = np.nonzero(padded[:, 1:] != padded[:, :-1])
    # Consecutive boundaries within a row enclose a run of constant class.
    same_row = rows[:-1] == rows[1:]
    row, start, end = rows[:-1][same_row], cols[:-1][same_row], cols[1:][same_row]
    cls = classes[row, start]
    keep = cls != 0
    return row[keep], start[keep], end[keep], cls[keep]


def _component_of_runs(row: list[int], start: list[int], end: list[int], cls: list[int]):
    """Union-find over runs: same class and overlapping columns on adjacent rows join.

    Runs come in raster order, so the runs of the previous row form one contiguous slice
    and a two-pointer sweep finds each run's overlapping neighbours above it.
    """
    parent = list(range(len(row)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    above_lo = above_hi = lo = 0
    while lo < len(row):
        hi = lo
        while hi < len(row) and row[hi] == row[lo]:
            hi += 1
        if lo > 0 and row[above_lo] == row[lo] - 1:
            j = above_lo
            for i in range(lo, hi):
                while j < above_hi and end[j] <= start[i]:
                    j += 1
                k = j
                while k < above_hi and start[k] < end[i]:
                    if cls[k] == cls[i]:
                        parent[root(i)] = root(k)
                    k += 1
        above_lo, above_hi, lo = lo, hi, hi
    return [root(i) for i in range(len(row))]


def find_blobs(classes: np.ndarray) -> list[Blob]:
    """4-connected components of equal nonzero class, by run-length labelling (no scipy)."""
    row, start, end, cls = _runs(classes)
    if len(row) == 0:
        return []
    roots = _component_of_runs(row.tolist(), start.tolist(), end.tolist(), cls.tolist())
    first_run, label = np.unique(roots, return_inverse=True)
    n = len(first_run)
    length = end - start
    x0, y0 = np.full(n, classes.shape[1]), np.full(n, classes.shape[0])
    x1, y1 = np.zeros(n, int), np.zeros(n, int)
    np.minimum.at(x0, label, start)
    np.minimum.at(y0, label, row)
    np.maximum.at(x1, label, end)
    np.maximum.at(y1, label, row + 1)
    area = np.bincount(label, weights=length, minlength=n)
    top_area = np.bincount(label, weights=length * (2 * row < y0[label] + y1[label]), minlength=n)
    columns = (cls[first_run], x0, y0, x1, y1, area, top_area)
    return [Blob(*(int(c[i]) for c in columns)) for i in range(n)]


# ----------------------------------------------------------------------------- reading


def read_digit(blob: Blob, classes: np.ndarray) -> int | None:
    """The digit a tall blob shows, or None when its lit segments spell no digit."""
    if blob.width < _ONE_MAX_ASPECT * blob.height:
        return 1
    lit = frozenset(
        name
        for name, (fx, fy) in _SEGMENT_PROBES.items()
        if classes[blob.y0 + int(fy * blob.height), blob.x0 + int(fx * blob.width)] == blob.colour
    )
    return _DIGIT_OF_SEGMENTS.get(lit)


def shape_of(blob: Blob) -> str | None:
    """circle, square or triangle, or None for a blob that is none of them.

    A triangle keeps ~25% of its pixels in the top half of its box (circles and squares
    50%), and still ~32% when blur has eaten its apex; a square fills its box (>= 94% seen
    after JPEG at 160 px), a circle ~79%.
    """
    if not 0.7 <= blob.height / blob.width <= 1.4:
        return None
    if blob.top_area < 0.4 * blob.area:
        return "triangle"
    fill = blob.area / (blob.width * blob.height)
    if fill >= 0.88:
        return "square"
    return "circle" if fill >= 0.6 else None


@dataclass(frozen=True, slots=True)
class FrameSummary:
    """All the policy keeps of a frame."""

    t: float
    shapes: tuple[tuple[str, str], ...]  # (shape, colour), largest first
    digit: int | None

    def count(self, shape: str) -> int:
        return sum(kind == shape for kind, _ in self.shapes)

    def colour_of(self, shape: str) -> str | None:
        """Colour of the largest shape of this kind on screen, None when there is none."""
        return next((colour for kind, colour in self.shapes if kind == shape), None)


def summarise(t: float, rgb: np.ndarray, work_width: int = WORK_WIDTH) -> FrameSummary:
    classes = classify_pixels(rgb, work_width)
    min_area = MIN_AREA_SHARE * classes.size
    shapes: list[tuple[int, str, str]] = []
    digit = None
    for blob in find_blobs(classes):
        if blob.area < min_area:
            continue
        colour = _COLOUR_NAMES[blob.colour - 1]
        if blob.height >= 1.4 * blob.width:
            digit = read_digit(blob, classes) if digit is None else digit
        elif (kind := shape_of(blob)) is not None:
            shapes.append((blob.area, kind, colour))
    shapes.sort(key=lambda item: -item[0])
    return FrameSummary(t, tuple((kind, colour) for _, kind, colour in shapes), digit)


# ----------------------------------------------------------------------------- tasks

_SHAPE = "(" + "|".join(SHAPES) + ")"
_PRESENT_COLOUR = re.compile(rf"what colou?r is the {_SHAPE} right now", re.IGNORECASE)
_PRESENT_COUNT = re.compile(rf"how many {_SHAPE}s are there right now", re.IGNORECASE)
_PRESENT_DIGIT = re.compile(r"which digit is shown right now", re.IGNORECASE)
_LAST_DIGIT = re.compile(r"what was the last digit shown", re.IGNORECASE)
_COUNT_CHANGE = re.compile(rf"each time the number of {_SHAPE}s changes", re.IGNORECASE)
_COLOUR_STATE = re.compile(rf"say '([^']+)' whenever the {_SHAPE} is (\w+)", re.IGNORECASE)
_BEEP_COUNT = re.compile(r"how many beeps have you heard", re.IGNORECASE)
_FIRST_PITCH = re.compile(r"what was the pitch of the first one", re.IGNORECASE)
_BEEP_DIGIT = re.compile(r"which digit appeared on screen when the last beep", re.IGNORECASE)
_BEEP_ONSET = re.compile(r"say '([^']+)' each time a beep starts", re.IGNORECASE)
# A digit on the first frame at most this long before the heard onset still counts: the
# onset is heard about a millisecond late, and a digit appears with its beep.
_ONSET_SLACK_S = 0.05
_OPTION = re.compile(r"^\s*\(?([A-Za-z])[.):]\s*(.*?)\s*$")


class _CountWatch:
    """Says the new count whenever it differs from the last one said (or the baseline)."""

    def __init__(self, shape: str, baseline: FrameSummary | None) -> None:
        self.shape = shape
        self.said = None if baseline is None else baseline.count(shape)

    def step(self, summary: FrameSummary) -> str | None:
        count = summary.count(self.shape)
        if self.said is None:  # no frame before the instruction: this one is the baseline
            self.said = count
            return None
        if count == self.said:
            return None
        self.said = count
        return str(count)


class _StateWatch:
    """Says `word` once on entering the state "shape has colour", again only after leaving it."""

    def __init__(self, word: str, shape: str, colour: str) -> None:
        self.word, self.shape, self.colour = word, shape, colour
        self.inside = False

    def step(self, summary: FrameSummary) -> str | None:
        entering = summary.colour_of(self.shape) == self.colour and not self.inside
        self.inside = summary.colour_of(self.shape) == self.colour
        return self.word if entering else None


class _OnsetWatch:
    """Says `word` once for every tone heard after the instruction."""

    def __init__(self, word: str, hearing: Hearing) -> None:
        self.word, self.hearing = word, hearing
        self.said = len(hearing.tones())

    def step(self, summary: FrameSummary) -> str | None:
        heard = len(self.hearing.tones())
        if heard <= self.said:
            return None
        self.said = heard
        return self.word


def _pitch_name(hz: float) -> str:
    """The named pitch nearest on a log scale (they lie an octave apart)."""
    return pitch_text(min(PITCHES_HZ, key=lambda pitch: abs(np.log2(hz / pitch))))


class ReferencePolicy:
    """One session's policy: call observe() per frame and hear() per audio chunk, then
    answer() / instruct() + decide()."""

    def __init__(self, work_width: int = WORK_WIDTH) -> None:
        self._work_width = work_width
        self._latest: FrameSummary | None = None
        self._last_digit: int | None = None
        self._digits: list[tuple[float, int | None]] = []  # (t, digit) of every frame
        self._hearing = Hearing()
        self._watch: _CountWatch | _StateWatch | _OnsetWatch | None = None

    def observe(self, t: float, rgb: np.ndarray) -> None:
        self._latest = summarise(t, rgb, self._work_width)
        self._digits.append((t, self._latest.digit))
        if self._latest.digit is not None:
            self._last_digit = self._latest.digit

    def hear(self, start_t: float, sample_rate: int, samples: np.ndarray) -> None:
        """Take in an audio chunk: mono int16 `samples` from video time `start_t`."""
        self._hearing.hear(start_t, sample_rate, samples)

    def answer(self, question: str, options: Sequence[str]) -> str:
        """The label of the option the frames support; "Unable to answer" when they do not.

        Without options the reply itself is returned. With options but neither a supported
        one nor an "Unable to answer" one, the first label is a guess.
        """
        reply = self._reply(question)
        labelled = [_label(position, option) for position, option in enumerate(options)]
        if not labelled:
            return reply if reply is not None else UNABLE
        for wanted in (reply, UNABLE):
            for label, text in labelled:
                if wanted is not None and text.lower() == wanted.lower():
                    return label
        return labelled[0][0]

    def instruct(self, instruction: str) -> None:
        """Start monitoring; an instruction the policy cannot parse keeps it silent.

        For count changes the state at instruction time (the latest frame, when one came
        before the instruction) is the baseline: a change is only news after it.
        """
        if match := _COUNT_CHANGE.search(instruction):
            self._watch = _CountWatch(match.group(1).lower(), self._latest)
        elif (match := _COLOUR_STATE.search(instruction)) and match.group(3).lower() in PALETTE:
            word, shape, colour = match.group(1), match.group(2).lower(), match.group(3).lower()
            self._watch = _StateWatch(word, shape, colour)
        elif match := _BEEP_ONSET.search(instruction):
            self._watch = _OnsetWatch(match.group(1), self._hearing)
        else:
            self._watch = None

    def decide(self) -> str | None:
        if self._watch is None or self._latest is None:
            return None
        return self._watch.step(self._latest)

    def _reply(self, question: str) -> str | None:
        latest = self._latest
        if any(pattern.search(question) for pattern in (_BEEP_COUNT, _FIRST_PITCH, _BEEP_DIGIT)):
            return self._sound_reply(question) if self._hearing.heard else None
        if match := _LAST_DIGIT.search(question):
            return None if self._last_digit is None else str(self._last_digit)
        if latest is None:
            return None
        if match := _PRESENT_COLOUR.search(question):
            return latest.colour_of(match.group(1).lower())
        if match := _PRESENT_COUNT.search(question):
            return str(latest.count(match.group(1).lower()))
        if _PRESENT_DIGIT.search(question):
            return None if latest.digit is None else str(latest.digit)
        return None

    def _sound_reply(self, question: str) -> str | None:
        tones = self._hearing.tones()
        if _BEEP_COUNT.search(question):
            return str(len(tones))
        if _FIRST_PITCH.search(question):
            return _pitch_name(tones[-2].hz) if len(tones) >= 2 else None
        if not tones:
            return None
        # The digit on the first frame of the last beep, which appeared with it.
        onset = tones[-1].onset_s - _ONSET_SLACK_S
        return next((str(d) for t, d in self._digits if t >= onset and d is not None), None)


def _label(position: int, option: str) -> tuple[str, str]:
    """("B", "green") from "B. green"; an unlabelled option gets its positional letter."""
    if match := _OPTION.match(option):
        return match.group(1).upper(), match.group(2)
    return chr(ord("A") + position), option.strip()
