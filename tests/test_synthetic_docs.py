"""docs/adapter-guide.md's description of the synthetic benchmark holds: its colours are the
generator's and what the decoded videos show, its frame size and rate are the files', its
shapes and digits have the sizes and places it gives, and its task table is what the
generator writes (task types, counts, question templates)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest

from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord
from streameval.core.benchmark.synthetic import (
    BACKGROUND_RGB,
    PALETTE,
    UNABLE,
    Digit,
    Scene,
    Shape,
    load_or_generate,
    render_indices,
)

GUIDE = (Path(__file__).resolve().parent.parent / "docs" / "adapter-guide.md").read_text()
SECTION = GUIDE.split("## What the synthetic benchmark shows")[1].split("\n## ")[0]


def documented_colours() -> dict[str, tuple[int, ...]]:
    rows = re.findall(r"^\| (\w+) \| \((\d+), (\d+), (\d+)\) \|$", SECTION, re.M)
    return {name: tuple(map(int, rgb)) for name, *rgb in rows}


def documented_tasks() -> dict[str, tuple[int, str]]:
    """task type -> (records, question or instruction)."""
    rows = re.findall(r"^\| `(\w+)` \| (\d+) \| (.*?) \|", SECTION, re.M)
    return {task: (int(count), text) for task, count, text in rows}


def numbers_after(pattern: str) -> tuple[int, ...]:
    match = re.search(pattern, " ".join(SECTION.split()))
    assert match, pattern
    return tuple(map(int, match.groups()))


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory: pytest.TempPathFactory) -> Benchmark:
    # Shared by every test module of the session (test_reference_policy.py uses it too).
    return load_or_generate(tmp_path_factory.getbasetemp() / "synthetic-seed-0", seed=0)


def test_the_documented_colours_are_the_generators() -> None:
    assert documented_colours() == {"background": BACKGROUND_RGB, **PALETTE}


def test_the_decoded_videos_show_the_documented_size_rate_and_colours(
    benchmark: Benchmark,
) -> None:
    width, height, fps = numbers_after(r"(\d+) x (\d+) pixels, (\d+) fps in the file")
    colours = np.array(list(documented_colours().values()), float)
    for video in sorted({record.video_path for record in benchmark.records}):
        with av.open(str(Path(benchmark.video_root) / video)) as container:
            stream = container.streams.video[0]
            assert (stream.width, stream.height, stream.average_rate) == (width, height, fps)
            rgb = next(container.decode(stream)).to_ndarray(format="rgb24").reshape(-1, 3)
        distance = np.linalg.norm(rgb[:, None, :].astype(float) - colours, axis=-1)
        nearest = distance.argmin(axis=1)
        # Most of the picture is background; all but the blurred edges are a listed colour.
        assert np.bincount(nearest).argmax() == 0, video
        assert np.mean(distance.min(axis=1) <= 30) >= 0.97, video


def test_shapes_and_digits_have_the_documented_sizes_and_places() -> None:
    (side,) = numbers_after(r"upright triangles \(apex at the top\), (\d+) x \d+ pixels")
    glyph_w, glyph_h, thickness = numbers_after(
        r"\(a (\d+) x (\d+) pixel box, segments (\d+) pixels thick\)"
    )
    (grid_width,) = numbers_after(r"slots on the left (\d+) pixels")
    kinds = ("circle", "square", "triangle")
    shapes = tuple(Shape(kind, slot, ((0, "red"),), (0, 10), 0) for slot, kind in enumerate(kinds))
    indices = render_indices(Scene("probe", 10, shapes, (Digit(8, 0, 10),), 80), 0)
    rows, cols = np.nonzero(indices)
    drawn = {}
    for name, mask in (("left", cols < grid_width), ("right", cols >= grid_width)):
        drawn[name] = (rows[mask], cols[mask])
    # The three shapes, one per slot of the grid's first row, each side x side pixels.
    for slot, kind in enumerate(kinds):
        in_slot = drawn["left"][1] // (grid_width // 3) == slot
        ys, xs = drawn["left"][0][in_slot], drawn["left"][1][in_slot]
        assert (np.ptp(ys) + 1, np.ptp(xs) + 1) == (side, side), kind
        if kind == "triangle":
            assert np.sum(ys == ys.min()) <= 2 < np.sum(ys == ys.max())  # apex at the top
    ys, xs = drawn["right"]
    assert (np.ptp(ys) + 1, np.ptp(xs) + 1) == (glyph_h, glyph_w)  # an 8 lights every segment
    assert np.all(indices[ys.min() : ys.min() + thickness, xs.min() : xs.max() + 1])
    assert (indices[ys, xs] == indices[ys[0], xs[0]]).all()  # one colour: white
    assert xs.min() == int(re.search(r"x = (\d+)", " ".join(SECTION.split())).group(1))


def test_the_task_table_is_what_the_generator_writes(benchmark: Benchmark) -> None:
    tasks = documented_tasks()
    records = benchmark.records
    assert {task: count for task, (count, _) in tasks.items()} == dict(
        Counter(record.task_type for record in records)
    )
    qa, proactive, windows = numbers_after(
        r"(\d+) QA and (\d+) proactive \(with seed 0, (\d+) windows\)"
    )
    assert (qa, proactive) == (
        sum(isinstance(r, QARecord) for r in records),
        sum(isinstance(r, ProactiveRecord) for r in records),
    )
    assert windows == sum(len(r.triggers) for r in records if isinstance(r, ProactiveRecord))
    for record in records:
        if isinstance(record, QARecord):
            # Five options, the last "E. Unable to answer", the answer for unanswerable ones.
            assert (len(record.options), record.options[-1]) == (5, f"E. {UNABLE}")
            assert (record.answer == "E") == (record.task_type == "unanswerable")
        if record.task_type == "unanswerable":
            continue
        text = record.question if isinstance(record, QARecord) else record.instruction
        template = tasks[record.task_type][1]
        pattern = re.escape(template).replace(r"\{shape\}", "(circle|square|triangle)")
        pattern = pattern.replace(r"\{colour\}", f"({'|'.join(PALETTE)})")
        assert re.fullmatch(pattern, text), (record.task_type, text)
