"""The synthetic benchmark generator: determinism, record schema, videos, reuse."""

from __future__ import annotations

import hashlib
import shutil
from collections import Counter
from pathlib import Path

import av
import pytest

from streameval.core.benchmark.benchmark_json import load_benchmark_file
from streameval.core.benchmark.importing import BenchmarkError
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord
from streameval.core.benchmark.synthetic import UNABLE, generate, load_or_generate

EXPECTED_TASK_TYPES = {
    "present_color": 6,
    "past_digit": 4,
    "present_digit": 1,
    "present_count": 2,
    "unanswerable": 3,
    "count_change": 2,
    "color_state": 2,
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Benchmark]:
    # Shared by every test module of the session (test_reference_policy.py uses it too).
    out = tmp_path_factory.getbasetemp() / "synthetic-seed-0"
    return out, load_or_generate(out, seed=0)


def _file_digests(out: Path) -> dict[str, str]:
    return {
        str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(out.rglob("*"))
        if path.is_file()
    }


def _dump(benchmark: Benchmark) -> list[dict]:
    return [record.model_dump() for record in benchmark.records]


def _qa(benchmark: Benchmark) -> list[QARecord]:
    return [r for r in benchmark.records if isinstance(r, QARecord)]


def _proactive(benchmark: Benchmark) -> list[ProactiveRecord]:
    return [r for r in benchmark.records if isinstance(r, ProactiveRecord)]


# ----------------------------------------------------------------------------- determinism


def test_same_seed_gives_identical_records_and_bytes(generated, tmp_path: Path) -> None:
    out, first = generated
    second = generate(tmp_path / "again", seed=0)
    assert _dump(second) == _dump(first)
    digests = _file_digests(out)
    assert set(digests) == {"benchmark.json", *(r.video_path for r in first.records)}
    assert _file_digests(tmp_path / "again") == digests


def test_other_seed_regenerates_different_content(generated, tmp_path: Path) -> None:
    out, first = generated
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    other = load_or_generate(copy, seed=1)
    assert other.version != first.version
    assert _dump(other) != _dump(first)
    before, after = _file_digests(out), _file_digests(copy)
    assert sorted(before) == sorted(after)  # same file names ...
    assert all(before[name] != after[name] for name in before)  # ... every one rewritten
    assert load_benchmark_file(copy / "benchmark.json").version == other.version


# ----------------------------------------------------------------------------- records


def test_every_task_kind_is_present_with_stable_ids(generated) -> None:
    _, benchmark = generated
    assert benchmark.name == "synthetic"
    assert Counter(r.task_type for r in benchmark.records) == EXPECTED_TASK_TYPES
    assert {r.source_benchmark for r in benchmark.records} == {"synthetic"}
    assert [r.record_id for r in _qa(benchmark)] == [f"synthetic:qa:{i:03d}" for i in range(16)]
    assert [r.record_id for r in _proactive(benchmark)] == [
        f"synthetic:proactive:{i:03d}" for i in range(4)
    ]
    assert len({r.video_path for r in benchmark.records}) == 7
    assert all(r.video_path.startswith("videos/") for r in benchmark.records)


def test_options_are_labelled_and_contain_the_answer(generated) -> None:
    _, benchmark = generated
    for record in _qa(benchmark):
        labels = [option.split(". ", 1)[0] for option in record.options]
        texts = [option.split(". ", 1)[1] for option in record.options]
        assert labels == ["A", "B", "C", "D", "E"], record.record_id
        assert len(set(texts)) == 5, record.record_id
        assert texts[-1] == UNABLE
        correct = texts[labels.index(record.answer)]
        assert (correct == UNABLE) == (record.task_type == "unanswerable"), record.record_id


def test_evidence_anchors_precede_questions(generated) -> None:
    _, benchmark = generated
    for record in _qa(benchmark):
        assert 0 <= record.evidence_anchor_s <= record.question_time_s, record.record_id
        assert record.question_time_s == int(record.question_time_s)
        for span in record.evidence_spans:
            assert record.evidence_anchor_s == span.start_s <= span.end_s
            assert span.end_s <= record.question_time_s
        if record.task_type != "unanswerable":
            assert len(record.evidence_spans) == 1, record.record_id


