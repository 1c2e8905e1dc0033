"""Inputs refused with one line naming what is wrong (issue 33, item 9, files and command
line): videos outside the video root, an annotation line too long to hold, duplicate record
ids, negative evidence times, NaN and infinite `run` options, a control API that would name
its store's path. Each is written to disk for real and given to the real CLI in its own
process; exit codes and messages are exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streameval.core.benchmark.importing import (
    MAX_JSON_FILE_BYTES,
    MAX_LINE_BYTES,
    Problem,
    read_jsonl,
)
from streameval.core.benchmark.records import EvidenceSpan
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.launch.control_api import create_app
from streameval.core.run.inputs import RunInputError, create_run
from streameval.core.store.store import Store
from tests.test_import_trace import QA_ROW, write_release
from tests.timeline_fixtures import PROACTIVE, QA, QA_EARLY, write_benchmark, write_video

TOKEN = "s3cret-token-of-the-test"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMIT_MIB = MAX_LINE_BYTES // (1024 * 1024)


def streameval(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "streameval.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.strip()]


def run_args(benchmark: Path, tmp_path: Path, url: str = "ws://127.0.0.1:9/ws") -> list:
    store = f"sqlite:///{tmp_path / 's.db'}"
    return ["run", "--benchmark", benchmark, "--adapter-url", url, "--store", store,
            "--cache-dir", tmp_path / "cache"]  # fmt: skip


def no_runs(tmp_path: Path) -> bool:
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        return store.list_runs() == []


# ----------------------------------------------------------------------------- video root


def escaping_benchmark(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A benchmark in `bench/` whose three records reach `elsewhere/x.mp4` by `..`, by an
    absolute path and by a symlink inside the root; the video itself is real."""
    root, outside = tmp_path / "bench", tmp_path / "elsewhere" / "x.mp4"
    write_video(outside)
    records = (
        QA.model_copy(update={"video_path": "../elsewhere/x.mp4"}),
        QA_EARLY.model_copy(update={"video_path": str(outside)}),
        PROACTIVE.model_copy(update={"video_path": "linked.mp4"}),
    )
    benchmark = write_benchmark(root, records=records)
    (root / "linked.mp4").symlink_to(outside)
    return benchmark, root, outside


def outside_line(record: str, name: str, root: Path, target: Path) -> str:
    return (
        f"{record}: video {name!r} lies outside the video root {root} (it is {target}); "
        "--allow-outside-video-root allows it"
    )


def test_videos_outside_the_root_are_refused_by_validate_and_run(adapter_env, tmp_path):
    benchmark, root, outside = escaping_benchmark(tmp_path)
    expected = [
        outside_line("t:qa:1", "../elsewhere/x.mp4", root, outside),
        outside_line("t:qa:2", str(outside), root, outside),
        outside_line("t:pro:1", "linked.mp4", root, outside),
    ]
    checked = streameval("data", "validate", benchmark)
    assert checked.returncode == 1 and error_lines(checked) == []
    assert checked.stdout.splitlines() == [
        *expected,
        f"{benchmark}: 3 problems in 3 benchmark_json records; videos not checked "
        "(no --video-root)",
    ]

    ran = streameval(*run_args(benchmark, tmp_path))  # refused before any endpoint is asked
    assert ran.returncode == 2
    assert error_lines(ran) == [
        f"error: {expected[0]} (and 2 more problems); `streameval data validate {benchmark}` "
        "lists them"
    ]
    assert no_runs(tmp_path)

    allowed = streameval("data", "validate", benchmark, "--allow-outside-video-root")
    assert allowed.returncode == 0, allowed.stdout
    with AdapterProcess("tests.wire_adapters:InstantAdapter") as adapter:
        ran = streameval(
            *run_args(benchmark, tmp_path, adapter.url), "--allow-outside-video-root", "--json"
        )
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert (summary["finished"], summary["failed"]) == (3, 0)
    with Store(summary["store"]) as store:
        assert store.get_run(summary["run_id"]).config["allow_outside_video_root"] is True


def test_a_symlinked_root_and_links_within_it_are_inside(tmp_path):
    real = tmp_path / "real"
    benchmark = write_benchmark(
        real, records=(QA, QA_EARLY.model_copy(update={"video_path": "l.mp4"}))
    )
    (real / "l.mp4").symlink_to(real / "v.mp4")  # a link that stays inside
    (tmp_path / "root").symlink_to(real)  # a root that is itself a link
    checked = streameval("data", "validate", benchmark, "--video-root", tmp_path / "root")
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.splitlines() == [
        f"{benchmark}: no problems in 2 benchmark_json records; 2 videos checked"
    ]


