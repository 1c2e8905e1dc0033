"""`streameval data sample`: a few records in each source format, on generated videos.

Four short scenes are drawn with the synthetic benchmark's vocabulary (dark background,
coloured circles, squares and triangles, white seven-segment digits: synthetic.py) and
encoded with PyAV. The same questions are then written as a TRACE release directory, an
OVO-Bench file and two StreamingBench files, in each source's own layout, so that every
importer, its protocol profile and its scoring profile can be tried on any machine.

The questions use the synthetic benchmark's templates, so the pixel-reading `reference`
adapter answers all of them except OVO-Bench's REC probes ("How many times has ... been
done so far?"), which ask about an activity and which it does not read.

Every video lies under `videos/` of the output folder, the video root of all three
formats; times are whole seconds, and each asked state has held for 2 s and holds for 1 s
more, as in the synthetic benchmark, so a 1 fps sampling grid sees it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from streameval.core.benchmark.importing import option_letter
from streameval.core.benchmark.synthetic import (
    FPS,
    I_COLOUR_STATE,
    I_COUNT_CHANGE,
    Q_LAST_DIGIT,
    Q_PRESENT_COLOUR,
    Q_PRESENT_COUNT,
    Q_PRESENT_DIGIT,
    UNABLE,
    Digit,
    Scene,
    Shape,
    render_indices,
    write_video,
)

VIDEOS = "videos"
TRACE_DIR = "trace_release"
OVO_FILE = "ovo_bench/ovo_bench_new.json"
STREAMINGBENCH_QA_FILE = "streamingbench/questions_real.json"
STREAMINGBENCH_PROACTIVE_FILE = "streamingbench/questions_proactive.json"
# A point trigger's response window: up to 5 s, until the next trigger (TRACE's policy).
TRACE_WINDOW_S = 5

# ----------------------------------------------------------------------------- scenes


def _s(seconds: int) -> int:
    return seconds * FPS


def _shape(
    kind: str, slot: int, *colours: tuple[int, str], shown: tuple[int, int] | None = None
) -> Shape:
    """A shape in grid slot `slot` taking each (second, colour), the first at 0, shown for
    [start, end) seconds (default: always)."""
    frames = (0, 1 << 30) if shown is None else (_s(shown[0]), _s(shown[1]))
    return Shape(kind, slot, tuple((_s(t), colour) for t, colour in colours), frames, phase=0)


# The square turns from red to blue at 8 s.
COLOURS = Scene(
    "colours",
    _s(16),
    (
        _shape("square", 0, (0, "red"), (8, "blue")),
        _shape("circle", 4, (0, "green")),
        _shape("triangle", 8, (0, "yellow")),
    ),
)
# A 3 from 2 s to 5 s and a 7 from 9 s to 13 s, beside a circle and a square (no triangle).
DIGITS = Scene(
    "digits",
    _s(16),
    (_shape("circle", 3, (0, "blue")), _shape("square", 9, (0, "white"))),
    (Digit(3, _s(2), _s(5)), Digit(7, _s(9), _s(13))),
    digit_y=60,
)
# Circles: one from the start, a second at 6 s, a third at 11 s, which goes at 15 s.
COUNT_CHANGES = ((6, "2"), (11, "3"), (15, "2"))
COUNT = Scene(
    "count",
    _s(20),
    (
        _shape("square", 0, (0, "yellow")),
        _shape("circle", 4, (0, "red")),
        _shape("circle", 6, (0, "green"), shown=(6, 20)),
        _shape("circle", 10, (0, "blue"), shown=(11, 15)),
    ),
)
# The square is white, green from 5 s to 9 s, white again, green from 13 s.
STATE = Scene(
    "state",
    _s(16),
    (
        _shape("square", 1, (0, "white"), (5, "green"), (9, "white"), (13, "green")),
        _shape("circle", 5, (0, "red")),
        _shape("triangle", 9, (0, "blue")),
    ),
)
SCENES = (COLOURS, DIGITS, COUNT, STATE)

# ----------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Ask:
    """One multiple-choice question, whatever the format that writes it."""

    scene: Scene
    at_s: int
    question: str
    choices: tuple[str, ...]  # option texts, in order
    answer: str  # the right option's text
    evidence: tuple[int, int]  # seconds the answer is seen in, [start, end)

    @property
    def letter(self) -> str:
        return option_letter(self.choices.index(self.answer))

    def labelled(self) -> list[str]:
        return [f"{option_letter(i)}. {text}" for i, text in enumerate(self.choices)]


COLOUR_EARLY = Ask(
    COLOURS, 5, Q_PRESENT_COLOUR.format(shape="square"), ("blue", "red", "green", "white"),
    "red", (0, 8),
)  # fmt: skip
COLOUR_LATE = Ask(
    COLOURS, 12, Q_PRESENT_COLOUR.format(shape="square"), ("red", "yellow", "green", "blue"),
    "blue", (8, 16),
)  # fmt: skip
LAST_DIGIT = Ask(DIGITS, 7, Q_LAST_DIGIT, ("7", "5", "3", "8"), "3", (2, 5))
PRESENT_DIGIT = Ask(DIGITS, 11, Q_PRESENT_DIGIT, ("7", "1", "3", "9"), "7", (9, 13))
NO_TRIANGLE = Ask(
    DIGITS, 6, Q_PRESENT_COLOUR.format(shape="triangle"), ("blue", UNABLE, "white", "red"),
    UNABLE, (0, 6),
)  # fmt: skip
CIRCLES = Ask(
    COUNT, 13, Q_PRESENT_COUNT.format(shape="circle"), ("2", "4", "1", "3"), "3", (11, 15)
)


def _clock(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# ----------------------------------------------------------------------------- TRACE

# (record id, task type, question): TRACE keeps OVO-Bench's and StreamingBench's task types.
TRACE_QA = (
    ("sample_qa:1", "Attribute Perception", COLOUR_EARLY),
    ("sample_qa:2", "EPM", LAST_DIGIT),
    ("sample_qa:3", "HLD", NO_TRIANGLE),
    ("sample_qa:4", "Counting", CIRCLES),
)
TRACE_INSTRUCTION_S = 2


def _trace_qa(record_id: str, task_type: str, ask: Ask) -> dict[str, Any]:
    start, end = ask.evidence
    spans = [] if ask.answer == UNABLE else [{"description": task_type, "end_s": float(end),
                                               "start_s": float(start)}]  # fmt: skip
    return {
        "answer": ask.letter,
        "evidence_anchor_s": float(start),
        "memory_length": float(ask.at_s - start),
        "metadata": {"dataset": "streameval_sample", "evidence_spans": spans},
        "options": ask.labelled(),
        "question": ask.question,
        "question_time_s": float(ask.at_s),
        "record_id": record_id,
        "source_id": record_id,
        "task": "qa",
        "task_type": task_type,
        "video_path": f"{VIDEOS}/{ask.scene.name}.mp4",
    }


def _trace_count_change() -> dict[str, Any]:
    """Each change of the number of circles is an event onset answered by the new count."""
    starts = [at for at, _ in COUNT_CHANGES]
    annotations, windows = [], []
    for index, (at, count) in enumerate(COUNT_CHANGES):
        following = starts[index + 1] if index + 1 < len(starts) else at + TRACE_WINDOW_S
        end = min(at + TRACE_WINDOW_S, following)
        windows.append({"end_s": float(end), "expected_answer": count, "start_s": float(at)})
        annotations.append(
            {
                "accepted_facts": [],
                "answer": count,
                "evidence_end_s": float(end),
                "evidence_start_s": float(at),
                "interval_end_s": None,
                "interval_start_s": None,
                "point_trigger_s": float(at),
                "response_window_end_s": float(end),
                "response_window_start_s": float(at),
                "trigger_type": "event_onset",
            }
        )
    last = windows[-1]["end_s"]
    return {
        "deadline_s": last,
        "instruction": I_COUNT_CHANGE.format(shape="circle"),
        "instruction_time_s": float(TRACE_INSTRUCTION_S),
        "memory_length": last - TRACE_INSTRUCTION_S,
        "metadata": {"dataset": "streameval_sample", "trigger_annotations": annotations},
        "record_id": "sample_proactive:1",
        "source_id": "sample_proactive:1",
        "task": "proactive",
        "task_type": "stream bench proactive",
        "video_path": f"{VIDEOS}/{COUNT.name}.mp4",
        "windows": windows,
    }


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n" for row in rows)


def write_trace(directory: Path) -> None:
    """qa.jsonl, proactive.jsonl and a manifest.json holding their checksums and counts."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "qa.jsonl": _jsonl([_trace_qa(*row) for row in TRACE_QA]),
        "proactive.jsonl": _jsonl([_trace_count_change()]),
    }
    for name, text in files.items():
        (directory / name).write_text(text)
    manifest = {
        "counts": {"proactive": 1, "qa": len(TRACE_QA)},
        "files": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in files.items()},
        "limitations": ["Written by `streameval data sample`; the videos are generated."],
        "proactive_file": "proactive.jsonl",
        "qa_file": "qa.jsonl",
        "release_id": "streameval-sample-v1",
        "schema_version": "osb-canonical-v0",
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


