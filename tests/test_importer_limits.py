"""Hostile and broken benchmark files, written to disk and fed to the real importers and to
`streameval data validate` / `data stats` as a user runs them (a child process): every one
is one error line naming the file (or entry) and the limit, never a traceback (issue 13,
item 10). The limits: importing.MAX_JSON_DEPTH, importing.MAX_NUMBER_CHARS and
streamingbench.MAX_TIME_CHARS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streameval.core.benchmark.importing import (
    MAX_JSON_DEPTH,
    MAX_NUMBER_CHARS,
    BenchmarkError,
    Problem,
)
from streameval.core.benchmark.loader import import_path, load_benchmark
from streameval.core.benchmark.streamingbench import MAX_TIME_CHARS
from tests.test_import_trace import QA_ROW, write_release

OVO_ENTRY = {
    "id": 1,
    "task": "OCR",
    "video": "v.mp4",
    "question": "What does the sign say?",
    "options": ["stop", "go", "wait", "exit"],
    "gt": 1,
    "realtime": 5.0,
    "answer": "go",
}
STREAMINGBENCH_ENTRY = {
    "video_path": "./videos/x.mp4",
    "questions": [
        {
            "task_type": "Object Perception",
            "question": "What is on the table?",
            "options": ["A. a cup", "B. a pen"],
            "answer": "A",
            "time_stamp": "00:00:05",
        }
    ],
}


def streameval(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "streameval.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def one_error(result: subprocess.CompletedProcess[str]) -> str:
    """The single line a refused file prints (exit 2), after checking it is the only one."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ----------------------------------------------------------------------------- whole files


def test_deep_nesting_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ovo.json"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(f'[{json.dumps(OVO_ENTRY)[:-1]}, "extra": {deep}}}]')
    expected = f"error: {path}: nested deeper than {MAX_JSON_DEPTH} levels"
    for command in ("validate", "stats"):
        assert one_error(streameval("data", command, path)) == expected
    with pytest.raises(BenchmarkError, match="nested deeper than 64 levels"):
        load_benchmark(str(path), tmp_path)


def test_nesting_just_past_the_limit_is_refused_and_at_it_accepted(tmp_path: Path) -> None:
    """Depth counts containers: the list of entries is 1, an entry 2, its `extra` 3..."""
    for extra_depth, refused in ((MAX_JSON_DEPTH - 2, False), (MAX_JSON_DEPTH - 1, True)):
        nested = "[" * extra_depth + "]" * extra_depth
        path = tmp_path / f"ovo-{extra_depth}.json"
        path.write_text(f'[{json.dumps(OVO_ENTRY)[:-1]}, "extra": {nested}}}]')
        if refused:
            with pytest.raises(BenchmarkError, match="nested deeper"):
                import_path(path)
        else:
            assert len(import_path(path).benchmark.records) == 1


def test_a_5000_digit_integer_is_one_line_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "ovo.json"
    text = json.dumps([OVO_ENTRY], indent=1).replace('"gt": 1', '"gt": ' + "7" * 5000)
    path.write_text(text)
    line = text[: text.index("7" * 10)].count("\n") + 1
    column = text.index("7" * 10) - text.rfind("\n", 0, text.index("7" * 10))
    assert one_error(streameval("data", "validate", path)) == (
        f"error: {path}: line {line}, column {column}: a number of 5000 characters is "
        f"longer than the limit of {MAX_NUMBER_CHARS}"
    )


def test_a_long_float_literal_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "ovo.json"
    path.write_text(json.dumps([OVO_ENTRY]).replace('"realtime": 5.0', '"realtime": 5.' + "0" * 60))
    with pytest.raises(BenchmarkError, match="a number of 62 characters is longer than"):
        import_path(path)


@pytest.mark.parametrize("command", ["stats", "validate"])
def test_a_lone_surrogate_is_one_line_naming_the_field(tmp_path: Path, command: str) -> None:
    path = tmp_path / "sb_questions_real.json"
    entry = json.loads(json.dumps(STREAMINGBENCH_ENTRY))
    entry["questions"][0]["question"] = "What is \ud83d on the table?"  # a high half alone
    path.write_text(json.dumps([entry]))  # ensure_ascii: the file holds "\ud83d", as fuzzers wrote
    assert "\\ud83d" in path.read_text()
    assert one_error(streameval("data", command, path)) == (
        f"error: {path}: [0].questions[0].question: lone surrogate \\ud83d is not valid "
        "Unicode text"
    )