def test_the_flag_is_on_both_help_screens():
    for command in (("run",), ("data", "validate")):
        shown = streameval(*command, "--help")
        assert shown.returncode == 0
        assert "--allow-outside-video-root  Accept video paths that lead outside" in shown.stdout


def test_the_control_api_refuses_the_flag_and_videos_outside_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMEVAL_DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("STREAMEVAL_ADAPTER_HOSTS", "127.0.0.1")
    benchmark, _, _ = escaping_benchmark(tmp_path)
    app = create_app(f"sqlite:///{tmp_path / 's.db'}", TOKEN)
    with TestClient(app) as client:
        client.post("/adapters", json={"name": "a", "url": "ws://127.0.0.1:9/ws"}, headers=AUTH)
        overrides = {"benchmark": str(benchmark), "allow_outside_video_root": True}
        flagged = client.post(
            "/runs", json={"adapters": ["a"], "overrides": overrides}, headers=AUTH
        )
        assert (flagged.status_code, flagged.json()) == (
            422,
            {
                "detail": "allow_outside_video_root cannot be set over the API: videos stay "
                "under the video root"
            },
        )
        plain = {"benchmark": str(benchmark)}
        refused = client.post("/runs", json={"adapters": ["a"], "overrides": plain}, headers=AUTH)
        assert refused.status_code == 422
        assert refused.json()["detail"].startswith(
            "t:qa:1: video '../elsewhere/x.mp4' lies outside"
        )


# ----------------------------------------------------------------------------- line size


def wait_rss_kib(command: list[str], out: Path) -> tuple[int, int]:
    """Run `command` to its end (its output in `out`); its exit code and peak RSS in KiB,
    from the kernel's own count (wait4)."""
    with out.open("w") as sink:
        child = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss


def test_a_300_mb_line_is_one_problem_and_memory_stays_bounded(tmp_path):
    small = write_release(tmp_path / "small", [QA_ROW, {**QA_ROW, "record_id": "t_qa:3"}], [])
    big = write_release(tmp_path / "big", [QA_ROW], [])
    with (big / "qa.jsonl").open("ab") as file:
        file.write(b'{"record_id": "t_qa:2", "question": "')
        block = b"a" * (1024 * 1024)
        for _ in range(300):
            file.write(block)
        file.write(b'"}\n' + json.dumps({**QA_ROW, "record_id": "t_qa:3"}).encode() + b"\n")
    assert (big / "qa.jsonl").stat().st_size > 300 * 1024 * 1024

    validate = [sys.executable, "-m", "streameval.cli", "data", "validate"]
    code, baseline = wait_rss_kib([*validate, small], tmp_path / "small.out")
    assert code == 0, (tmp_path / "small.out").read_text()
    code, peak = wait_rss_kib([*validate, big], tmp_path / "big.out")
    lines = (tmp_path / "big.out").read_text().splitlines()
    assert code == 1
    assert lines == [
        f"note: {big}: no manifest.json, so file checksums are not verified",
        f"qa.jsonl:2: line longer than the limit of {LIMIT_MIB} MiB ({MAX_LINE_BYTES} bytes)",
        f"{big}: 1 problem in 2 trace records; videos not checked (no --video-root)",
    ]
    # Reading the line whole costs more than 1 GB; the cap, one buffer of MAX_LINE_BYTES.
    grown_mib = (peak - baseline) / 1024
    print(f"peak RSS {peak / 1024:.0f} MiB, baseline {baseline / 1024:.0f} MiB")
    assert grown_mib < 48, (peak, baseline)


def test_a_line_at_the_limit_imports_and_one_byte_more_does_not(tmp_path):
    path = tmp_path / "qa.jsonl"
    row = json.dumps(QA_ROW)
    at_limit = row + " " * (MAX_LINE_BYTES - len(row))
    path.write_text(f"{at_limit}\r\n{at_limit} \n{row}")
    rows, problems = read_jsonl(path)
    assert [number for number, _ in rows] == [1, 3]
    assert problems == [
        Problem(
            "qa.jsonl:2", f"line longer than the limit of {LIMIT_MIB} MiB ({MAX_LINE_BYTES} bytes)"
        )
    ]


def test_a_json_file_past_its_limit_is_one_line(tmp_path):
    big = tmp_path / "ovo.json"
    with big.open("wb") as file:
        file.write(b"[" + b" " * MAX_JSON_FILE_BYTES + b"]")
    message = f"JSON file longer than the limit of 64 MiB ({MAX_JSON_FILE_BYTES} bytes)"
    for path in (big, Path("/dev/zero")):  # /dev/zero never ends: it is not read to its end
        checked = streameval("data", "validate", path)
        assert checked.returncode == 2
        assert error_lines(checked) == [f"error: {path}: {message}"]


