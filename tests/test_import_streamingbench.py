"""StreamingBench import: its four question files as written for these tests
(tests/fixtures/streamingbench, in the format of StreamingBench's questions_*.json), and
files written here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streameval.core.benchmark.importing import BenchmarkError, EntryError
from streameval.core.benchmark.loader import import_path, load_benchmark
from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.benchmark.streamingbench import seconds
from tests.test_import_trace import FIXTURES

FOLDER = FIXTURES / "streamingbench"
# part -> questions in its fixture file
QUESTIONS = {"real": 4, "omni": 4, "sqa": 8, "proactive": 4}


def question_file(part: str) -> Path:
    return FOLDER / f"questions_{part}.json"


def entries(path: Path) -> list[dict]:
    """Every entry of a question file, the sqa file's per-video lists flattened."""
    data = json.loads(path.read_text())
    return [e for group in data for e in group] if isinstance(data[0], list) else data


@pytest.mark.parametrize("part", QUESTIONS)
def test_each_file_loads_one_record_per_question(part: str) -> None:
    path = question_file(part)
    questions = [q for entry in entries(path) for q in entry["questions"]]
    imported = import_path(path)
    assert (imported.format, imported.problems, imported.notes) == ("streamingbench", [], [])
    records = imported.benchmark.records
    assert len(records) == len(questions) == QUESTIONS[part]
    assert Counter(r.task_type for r in records) == Counter(q["task_type"] for q in questions)
    assert {r.metadata["part"] for r in records} == {part}
    assert len({r.record_id for r in records}) == len(records)
    assert imported.benchmark.name == f"streamingbench-{part}"
    kind = ProactiveRecord if part == "proactive" else QARecord
    assert all(isinstance(r, kind) for r in records)


def test_qa_mapping() -> None:
    first = import_path(question_file("real")).benchmark.records[0]
    assert (first.source_id, first.record_id) == ("real/0/0", "streamingbench:real/0/0")
    assert first.video_path == "videos/sample_901_real.mp4"
    assert (first.question_time_s, first.evidence_anchor_s) == (312.0, 312.0)  # 00:05:12
    assert first.answer == "C"
    assert first.options[2] == "C. 2.80."
    assert first.metadata["time"] == "[0:05:00 - 0:05:20]"
    assert first.metadata["required_ability"] == "working memory"
    assert "captions" not in first.metadata
    source = import_path(question_file("omni")).benchmark.records[2]
    assert source.question_time_s == 45.0  # "0:00:45", a one-digit hour


def test_sqa_positions_follow_the_list_of_lists() -> None:
    records = {r.source_id: r for r in import_path(question_file("sqa")).benchmark.records}
    third = records["sqa/1/2/0"]  # second video, third question
    assert third.video_path == "videos/sample_922_sqa.mp4"
    assert third.question_time_s == 185.0  # 00:03:05
    assert third.question.startswith("How many pieces has the player referred to in the first")
    assert third.metadata["position"] == [1, 2, 0]
    assert sorted({r.video_path for r in records.values()}) == [
        "videos/sample_921_sqa.mp4",
        "videos/sample_922_sqa.mp4",
        "videos/sample_923_sqa.mp4",
    ]


def test_proactive_ground_truth_is_a_point_trigger() -> None:
    path = question_file("proactive")
    records = import_path(path).benchmark.records
    for record, entry in zip(records, entries(path), strict=True):
        (question,) = entry["questions"]
        (trigger,) = record.triggers
        assert record.instruction == question["question"]
        assert trigger.answer == question["ground_truth_output"]
        assert trigger.point_s == seconds(question["ground_truth_time_stamp"])
        assert record.instruction_time_s == seconds(question["time_stamp"])
    first = records[0]
    assert (first.instruction_time_s, first.triggers[0].point_s) == (252.0, 260.0)
    assert first.triggers[0].trigger_type == "event_onset"
    assert first.triggers[0].answer == "1-0"
    assert first.metadata["ground_truth_time_stamp"] == "00:04:20"


def test_times_are_base_60_digits_from_the_right_as_streamingbench_reads_them() -> None:
    assert seconds("00:06:59") == 419.0
    assert seconds("0:06:30") == 390.0
    assert seconds("01:02:03.5") == 3723.5
    # The two forms of the full questions_real.json that a strict H:MM:SS parse refuses.
    assert seconds("00:24") == 24.0
    assert seconds("00:12450") == 12450.0
    assert seconds("6:30") == 390.0
    assert seconds("00:61:00") == 3660.0
    for bad in ("26s", "", "1::2", "a:b", ":30", "12", 12):
        with pytest.raises(EntryError, match="is not a colon-separated time like HH:MM:SS"):
            seconds(bad)


def test_labels_added_when_missing_and_bad_entries_named(tmp_path: Path) -> None:
    question = {
        "task_type": "Counting",
        "question": "Which team?",
        "time_stamp": "00:00:26",
        "answer": "B.",
        "options": ["DEN.", "MIA.", "C) BOS.", "D. GS."],
    }
    data = [
        {"time": "[0:00:00 - 0:01:00]", "video_path": "./videos/v.mp4", "questions": [question]},
        {"video_path": "./videos/v.mp4", "questions": [{**question, "time_stamp": "26s"}]},
        {"video_path": "./videos/v.mp4"},
    ]
    path = tmp_path / "questions_real.json"
    path.write_text(json.dumps(data))
    imported = import_path(path)
    (record,) = imported.benchmark.records
    assert record.options == ("A. DEN.", "B. MIA.", "C. BOS.", "D. GS.")
    assert record.answer == "B"
    assert [str(p) for p in imported.problems] == [
        "questions_real.json[1].questions[0]: time '26s' is not a colon-separated time like "
        "HH:MM:SS",
        "questions_real.json[2]: missing field 'questions'",
    ]
    with pytest.raises(
        BenchmarkError, match=r"like HH:MM:SS \(and 1 more problem\); `streameval data validate"
    ):
        load_benchmark(str(path), tmp_path)