def test_a_lone_surrogate_in_a_key_is_named_too(tmp_path: Path) -> None:
    path = tmp_path / "ovo.json"
    path.write_text(json.dumps([{**OVO_ENTRY, "\udc00": 1}]))
    with pytest.raises(BenchmarkError, match=r"\[0\]\.<key>: lone surrogate \\udc00"):
        import_path(path)


def test_a_real_surrogate_pair_is_text(tmp_path: Path) -> None:
    path = tmp_path / "ovo.json"
    path.write_text(json.dumps([{**OVO_ENTRY, "question": "What is \U0001f600?"}]))
    [record] = import_path(path).benchmark.records
    assert record.question == "What is \U0001f600?"


# ----------------------------------------------------------------------------- single entries


def test_a_huge_ovo_gt_is_a_problem_of_its_entry(tmp_path: Path) -> None:
    path = tmp_path / "ovo.json"
    huge = 10**40  # within the number limit, far past any option and past `chr`
    path.write_text(json.dumps([{**OVO_ENTRY, "gt": huge}, {**OVO_ENTRY, "id": 2}]))
    imported = import_path(path)
    assert imported.problems == [
        Problem("ovo.json[0] (id 1)", f"gt {huge} is not an option index (0..3)")
    ]
    assert [r.record_id for r in imported.benchmark.records] == ["ovo_bench:2"]
    checked = streameval("data", "validate", path)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    assert checked.stdout.splitlines()[0] == (
        f"ovo.json[0] (id 1): gt {huge} is not an option index (0..3)"
    )


def test_an_ovo_gt_one_past_the_options_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ovo.json"
    path.write_text(json.dumps([{**OVO_ENTRY, "gt": 4}]))
    assert [p.message for p in import_path(path).problems] == ["gt 4 is not an option index (0..3)"]


def test_an_overlong_streamingbench_time_is_a_problem_of_its_question(tmp_path: Path) -> None:
    path = tmp_path / "questions_real.json"
    entry = json.loads(json.dumps(STREAMINGBENCH_ENTRY))
    entry["questions"][0]["time_stamp"] = "9" * 5000 + ":00"
    path.write_text(json.dumps([entry, STREAMINGBENCH_ENTRY]))
    imported = import_path(path)
    assert imported.problems == [
        Problem(
            "questions_real.json[0].questions[0]",
            f"time of 5003 characters; the limit is {MAX_TIME_CHARS}",
        )
    ]
    assert len(imported.benchmark.records) == 1


def test_an_exponent_past_float_range_is_an_infinite_time_of_its_record(tmp_path: Path) -> None:
    path = tmp_path / "ovo.json"
    path.write_text(json.dumps([OVO_ENTRY]).replace('"realtime": 5.0', '"realtime": 1e400'))
    imported = import_path(path)
    assert imported.problems == [
        Problem("ovo_bench:1", "question_time_s is inf, not a finite number"),
        Problem("ovo_bench:1", "evidence_anchor_s is inf, not a finite number"),
    ]
    assert imported.benchmark.records == []


def test_trace_lines_over_the_limits_are_problems_and_the_rest_imports(tmp_path: Path) -> None:
    deep = {**QA_ROW, "record_id": "t_qa:2", "metadata": {"x": json.loads("[" * 70 + "]" * 70)}}
    release = write_release(tmp_path / "release", [QA_ROW, deep], [])
    qa = release / "qa.jsonl"
    lines = qa.read_text().splitlines()
    long_number = json.dumps({**QA_ROW, "record_id": "t_qa:3"}).replace(
        '"question_time_s": 12.0', '"question_time_s": ' + "1" * 5000
    )
    surrogate = json.dumps({**QA_ROW, "record_id": "t_qa:4", "question": "\udfff"})
    qa.write_text("\n".join([*lines, long_number, surrogate]) + "\n")
    imported = import_path(release)
    column = long_number.index("1" * 10) + 1
    assert imported.problems == [
        Problem("qa.jsonl:2", f"nested deeper than {MAX_JSON_DEPTH} levels"),
        Problem(
            "qa.jsonl:3",
            f"column {column}: a number of 5000 characters is longer than the limit of "
            f"{MAX_NUMBER_CHARS}",
        ),
        Problem("qa.jsonl:4", "question: lone surrogate \\udfff is not valid Unicode text"),
    ]
    assert [r.record_id for r in imported.benchmark.records] == ["t_qa:1"]
    checked = streameval("data", "validate", release)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    assert checked.stdout.splitlines()[:3] == [str(p) for p in imported.problems]