# ----------------------------------------------------------------------------- record ids


def test_duplicate_record_ids_are_refused_by_validate_and_run(tmp_path):
    twin = QA_EARLY.model_copy(update={"record_id": QA.record_id})
    benchmark = write_benchmark(tmp_path / "bench", records=(QA, twin, PROACTIVE))
    checked = streameval("data", "validate", benchmark)
    assert checked.returncode == 1
    assert checked.stdout.splitlines() == [
        "t:qa:1: duplicate record id",
        f"{benchmark}: 1 problem in 3 benchmark_json records; videos not checked (no --video-root)",
    ]
    ran = streameval(*run_args(benchmark, tmp_path))
    assert ran.returncode == 2
    assert error_lines(ran) == [
        f"error: t:qa:1: duplicate record id; `streameval data validate {benchmark}` lists them"
    ]
    assert no_runs(tmp_path)


def test_run_creation_refuses_duplicate_ids_before_storing_anything(tmp_path):
    records = [QA.model_dump(mode="json"), QA.model_dump(mode="json")]
    records += [PROACTIVE.model_dump(mode="json")] * 3
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        with pytest.raises(RunInputError) as refused:
            create_run(store, "r1", benchmark="b", config={}, conditions={}, records=records)
        assert str(refused.value) == (
            "duplicate record ids t:qa:1, t:pro:1: each record of a run needs its own id; "
            "fix the benchmark file"
        )
        assert store.list_runs() == []


# ----------------------------------------------------------------------------- evidence times


def test_negative_evidence_times_are_problems(tmp_path):
    qa = QA.model_copy(
        update={"evidence_anchor_s": -1.0, "evidence_spans": (EvidenceSpan(start_s=-2, end_s=3),)}
    )
    trigger = PROACTIVE.triggers[0].model_copy(
        update={"evidence_start_s": -0.5, "evidence_end_s": 1.0}
    )
    proactive = PROACTIVE.model_copy(update={"triggers": (trigger, *PROACTIVE.triggers[1:])})
    benchmark = write_benchmark(tmp_path / "bench", records=(qa, QA_EARLY, proactive))
    checked = streameval("data", "validate", benchmark)
    assert checked.returncode == 1
    assert checked.stdout.splitlines() == [
        "t:qa:1: evidence anchor -1s is negative",
        "t:qa:1: evidence span 1 [-2s, 3s] is negative",
        "t:pro:1: window 1: evidence start -0.5s is negative",
        f"{benchmark}: 3 problems in 3 benchmark_json records; videos not checked "
        "(no --video-root)",
    ]


# ----------------------------------------------------------------------------- run options


@pytest.mark.parametrize(
    "flag", ["--speed", "--fps", "--qa-history", "--response-timeout", "--adapter-ready-timeout"]
)
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_non_finite_float_options_are_named(flag, value, tmp_path):
    ran = streameval(*run_args(Path("synthetic"), tmp_path), flag, value)
    assert ran.returncode == 2
    assert error_lines(ran) == [f"error: {flag} must be a finite number, not {value}"]
    resumed = streameval("run", "--resume", "r", "--store", tmp_path / "s.db", flag, value)
    assert (resumed.returncode, error_lines(resumed)) == (2, error_lines(ran))


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--response-timeout", "0", "--response-timeout: Input should be greater than 0"),
        ("--qa-history", "-1", "--qa-history: Input should be greater than or equal to 0"),
        ("--fps", "61", "--fps: Input should be less than or equal to 60"),
        ("--lease-timeout", "inf", "--lease-timeout must be more than 0 and at most 86400 seconds"),
    ],
)
def test_out_of_range_options_are_named(flag, value, message, tmp_path):
    ran = streameval(*run_args(Path("synthetic"), tmp_path), flag, value)
    assert (ran.returncode, error_lines(ran)) == (2, [f"error: {message}"])


# ----------------------------------------------------------------------------- control API


def test_a_lost_store_is_a_503_that_names_no_path(tmp_path):
    store_file = tmp_path / "private" / "s.db"
    store_file.parent.mkdir()
    app = create_app(f"sqlite:///{store_file}", TOKEN)
    with TestClient(app) as client:
        store_file.unlink()  # deleted under the running API
        answers = [
            client.get("/adapters", headers=AUTH),
            client.post(
                "/adapters", json={"name": "a", "url": "ws://127.0.0.1:1/ws"}, headers=AUTH
            ),
            client.post("/runs", json={"adapters": ["a"]}, headers=AUTH),
            client.get("/runs/r1", headers=AUTH),
        ]
    for answer in answers:
        assert (answer.status_code, answer.json()) == (503, {"detail": "the store is unavailable"})
        assert "private" not in answer.text and str(tmp_path) not in answer.text