def test_past_digits_ended_before_the_question_within_the_history(generated) -> None:
    _, benchmark = generated
    past = [r for r in _qa(benchmark) if r.task_type == "past_digit"]
    for record in past:
        (span,) = record.evidence_spans
        assert span.end_s < record.question_time_s, record.record_id
        # The Core's default history starts 10 s before the anchor; the whole digit and the
        # gap after it fit inside that window.
        assert record.question_time_s - record.evidence_anchor_s <= 10.0, record.record_id
        assert span.end_s - span.start_s >= 3.0


def test_point_triggers_are_increasing_and_some_windows_are_truncated(generated) -> None:
    _, benchmark = generated
    counts = [r for r in _proactive(benchmark) if r.task_type == "count_change"]
    gaps = []
    for record in counts:
        points = [t.point_s for t in record.triggers]
        assert {t.trigger_type for t in record.triggers} == {"event_onset"}
        assert 3 <= len(points) <= 5
        assert record.instruction_time_s < points[0]
        steps = [b - a for a, b in zip(points, points[1:], strict=False)]
        assert all(step >= 4.0 for step in steps), (record.record_id, points)
        gaps += steps
        answers = [int(t.answer) for t in record.triggers]
        assert all(a != b for a, b in zip(answers, answers[1:], strict=False))
        duration = record.metadata["video"]["duration_s"]
        assert points[-1] + 5.0 <= duration
    assert any(gap < 5.0 for gap in gaps)


def test_state_intervals_are_disjoint_and_after_the_instruction(generated) -> None:
    _, benchmark = generated
    states = [r for r in _proactive(benchmark) if r.task_type == "color_state"]
    for record in states:
        intervals = [(t.interval_start_s, t.interval_end_s) for t in record.triggers]
        assert {t.trigger_type for t in record.triggers} == {"state_interval"}
        assert len(intervals) >= 2
        assert {t.answer for t in record.triggers} == {record.instruction.split("'")[1]}
        assert record.instruction_time_s + 2.0 <= intervals[0][0]
        for (start, end), (next_start, _) in zip(intervals, intervals[1:], strict=False):
            assert end - start >= 3.0
            assert next_start - end >= 3.0  # a gap every 1 fps grid can see
        assert intervals[-1][1] <= record.metadata["video"]["duration_s"]


# ----------------------------------------------------------------------------- videos


def test_videos_decode_to_the_declared_format(generated) -> None:
    out, benchmark = generated
    declared = {r.video_path: r.metadata["video"] for r in benchmark.records}
    durations = []
    for video_path, meta in declared.items():
        with av.open(str(out / video_path)) as container:
            stream = container.streams.video[0]
            assert stream.codec_context.name == "h264"
            assert stream.average_rate == meta["fps"] == 10
            frames = list(container.decode(stream))
        assert len(frames) == round(meta["duration_s"] * 10), video_path
        assert {(f.width, f.height) for f in frames} == {(320, 240)}
        assert {f.format.name for f in frames} == {"yuv420p"}
        assert [round(f.time * 10) for f in frames] == list(range(len(frames)))
        durations.append(meta["duration_s"])
    assert all(20.0 <= d <= 60.0 for d in durations), durations
    assert 15 <= len(benchmark.records) <= 25


# ----------------------------------------------------------------------------- reuse


def test_reuse_does_not_rewrite_files(generated, tmp_path: Path) -> None:
    out, first = generated
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    mtimes = {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()}
    reused = load_or_generate(copy, seed=0)
    assert _dump(reused) == _dump(first)
    assert Path(reused.video_root) == copy
    assert {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()} == mtimes


def test_missing_video_regenerates(generated, tmp_path: Path) -> None:
    out, first = generated
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    missing = copy / first.records[0].video_path
    missing.unlink()
    assert _dump(load_or_generate(copy, seed=0)) == _dump(first)
    assert _file_digests(copy) == _file_digests(out)


def test_corrupt_benchmark_json_is_a_clear_error_and_a_stale_cache(generated, tmp_path) -> None:
    out, first = generated
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    path = copy / "benchmark.json"
    path.write_text('{"name": "synthetic", "records": [')
    with pytest.raises(BenchmarkError, match=r"benchmark\.json is not valid JSON"):
        load_benchmark_file(path)
    path.write_text('{"name": "synthetic", "version": "1+seed.0", "records": []}')
    with pytest.raises(BenchmarkError, match="video_root: Field required"):
        load_benchmark_file(path)
    assert _dump(load_or_generate(copy, seed=0)) == _dump(first)
    assert _file_digests(copy) == _file_digests(out)