# ----------------------------------------------------------------------------- OVO-Bench

OVO_QA = (
    (1, "EPM", LAST_DIGIT),
    (2, "HLD", NO_TRIANGLE),
    (3, "OCR", PRESENT_DIGIT),
    (4, "ATR", COLOUR_LATE),
    (5, "OJR", CIRCLES),
)
# The REC entry counts the circles added (at 6 s and 11 s), probed at these (time, count).
REC_ADDED_S = (6, 11)
REC_PROBES = ((4, 0), (8, 1), (13, 2), (18, 2))


def _ovo_qa(ident: int, task: str, ask: Ask) -> dict[str, Any]:
    return {
        "id": ident,
        "task": task,
        "video": f"{VIDEOS}/{ask.scene.name}.mp4",
        "realtime": ask.at_s,
        "question": ask.question,
        "answer": ask.answer,
        "options": list(ask.choices),
        "gt": ask.choices.index(ask.answer),
    }


def _ovo_rec() -> dict[str, Any]:
    return {
        "id": 6,
        "task": "REC",
        "video": f"{VIDEOS}/{COUNT.name}.mp4",
        "activity": "add a circle",
        "start_times": list(REC_ADDED_S),
        "end_times": [at + 1 for at in REC_ADDED_S],
        "test_info": [{"realtime": at, "count": count} for at, count in REC_PROBES],
    }


