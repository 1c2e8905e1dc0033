"""`streameval data validate` and `streameval data stats` through their Typer app, and
complete runs of each importer's records.

Stand-in videos are tiny (32x24, 1 or 2 fps) H.264 files encoded with PyAV at the durations
the records need, so that "times inside the video" is checked against real containers and
the Core streams real frames.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from pathlib import Path

import av
import numpy as np
import pytest
from typer.testing import CliRunner, Result

from streameval.core.benchmark.loader import import_path, load_benchmark
from streameval.core.benchmark.records import Benchmark, QARecord
from streameval.core.benchmark.validate import trigger_bounds, validate, video_duration_s
from streameval.core.cli.data import data_app
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.run_end import RunSummary
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store
from streameval.scorer.report import score_run
from tests.test_import_streamingbench import entries
from tests.test_import_trace import FIXTURES, raw_lines

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(data_app, [str(arg) for arg in args])


def write_video(path: Path, duration_s: float, fps: int = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        stream.options = {"preset": "ultrafast"}
        for index in range(round(duration_s * fps)):
            pixels = np.full((24, 32, 3), index * 7 % 256, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def stand_in_videos(benchmark: Benchmark, root: Path, margin_s: int = 1) -> None:
    """One 1-fps stand-in per video, `margin_s` longer than the latest (whole) second its
    records need."""
    needed: dict[str, float] = {}
    for record in benchmark.records:
        if isinstance(record, QARecord):
            latest = record.question_time_s
        else:
            bounds = [t for trig in record.triggers for t in trigger_bounds(trig) if t is not None]
            latest = max([record.instruction_time_s, *bounds])
        needed[record.video_path] = max(needed.get(record.video_path, 0.0), latest)
    for video, latest in needed.items():
        write_video(root / video, math.ceil(latest) + margin_s, fps=1)


# ----------------------------------------------------------------------------- stats


def stats(path: Path) -> dict:
    done = invoke("stats", path, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_stats_of_the_trace_fixture() -> None:
    release = FIXTURES / "trace_release"
    qa = raw_lines(release / "qa.jsonl")
    proactive = raw_lines(release / "proactive.jsonl")
    got = stats(release)
    assert got["records"] == len(qa) + len(proactive) == 30
    assert got["questions"] == 30  # TRACE counts each QA question and each instruction
    assert got["windows"] == sum(len(r["windows"]) for r in proactive) == 60
    assert got["by_task_type"]["stream bench proactive"] == 3
    assert got["windows_by_task_type"] == {
        "CRR": 3,
        "REC": 15,  # 7 + 5 + 3
        "SSR": 10,  # 3 + 4 + 3
        "stream bench proactive": 32,  # 1 + 1 + 30
    }
    # The 18 question times add up to 791 s.
    assert got["durations"]["question_time_s"] == {"min": 14.0, "mean": 43.944, "max": 92.0}
    assert got["format"] == "trace"
    tiny = invoke("stats", release, "--subset", "tiny", "--json")
    assert json.loads(tiny.stdout)["records"] == 11


def test_stats_of_the_ovo_fixture_count_probes_as_questions() -> None:
    path = FIXTURES / "ovo_bench" / "ovo_bench_new.json"
    raw = json.loads(path.read_text())
    probes = sum(len(e.get("test_info", ())) for e in raw)
    got = stats(path)
    assert got["records"] == len(raw) == 25
    assert got["by_task_type"] == {**{e["task"]: 2 for e in raw}, "REC": 3}
    # CRR 5 + 5; REC 9 + 7 + 3; SSR 13 + 18 (3 for a first step, 5 for each later one)
    assert got["probes"] == probes == 60
    assert got["questions"] == 18 + 7 + 60
    # REC: one window per rise of the count (3 + 4 + 1); SSR: one per step; CRR: one each.
    assert got["windows_by_task_type"] == {"CRR": 2, "REC": 8, "SSR": 7}
    assert got["windows"] == 17


@pytest.mark.parametrize(
    ("part", "records", "windows"),
    [("real", 4, 0), ("omni", 4, 0), ("sqa", 8, 0), ("proactive", 4, 4)],
)
def test_stats_of_the_streamingbench_fixtures(part: str, records: int, windows: int) -> None:
    path = FIXTURES / "streamingbench" / f"questions_{part}.json"
    questions = sum(len(e["questions"]) for e in entries(path))
    got = stats(path)
    assert (got["records"], got["questions"], got["windows"]) == (questions, questions, windows)
    assert got["records"] == records


def test_stats_text() -> None:
    done = invoke("stats", FIXTURES / "ovo_bench" / "ovo_bench_new.json")
    assert done.exit_code == 0
    lines = done.stdout.splitlines()
    assert lines[1] == "questions 85 (18 QA, 7 instructions, 60 probes); windows 17"
    assert f"  {'REC':<40} {3:>7}  {8:>7}" in lines


# ----------------------------------------------------------------------------- validate


@pytest.mark.parametrize(
    "parts",
    [
        ("trace_release",),
        ("trace_release", "with_manifest"),
        ("ovo_bench", "ovo_bench_new.json"),
        ("streamingbench", "questions_sqa.json"),
    ],
)
def test_the_fixtures_validate_clean(parts: tuple[str, ...]) -> None:
    path = FIXTURES.joinpath(*parts)
    done = invoke("validate", path)
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[-1].startswith(f"{path}: no problems in ")


def test_videos_exactly_as_long_as_the_annotations_pass(tmp_path: Path) -> None:
    path = FIXTURES / "streamingbench" / "questions_proactive.json"
    stand_in_videos(load_benchmark(str(path), tmp_path), tmp_path, margin_s=0)
    # The latest annotated time of sample_933_proactive.mp4 is its ground truth, 00:00:17.
    assert video_duration_s(tmp_path / "videos" / "sample_933_proactive.mp4") == 17.0
    done = invoke("validate", path, "--video-root", tmp_path, "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["ok"], report["records"], report["videos_checked"]) == (True, 4, 3)


@pytest.fixture
def defective_release(tmp_path: Path) -> tuple[Path, Path, int]:
    """Six short records of the TRACE fixture with one injected defect each, plus a
    truncated seventh line; returns (release, video root, truncation column)."""
    source = FIXTURES / "trace_release"
    qa = {r["record_id"]: r for r in raw_lines(source / "qa.jsonl")}
    proactive = {r["record_id"]: r for r in raw_lines(source / "proactive.jsonl")}
    videos = tmp_path / "videos-root"

    unknown_letter = {**qa["streambench_qa:901"], "answer": "E"}
    write_video(videos / unknown_letter["video_path"], 15)
    too_long = qa["streambench_qa:905"]  # asked at 19 s, its video lasts 10 s
    write_video(videos / too_long["video_path"], 10)
    missing = qa["streambench_qa:909"]  # no video written
    broken = qa["streambench_qa:910"]
    (videos / broken["video_path"]).write_bytes(b"\x00" * 2048)

    swapped = json.loads(json.dumps(proactive["ovo_bench_proactive:1921"]))
    for items in (swapped["windows"], swapped["metadata"]["trigger_annotations"]):
        items[0], items[1] = items[1], items[0]
    write_video(videos / swapped["video_path"], 25)
    reversed_ = json.loads(json.dumps(proactive["ovo_bench_proactive:1922"]))
    reversed_["windows"][2]["end_s"] = 9.0
    reversed_["metadata"]["trigger_annotations"][2]["response_window_end_s"] = 9.0
    write_video(videos / reversed_["video_path"], 50)

    release = tmp_path / "release"
    release.mkdir()
    whole = json.dumps(qa["streambench_qa:901"])
    truncated = whole[: whole.index("What unusual") + 4]  # cut inside the question
    qa_lines = [json.dumps(r) for r in (unknown_letter, too_long, missing, broken)]
    (release / "qa.jsonl").write_text("\n".join([*qa_lines, truncated]) + "\n")
    (release / "proactive.jsonl").write_text(
        "\n".join(json.dumps(r) for r in (swapped, reversed_)) + "\n"
    )
    try:
        json.loads(truncated)
    except json.JSONDecodeError as exc:
        return release, videos, exc.colno
    raise AssertionError("the truncated line parsed")


def test_validate_reports_each_injected_defect_on_its_line(defective_release) -> None:
    release, videos, column = defective_release
    done = invoke("validate", release, "--video-root", videos)
    assert done.exit_code == 1
    *problems, summary = done.stdout.splitlines()
    assert sorted(problems) == sorted(
        [
            f"qa.jsonl:5: not valid JSON at column {column}: unterminated string starting",
            "streambench_qa:901: unknown answer letter 'E' (options A-D)",
            "ovo_bench_proactive:1921: window 2 starts at 0.2s, before window 1 at 1.7s "
            "(windows out of order)",
            "ovo_bench_proactive:1922: window 3 [27.5s, 9s) is empty or reversed",
            "videos/sample_909_real.mp4: missing video: "
            f"{videos}/videos/sample_909_real.mp4 does not exist (needed by 1 record)",
            "videos/sample_910_real.mp4: undecodable video: "
            f"{videos}/videos/sample_910_real.mp4: Invalid data found when processing input "
            "(needed by 1 record)",
        ]
    )
    assert summary == f"{release}: 6 problems in 6 trace records; 6 videos checked"
    assert "no manifest.json" in done.stderr
    # Past the video's end is a warning: the file is usable, a run fails that record only.
    assert (
        "warning: streambench_qa:905: question at 19s is past the end of its video "
        "(10.00s, videos/sample_905_real.mp4); a run fails this record"
    ) in done.stderr.splitlines()

    as_json = json.loads(invoke("validate", release, "--video-root", videos, "--json").stdout)
    assert as_json["ok"] is False and len(as_json["problems"]) == 6
    assert [w.split(":", 2)[1] for w in as_json["warnings"]] == ["905"]
    unknown = {"where": "streambench_qa:901", "message": "unknown answer letter 'E' (options A-D)"}
    assert unknown in as_json["problems"]


def test_without_a_video_root_only_the_records_are_checked(defective_release) -> None:
    release, _, _ = defective_release
    done = invoke("validate", release)
    assert done.exit_code == 1
    assert done.stdout.splitlines()[-1] == (
        f"{release}: 4 problems in 6 trace records; videos not checked (no --video-root)"
    )


def test_unreadable_paths_exit_2_with_one_line(tmp_path: Path) -> None:
    truncated = tmp_path / "ovo_bench_new.json"
    truncated.write_text('[{"id": 1, "task": "OCR", "vid')
    unknown = tmp_path / "other.json"
    unknown.write_text('{"hello": 1}')
    cases = [
        (truncated, f"{truncated} is not valid JSON at line 1, column 27: unterminated string"),
        (unknown, f"{unknown}: not a benchmark this harness reads"),
        (tmp_path / "absent.json", f"{tmp_path / 'absent.json'} does not exist"),
    ]
    for path, message in cases:
        for command in ("validate", "stats"):
            done = invoke(command, path)
            assert done.exit_code == 2, done.output
            assert done.stdout == ""
            assert done.stderr.startswith(f"error: {message}")
            assert done.stderr.count("\n") == 1
    as_json = invoke("validate", truncated, "--json")
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"].endswith("unterminated string starting")


def test_stats_counts_what_imports_and_says_what_did_not(tmp_path: Path) -> None:
    path = tmp_path / "questions_real.json"
    question = {"task_type": "Counting", "question": "How many?", "answer": "A"}
    good = {**question, "time_stamp": "00:00:05", "options": ["1", "2"]}
    path.write_text(
        json.dumps([{"video_path": "./videos/v.mp4", "questions": [good, {**question}]}])
    )
    done = invoke("stats", path, "--json")
    assert done.exit_code == 0
    assert (json.loads(done.stdout)["records"], json.loads(done.stdout)["problems"]) == (1, 1)
    assert "1 entries could not be imported" in done.stderr


# ----------------------------------------------------------------------------- end to end


def execute(config: RunConfig, store: Store) -> RunSummary:
    async def go() -> RunSummary:
        executor = RunExecutor(config, store)
        return await executor.execute(await executor.prepare())

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("parts", "source", "windows"),
    [
        (("trace_release",), "trace", 60),
        (("ovo_bench", "ovo_bench_new.json"), "ovo_bench", 17),
        (("streamingbench", "questions_proactive.json"), "streamingbench", 4),
    ],
)
def test_imported_records_run_end_to_end_and_are_scored(parts, source, windows, tmp_path):
    """Every record of a fixture runs through the Core against the `always` baseline adapter
    on stand-in videos, and the run is scored."""
    original = FIXTURES.joinpath(*parts)
    # The copy sits in its video root (the default one), so that the run names only a path.
    root = tmp_path / "data"
    if original.is_dir():
        shutil.copytree(original, root)
        path = root
    else:
        root.mkdir()
        path = root / original.name
        shutil.copy(original, path)
    benchmark = load_benchmark(str(path), tmp_path)
    stand_in_videos(benchmark, root)
    with (
        AdapterProcess("always") as adapter,
        Store(f"sqlite:///{tmp_path / 'store.db'}") as store,
    ):
        config = RunConfig(
            benchmark=str(path),
            endpoints=[EndpointConfig(url=adapter.url, concurrency=8)],
            cache_dir=str(tmp_path / "cache"),
            fps=0.5,  # half the frames of the trace profile's 1 fps: the test stays quick
        )
        summary = execute(config, store)
        assert (summary.finished, summary.failed) == (len(benchmark.records), 0)
        scores = score_run(store, summary.run_id)
    assert scores.records_scored == len(benchmark.records)
    assert list(scores.by_source_benchmark) == [source]
    assert scores.overall["proactive"]["in_window_accuracy"].population == windows


def test_unusual_times_are_imported_with_a_note_and_warned_past_the_video_end(
    tmp_path: Path,
) -> None:
    question = {
        "task_type": "Counting",
        "question": "How many?",
        "answer": "A",
        "options": ["A. 1", "B. 2"],
    }
    data = [
        {"video_path": "./videos/v.mp4", "questions": [{**question, "time_stamp": "00:24"}]},
        {"video_path": "./videos/v.mp4", "questions": [{**question, "time_stamp": "00:12450"}]},
        {"video_path": "./videos/v.mp4", "questions": [{**question, "time_stamp": "00:00:05"}]},
    ]
    path = tmp_path / "questions_real.json"
    path.write_text(json.dumps(data))
    imported = import_path(path)
    assert imported.problems == []
    assert [r.question_time_s for r in imported.benchmark.records] == [24.0, 12450.0, 5.0]
    stats = invoke("stats", path, "--json")
    assert stats.exit_code == 0
    assert (json.loads(stats.stdout)["questions"], json.loads(stats.stdout)["problems"]) == (3, 0)
    assert imported.notes == [
        "streamingbench:real/0/0: time_stamp '00:24' read as 24 s (base-60 digits from the "
        "right, as StreamingBench reads it)",
        "streamingbench:real/1/0: time_stamp '00:12450' read as 12450 s (base-60 digits from "
        "the right, as StreamingBench reads it)",
    ]
    write_video(tmp_path / "videos" / "v.mp4", duration_s=30)
    report = validate(imported, tmp_path)
    assert report.problems == []
    assert report.warnings == [
        "streamingbench:real/1/0: question at 12450s is past the end of its video "
        "(30.00s, videos/v.mp4); a run fails this record"
    ]
