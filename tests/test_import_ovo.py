"""OVO-Bench import: the file written for these tests in the format of ovo_bench_new.json
(tests/fixtures/ovo_bench: two entries of each of the 12 task types, three of REC), and
entries written here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streameval.core.benchmark.importing import BenchmarkError, Problem
from streameval.core.benchmark.loader import import_path, load_benchmark
from streameval.core.benchmark.records import ProactiveRecord, QARecord
from tests.test_import_trace import FIXTURES

TASKS = ("EPM", "ASI", "HLD", "OCR", "ACR", "ATR", "STU", "FPD", "OJR", "REC", "SSR", "CRR")
OVO_FILE = FIXTURES / "ovo_bench" / "ovo_bench_new.json"


@pytest.fixture
def ovo_file() -> Path:
    return OVO_FILE


def by_id(path: Path) -> dict:
    return {r.source_id: r for r in import_path(path).benchmark.records}


def test_all_twelve_task_types_load_with_their_ids(ovo_file: Path) -> None:
    raw = json.loads(ovo_file.read_text())
    imported = import_path(ovo_file)
    assert (imported.format, imported.problems) == ("ovo_bench", [])
    records = imported.benchmark.records
    assert len(records) == len(raw) == 25
    assert Counter(r.task_type for r in records) == Counter(e["task"] for e in raw)
    assert Counter(r.task_type for r in records) == {**dict.fromkeys(TASKS, 2), "REC": 3}
    assert [r.source_id for r in records] == [str(e["id"]) for e in raw]
    assert [r.record_id for r in records] == [f"ovo_bench:{e['id']}" for e in raw]
    forward = [r for r in records if isinstance(r, ProactiveRecord)]
    assert len(forward) == sum(e["task"] in ("REC", "SSR", "CRR") for e in raw) == 7
    assert {r.task_type for r in forward} == {"REC", "SSR", "CRR"}
    assert imported.benchmark.video_root == str(ovo_file.parent)


def test_questions_get_labels_and_the_gold_letter(ovo_file: Path) -> None:
    records = by_id(ovo_file)
    for entry in json.loads(ovo_file.read_text()):
        if "options" not in entry:
            continue
        record = records[str(entry["id"])]
        assert isinstance(record, QARecord)
        letters = "ABCDEFG"[: len(entry["options"])]
        assert record.options == tuple(
            f"{letter}. {option}" for letter, option in zip(letters, entry["options"], strict=True)
        )
        assert record.answer == letters[entry["gt"]]
        assert record.question_time_s == record.evidence_anchor_s == entry["realtime"]
        assert record.metadata["answer_text"] == entry["answer"]
    hld = records["2162"]
    assert hld.options == ("A. It is clearly on.", "B. Unable to answer", "C. It is clearly off.")
    assert hld.answer == "B" and hld.metadata["category"] == "backward"
    assert records["2151"].question_time_s == 0.03  # FPD asked at the first frame
    assert records["2182"].answer == "B" and records["2182"].question_time_s == 128.3


def test_rec_triggers_are_the_probes_where_the_count_grows(ovo_file: Path) -> None:
    records = by_id(ovo_file)
    for entry in json.loads(ovo_file.read_text()):
        if entry["task"] != "REC":
            continue
        highest = rises = 0
        for probe in sorted(entry["test_info"], key=lambda probe: probe["realtime"]):
            if probe["count"] > highest:
                highest, rises = probe["count"], rises + 1
        record = records[str(entry["id"])]
        assert len(record.triggers) == rises
        assert record.metadata["probes"] == entry["test_info"]
        assert record.metadata["activity"] == entry["activity"]
    rec = records["2192"]
    assert rec.instruction_time_s == 0.0
    assert [(t.point_s, t.answer) for t in rec.triggers] == [
        (11.0, "1"),
        (12.0, "2"),
        (14.0, "3"),
        (16.0, "4"),
    ]
    assert [(t.evidence_start_s, t.evidence_end_s) for t in rec.triggers] == [
        (9, 11),
        (11, 12),
        (12, 14),
        (14, 16),
    ]
    assert {t.trigger_type for t in rec.triggers} == {"event_completion"}
    # Probes where the count stays are no trigger.
    assert [(t.point_s, t.answer) for t in records["2191"].triggers] == [
        (26.0, "1"),
        (47.0, "2"),
        (77.0, "3"),
    ]
    # A count already reached at the first probe is one trigger at that probe.
    assert [(t.point_s, t.answer) for t in records["2193"].triggers] == [(3.0, "1")]


def test_ssr_steps_are_state_intervals_and_crr_a_clue_point(ovo_file: Path) -> None:
    records = by_id(ovo_file)
    ssr = records["2202"]
    assert [(t.interval_start_s, t.interval_end_s, t.answer) for t in ssr.triggers] == [
        (3, 15, "fold the sheet in half"),
        (20, 33, "fold the corners down"),
        (38, 50, "turn up the edges"),
        (55, 64, "open the boat"),
    ]
    assert all(t.is_state for t in ssr.triggers)
    assert '"make paper boat"' in ssr.instruction
    assert len(ssr.metadata["probes"]) == 18  # 3 for the first step, 5 for each later one

    crr = records["2131"]
    assert crr.instruction == (
        "The woman opens the parcel at the table, what does she find inside?"
    )
    assert crr.instruction_time_s == 30
    (clue,) = crr.triggers
    assert (clue.trigger_type, clue.point_s, clue.answer) == (
        "clue_sufficient",
        36,
        "A pair of red gloves.",
    )
    assert crr.metadata["clue_time"] == 36 and len(crr.metadata["probes"]) == 5


def test_load_benchmark_detects_ovo_bench(ovo_file: Path, tmp_path: Path) -> None:
    benchmark = load_benchmark(str(ovo_file), tmp_path, video_root=tmp_path / "src_videos")
    assert benchmark.name == "ovo_bench" and benchmark.version.startswith("sha256:")
    assert benchmark.video_root == str(tmp_path / "src_videos")
    with pytest.raises(BenchmarkError, match="subsets are for TRACE release directories"):
        load_benchmark(str(ovo_file), tmp_path, subset="tiny")


# ----------------------------------------------------------------------------- written here


def write(tmp_path: Path, entries: list) -> Path:
    path = tmp_path / "ovo_bench_new.json"
    path.write_text(json.dumps(entries))
    return path


QA_ENTRY = {
    "id": 7,
    "task": "OCR",
    "video": "a/b.mp4",
    "realtime": 5,
    "question": "What is written?",
    "options": ["x", "y"],
    "gt": 1,
    "answer": "y",
}


def test_bad_entries_are_named_and_the_rest_imports(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            QA_ENTRY,
            {**QA_ENTRY, "id": 8, "task": "XYZ"},
            {**QA_ENTRY, "id": 9, "gt": "1"},
            {
                "id": 10,
                "task": "REC",
                "video": "c.mp4",
                "activity": "jump",
                "test_info": [{"realtime": 3, "count": 0}],
            },
            {**QA_ENTRY, "id": 7},
        ],
    )
    imported = import_path(path)
    assert [str(p) for p in imported.problems] == [
        "ovo_bench_new.json[1] (id 8): unknown task 'XYZ'; OVO-Bench has "
        + ", ".join(TASKS[:3] + TASKS[3:9] + TASKS[9:]),
        "ovo_bench_new.json[2] (id 9): field 'gt' is '1', not an integer",
        "ovo_bench_new.json[3] (id 10): its annotations give no moment to respond at",
        str(Problem("ovo_bench:7", "duplicate record id")),
    ]
    assert [r.record_id for r in imported.benchmark.records] == ["ovo_bench:7", "ovo_bench:7"]


def test_truncated_file_names_its_position(tmp_path: Path) -> None:
    text = json.dumps([QA_ENTRY, QA_ENTRY], indent=1)
    opened = text.rindex('"What is written?"')  # cut inside the second question
    path = tmp_path / "ovo_bench_new.json"
    path.write_text(text[: opened + 5])
    line = text.count("\n", 0, opened) + 1
    column = opened - text.rindex("\n", 0, opened)
    with pytest.raises(BenchmarkError) as raised:
        import_path(path)
    assert str(raised.value) == (
        f"{path} is not valid JSON at line {line}, column {column}: unterminated string starting"
    )
    assert (line, column) == (20, 15)
