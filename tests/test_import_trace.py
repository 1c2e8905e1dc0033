"""TRACE release import: the release written for these tests (tests/fixtures/trace_release),
the real sample where ../shared/data is present, and small releases written here.

The fixture follows the format of TRACE release v1.1.0 with made-up records: 18 QA and 12
proactive records (60 windows, one record with 30), the tiny id lists and no manifest; its
`with_manifest/` folder is a 3-record release whose manifest.json lists checksums and counts.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from streameval.core.benchmark.importing import BenchmarkError, Problem
from streameval.core.benchmark.loader import import_path, load_benchmark
from streameval.core.benchmark.records import EvidenceSpan, ProactiveRecord, QARecord
from streameval.core.benchmark.trace_release import import_release

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLES = Path(__file__).parents[2] / "shared" / "data"


def sample(*parts: str) -> Path:
    """A path under the shared benchmark samples; skips the test where they are absent."""
    path = SAMPLES.joinpath(*parts)
    if not path.exists():
        pytest.skip(
            f"real benchmark samples not found at {SAMPLES} (../shared/data is not in the repo)"
        )
    return path


def raw_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def release() -> Path:
    return FIXTURES / "trace_release"


# ----------------------------------------------------------------------------- the fixture


def test_full_release_loads_every_record_with_its_source_identity(release: Path) -> None:
    qa_raw = raw_lines(release / "qa.jsonl")
    proactive_raw = raw_lines(release / "proactive.jsonl")
    imported = import_release(release)
    assert imported.problems == []
    records = imported.benchmark.records
    qa = [r for r in records if isinstance(r, QARecord)]
    proactive = [r for r in records if isinstance(r, ProactiveRecord)]
    assert (len(qa), len(proactive)) == (len(qa_raw), len(proactive_raw)) == (18, 12)
    assert [r.record_id for r in qa] == [raw["record_id"] for raw in qa_raw]
    assert [r.source_id for r in proactive] == [raw["source_id"] for raw in proactive_raw]
    assert {r.source_benchmark for r in records} == {"trace"}
    windows = sum(len(raw["windows"]) for raw in proactive_raw)
    assert sum(len(r.triggers) for r in proactive) == windows == 60
    by_type = Counter(r.task_type for r in records)
    assert by_type == Counter(raw["task_type"] for raw in qa_raw + proactive_raw)
    assert by_type == {
        "Anomaly Context Understanding": 7,
        "Clips Summarize": 3,
        "ASI": 2,
        "Causal Reasoning": 2,
        "EPM": 2,
        "HLD": 2,
        "CRR": 3,
        "SSR": 3,
        "REC": 3,
        "stream bench proactive": 3,
    }
    assert imported.benchmark.name == "trace"
    assert imported.benchmark.video_root == str(release)


def test_every_trigger_is_its_annotation(release: Path) -> None:
    """Field by field, for all 60 windows of the fixture."""
    by_id = {r.record_id: r for r in import_release(release).benchmark.records}
    for raw in raw_lines(release / "proactive.jsonl"):
        record = by_id[raw["record_id"]]
        annotations = raw["metadata"]["trigger_annotations"]
        assert len(record.triggers) == len(annotations)
        for trigger, note in zip(record.triggers, annotations, strict=True):
            assert trigger.trigger_type == note["trigger_type"]
            assert trigger.answer == note["answer"]
            assert trigger.point_s == note["point_trigger_s"]
            assert trigger.interval_start_s == note["interval_start_s"]
            assert trigger.interval_end_s == note["interval_end_s"]
            assert trigger.window_end_s == note["response_window_end_s"]
            assert trigger.accepted_facts == tuple(note.get("accepted_facts", ()))
            assert trigger.evidence_start_s == note.get("evidence_start_s")
            assert trigger.evidence_end_s == note.get("evidence_end_s")


def test_record_mappings(release: Path) -> None:
    by_id = {r.record_id: r for r in import_release(release).benchmark.records}

    qa = by_id["streambench_qa:903"]
    assert isinstance(qa, QARecord)
    assert (qa.question_time_s, qa.evidence_anchor_s, qa.answer) == (31.0, 30.0, "C")
    assert qa.video_path == "videos/sample_903_Anomaly_Context_Understanding.mp4"
    assert qa.evidence_spans == (
        EvidenceSpan(start_s=27.12, end_s=30.48, description="自行车前轮脱落，滚到车前面"),
    )
    assert qa.metadata["memory_length"] == 1.0
    assert qa.metadata["source_question_id"] == "903"
    assert len(by_id["streambench_qa:904"].options) == 6

    crr = by_id["ovo_bench_proactive:1901"]
    assert isinstance(crr, ProactiveRecord)
    assert crr.instruction_time_s == 30.0 and crr.metadata["deadline_s"] == 67.0
    (clue,) = crr.triggers
    assert (clue.trigger_type, clue.point_s, clue.window_end_s) == ("clue_sufficient", 38, 43)
    assert (clue.evidence_start_s, clue.evidence_end_s) == (38.0, 41.0)
    assert clue.answer == "He hides it in a book." and len(clue.accepted_facts) == 1
    # An inferred annotation carries no evidence and no accepted facts.
    (inferred,) = by_id["ovo_bench_proactive:1903"].triggers
    assert (inferred.evidence_start_s, inferred.accepted_facts) == (None, ())

    ssr = by_id["ovo_bench_proactive:1912"]
    assert [(t.interval_start_s, t.interval_end_s) for t in ssr.triggers] == [
        (2.0, 9.0),
        (10.0, 21.0),
        (22.0, 35.0),
        (36.0, 41.0),
    ]
    assert all(t.is_state and t.point_s is None for t in ssr.triggers)

    rec = by_id["ovo_bench_proactive:1921"]
    assert [t.answer for t in rec.triggers] == ["1", "2", "3", "4", "5", "6", "7"]
    # The release clipped this window to the last readable frame; the clipped end is kept.
    assert rec.triggers[-1].window_end_s == 22.614
    assert rec.metadata["media_boundary_adjustments"][0]["source_value_s"] == 24.8

    many = by_id["streambench_proactive:960"]
    assert len(many.triggers) == 30
    # A window ends 5 s after its onset, or at the next onset when that comes sooner.
    assert [(t.point_s, t.window_end_s) for t in many.triggers[:3]] == [
        (12.0, 16.2),
        (16.2, 21.2),
        (22.7, 25.8),
    ]


def test_tiny_subset_is_the_listed_ids(release: Path) -> None:
    qa_ids = json.loads((release / "tiny_qa_ids.json").read_text())
    proactive_ids = json.loads((release / "tiny_proactive_ids.json").read_text())
    imported = import_release(release, subset="tiny")
    assert imported.problems == []
    records = imported.benchmark.records
    assert sorted(r.record_id for r in records) == sorted(qa_ids + proactive_ids)
    assert (len(qa_ids), len(proactive_ids)) == (6, 5)
    assert imported.benchmark.name == "trace-tiny"


def test_standard_subset_needs_its_id_list(release: Path) -> None:
    with pytest.raises(BenchmarkError, match="standard subset needs standard_proactive_ids"):
        import_release(release, subset="standard")


def test_standard_subset_is_all_qa_and_the_listed_proactive(release: Path, tmp_path) -> None:
    copy = tmp_path / "release"
    copy.mkdir()
    for name in ("qa.jsonl", "proactive.jsonl"):
        (copy / name).write_bytes((release / name).read_bytes())
    cohort = [raw["record_id"] for raw in raw_lines(release / "proactive.jsonl")][:4]
    (copy / "standard_proactive_ids.json").write_text(json.dumps(cohort))
    records = import_release(copy, subset="standard").benchmark.records
    assert sum(isinstance(r, QARecord) for r in records) == 18
    assert [r.record_id for r in records if isinstance(r, ProactiveRecord)] == cohort


def test_load_benchmark_reads_a_release_and_warns_once_without_manifest(
    release: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        benchmark = load_benchmark(str(release), tmp_path, subset="tiny")
    assert len(benchmark.records) == 11
    assert [r.getMessage() for r in caplog.records] == [
        f"{release}: no manifest.json, so file checksums are not verified"
    ]
    other_root = tmp_path / "videos"
    assert load_benchmark(str(release), tmp_path, video_root=other_root).video_root == str(
        other_root
    )
    with pytest.raises(BenchmarkError, match="unknown TRACE subset 'small'"):
        load_benchmark(str(release), tmp_path, subset="small")


def test_a_release_with_a_manifest_is_verified_and_versioned_by_it(
    release: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checked = release / "with_manifest"
    with caplog.at_level(logging.WARNING):
        benchmark = load_benchmark(str(checked), tmp_path)
    # Checksums verified, so no "not verified" warning; only the absent sidecar is named.
    absent = f"manifest.json lists changes.jsonl, which is not in {checked}"
    assert [r.getMessage() for r in caplog.records] == [absent]
    assert (benchmark.name, benchmark.version) == ("trace", "fixture-v0.1.0")
    assert [r.record_id for r in benchmark.records] == [
        "streambench_qa:905",
        "streambench_qa:906",
        "ovo_bench_proactive:1923",
    ]
    imported = import_path(checked)
    assert (imported.problems, imported.notes) == ([], [absent])


def test_the_real_samples_import_without_problems() -> None:
    """An extra check where ../shared/data is present: the public files' own records (counts
    from its README) import with no problem."""
    release = sample("trace_release")
    imported = import_release(release)
    records = imported.benchmark.records
    assert imported.problems == []
    assert sum(isinstance(r, QARecord) for r in records) == 21
    assert sum(len(r.triggers) for r in records if isinstance(r, ProactiveRecord)) == 118
    files = {
        ("ovo_bench", "ovo_bench_sample.json"): 36,
        ("streamingbench", "questions_real_sample.json"): 6,
        ("streamingbench", "questions_omni_sample.json"): 6,
        ("streamingbench", "questions_sqa_sample.json"): 15,
        ("streamingbench", "questions_proactive_sample.json"): 6,
    }
    for parts, count in files.items():
        imported = import_path(sample(*parts))
        assert (imported.problems, len(imported.benchmark.records)) == ([], count), parts


# ----------------------------------------------------------------------------- written here


QA_ROW = {
    "record_id": "t_qa:1",
    "source_id": "t_qa:1",
    "task": "qa",
    "task_type": "EPM",
    "video_path": "videos/a.mp4",
    "question": "What colour was the cup?",
    "options": ["A. red", "B. blue"],
    "answer": "B",
    "question_time_s": 12.0,
    "evidence_anchor_s": 9.0,
    "memory_length": 3.0,
    "metadata": {"dataset": "here"},
}
PROACTIVE_ROW = {
    "record_id": "t_pro:1",
    "source_id": "t_pro:1",
    "task": "proactive",
    "task_type": "REC",
    "video_path": "videos/a.mp4",
    "instruction": "Count the jumps.",
    "instruction_time_s": 0.0,
    "deadline_s": 20.0,
    "windows": [
        {"start_s": 2.0, "end_s": 7.0, "expected_answer": "1"},
        {"start_s": 8.0, "end_s": 11.0, "expected_answer": "on"},
    ],
    "metadata": {
        "trigger_annotations": [
            {
                "trigger_type": "event_completion",
                "point_trigger_s": 2.0,
                "interval_start_s": None,
                "interval_end_s": None,
                "response_window_start_s": 2.0,
                "response_window_end_s": 7.0,
                "answer": "1",
            },
            {
                "trigger_type": "state_interval",
                "point_trigger_s": None,
                "interval_start_s": 8.0,
                "interval_end_s": 11.0,
                "response_window_start_s": 8.0,
                "response_window_end_s": 11.0,
                "answer": "on",
            },
        ]
    },
}


def write_release(folder: Path, qa: list[dict], proactive: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("qa.jsonl", qa), ("proactive.jsonl", proactive)):
        (folder / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def write_manifest(folder: Path) -> None:
    files = {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in ("qa.jsonl", "proactive.jsonl")
    }
    manifest = {"release_id": "v9.9.9", "files": files, "counts": {"qa": 1, "proactive": 1}}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_manifest_checksums_and_counts_are_verified(tmp_path: Path, caplog) -> None:
    folder = write_release(tmp_path / "r", [QA_ROW], [PROACTIVE_ROW])
    write_manifest(folder)
    with caplog.at_level(logging.WARNING):
        benchmark = load_benchmark(str(folder), tmp_path)
    assert caplog.records == []
    assert (benchmark.name, benchmark.version, len(benchmark.records)) == ("trace", "v9.9.9", 2)
    written = benchmark.records[1]
    assert [(t.start_s, t.is_state) for t in written.triggers] == [(2.0, False), (8.0, True)]

    (folder / "qa.jsonl").write_text(json.dumps({**QA_ROW, "answer": "A"}) + "\n")
    changed = hashlib.sha256((folder / "qa.jsonl").read_bytes()).hexdigest()
    with pytest.raises(BenchmarkError, match=f"qa.jsonl: sha256 {changed} does not match"):
        load_benchmark(str(folder), tmp_path)

    write_release(folder, [QA_ROW, {**QA_ROW, "record_id": "t_qa:2"}], [PROACTIVE_ROW])
    write_manifest(folder)
    problems = import_path(folder).problems
    assert problems == [Problem("qa.jsonl", "holds 2 records, manifest.json says 1")]


def test_manifest_entries_absent_from_the_folder_are_notes(tmp_path: Path) -> None:
    folder = write_release(tmp_path / "r", [QA_ROW], [PROACTIVE_ROW])
    write_manifest(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["changes.jsonl"] = "0" * 64
    (folder / "manifest.json").write_text(json.dumps(manifest))
    imported = import_path(folder)
    assert imported.problems == []
    assert imported.notes == [f"manifest.json lists changes.jsonl, which is not in {folder}"]


def test_broken_lines_are_named_and_the_rest_still_imports(tmp_path: Path) -> None:
    cut = json.dumps(QA_ROW)[:40]
    unannotated = {**PROACTIVE_ROW, "record_id": "t_pro:2"}
    unannotated["metadata"] = {
        "trigger_annotations": PROACTIVE_ROW["metadata"]["trigger_annotations"][:1]
    }
    moved = json.loads(json.dumps({**PROACTIVE_ROW, "record_id": "t_pro:3"}))
    moved["windows"][0]["end_s"] = 6.0
    folder = write_release(tmp_path / "r", [QA_ROW], [PROACTIVE_ROW, unannotated, moved])
    with (folder / "qa.jsonl").open("a") as handle:
        handle.write(json.dumps({**QA_ROW, "record_id": "t_qa:2", "question": None}) + "\n")
        handle.write(cut + "\n")
    try:
        json.loads(cut)
    except json.JSONDecodeError as exc:
        column = exc.colno
    imported = import_path(folder)
    assert [str(p) for p in imported.problems] == [
        f"qa.jsonl:3: not valid JSON at column {column}: unterminated string starting",
        "qa.jsonl:2 (t_qa:2): missing field 'question'",
        "proactive.jsonl:2 (t_pro:2): 2 windows but 1 trigger_annotations",
        "proactive.jsonl:3 (t_pro:3): windows[0] [2.0, 6.0] differs from "
        "trigger_annotations[0]'s response window [2.0, 7.0]",
    ]
    assert [r.record_id for r in imported.benchmark.records] == ["t_qa:1", "t_pro:1"]
    with pytest.raises(
        BenchmarkError, match=r"qa.jsonl:3: not valid JSON .*\(and 3 more problems\)"
    ):
        load_benchmark(str(folder), tmp_path)


def test_a_release_file_instead_of_its_folder_is_a_clear_error(tmp_path: Path) -> None:
    folder = write_release(tmp_path / "r", [QA_ROW], [PROACTIVE_ROW])
    with pytest.raises(BenchmarkError, match="give the TRACE release directory"):
        load_benchmark(str(folder / "qa.jsonl"), tmp_path)
    with pytest.raises(BenchmarkError, match="not a TRACE release"):
        load_benchmark(str(tmp_path), tmp_path)
    with pytest.raises(BenchmarkError, match="'trace' is neither 'synthetic' nor an existing"):
        load_benchmark("trace", tmp_path)