def write_ovo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [*(_ovo_qa(*row) for row in OVO_QA), _ovo_rec()]
    path.write_text(json.dumps(entries, indent=1))


# ----------------------------------------------------------------------------- StreamingBench

STREAMINGBENCH_QA = (
    ("Attribute Perception", COLOUR_EARLY),
    ("Text-Rich Understanding", PRESENT_DIGIT),
    ("Counting", CIRCLES),
)
SB_INSTRUCTION_S = 2
SB_TARGET_S = 5  # the square first turns green after the instruction


def _sb_entry(scene: Scene, questions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "time": f"[{_clock(0)[1:]} - {_clock(scene.frames // FPS)[1:]}]",
        "questions": questions,
        "video_categories": "synthetic",
        "video_path": f"./{VIDEOS}/{scene.name}.mp4",
    }


def _sb_question(task_type: str, ask: Ask) -> dict[str, Any]:
    return {
        "task_type": task_type,
        "question": ask.question,
        "time_stamp": _clock(ask.at_s),
        "answer": ask.letter,
        "options": ask.labelled(),
        "required_ability": "working memory",
    }


def write_streamingbench(qa_path: Path, proactive_path: Path) -> None:
    qa_path.parent.mkdir(parents=True, exist_ok=True)
    qa = [_sb_entry(ask.scene, [_sb_question(kind, ask)]) for kind, ask in STREAMINGBENCH_QA]
    qa_path.write_text(json.dumps(qa, indent=1))
    proactive = {
        "task_type": "Proactive Output",
        "question": I_COLOUR_STATE.format(colour="green", shape="square"),
        "time_stamp": _clock(SB_INSTRUCTION_S),
        "ground_truth_time_stamp": _clock(SB_TARGET_S),
        "ground_truth_output": "green",
        "required_ability": "working memory",
    }
    proactive_path.write_text(json.dumps([_sb_entry(STATE, [proactive])], indent=1))


# ----------------------------------------------------------------------------- all


@dataclass(frozen=True)
class Written:
    """Where each format's sample went, and the video root they share."""

    video_root: Path
    trace: Path
    ovo_bench: Path
    streamingbench_qa: Path
    streamingbench_proactive: Path

    def tries(self) -> Iterator[tuple[str, Path, str, str]]:
        """(title, benchmark path, protocol profile, scoring profile) of each sample."""
        yield "TRACE release", self.trace, "trace", "trace-paper-v1"
        yield "OVO-Bench", self.ovo_bench, "ovo-offline", "ovo-offline"
        yield (
            "StreamingBench QA",
            self.streamingbench_qa,
            "streamingbench-polling",
            "streamingbench",
        )
        yield (
            "StreamingBench proactive",
            self.streamingbench_proactive,
            "streamingbench-polling",
            "streamingbench",
        )


def write_sample(out_dir: Path) -> Written:
    """The videos and every format's files under `out_dir` (existing ones are replaced)."""
    videos = out_dir / VIDEOS
    videos.mkdir(parents=True, exist_ok=True)
    # PyAV encodes without the GIL: the four videos in parallel.
    with ThreadPoolExecutor(max_workers=len(SCENES)) as pool:
        writing = [
            pool.submit(write_video, videos / f"{s.name}.mp4", s.frames, partial(render_indices, s))
            for s in SCENES
        ]
        for written in writing:
            written.result()
    written = Written(
        video_root=out_dir,
        trace=out_dir / TRACE_DIR,
        ovo_bench=out_dir / OVO_FILE,
        streamingbench_qa=out_dir / STREAMINGBENCH_QA_FILE,
        streamingbench_proactive=out_dir / STREAMINGBENCH_PROACTIVE_FILE,
    )
    write_trace(written.trace)
    write_ovo(written.ovo_bench)
    write_streamingbench(written.streamingbench_qa, written.streamingbench_proactive)
    return written
