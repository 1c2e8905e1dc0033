"""The `streameval` command line as a user meets it: real processes, one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streameval.core.launch.adapter_process import AdapterProcess
from tests.faults import without_progress
from tests.test_export import validate_line

DOCS = Path(__file__).resolve().parent.parent / "docs" / "events.md"


def streameval(
    *args: str, cwd: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streameval.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=env,
    )


def documented_payloads() -> dict[str, set[str]]:
    """The payload fields of every event kind, read from docs/events.md's table."""
    rows = re.findall(r"^\| `(\w+)` \| `\{(.*?)\}` \|", DOCS.read_text(), re.M)
    return {kind: top_level_keys(fields) for kind, fields in rows}


def top_level_keys(fields: str) -> set[str]:
    """`a, b: {c, d}, e` -> {a, b, e}: names at brace depth 0."""
    keys, depth, current = set(), 0, ""
    for char in fields + ",":
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            if current.strip():
                keys.add(current.split(":")[0].strip())
            current = ""
        else:
            current += char
    return keys


def test_run_runs_and_export_follow_the_documented_schema(benchmark_path, tmp_path):
    store = f"sqlite:///{tmp_path / 's.db'}"
    common = ["--store", store]
    with AdapterProcess("always") as adapter:
        ran = streameval(
            "run",
            "--adapter-url",
            adapter.url,
            "--benchmark",
            str(benchmark_path),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--json",
            *common,
        )
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert (summary["sessions"], summary["finished"], summary["failed"]) == (3, 3, 0)

    listed = json.loads(streameval("runs", "--json", *common).stdout)
    assert [(r["run_id"], r["status"], r["adapters"]) for r in listed] == [
        (summary["run_id"], "finished", ["always 1 (baseline-always)"])
    ]
    assert summary["status"] == "finished"

    out = tmp_path / "run.jsonl"
    exported = streameval("export", summary["run_id"], "-o", str(out), *common)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["type"] for line in lines[:1]] == ["run"]
    assert sum(line["type"] == "record" for line in lines) == 3
    assert sum(line["type"] == "session" for line in lines) == 3
    payloads = documented_payloads()
    kinds_seen = set()
    for line in lines:
        validate_line(line)
        if line["type"] == "event":
            kinds_seen.add(line["kind"])
            assert set(line["payload"]) == payloads[line["kind"]], line["kind"]
    assert kinds_seen >= {
        "adapter_hello",
        "session_start",
        "frame_sent",
        "frame_ack",
        "question_sent",
        "instruction_sent",
        "step_sent",
        "response_start",
        "response_delta",
        "response_final",
        "session_end",
        "session_finished",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run"], "give --adapter NAME (the Core starts it) or --adapter-url of one you run"),
        (["run", "--adapter-url", "http://x"], "must be a ws:// or wss:// URL"),
        (["run", "--adapter-url", "ws://127.0.0.1:9/ws"], "is not reachable"),
        (["run", "--resume", "nope"], "nope"),
        # export opens the store read-only: a store that does not exist is not created
        (["export", "nope"], "the file does not exist"),
        (
            ["run", "--adapter-url", "ws://127.0.0.1:9/ws", "--profile", "x"],
            "unknown protocol profile 'x'; protocol profiles: trace, ",
        ),
    ],
)
def test_user_mistakes_get_one_clear_line(args, message, tmp_path):
    done = streameval(*args, "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = without_progress(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines


def test_a_malformed_benchmark_file_is_named(tmp_path):
    bad = tmp_path / "benchmark.json"
    bad.write_text('{"name": "x", "version": "1", "video_root": ".", "records": [{"task": "qa"}]}')
    with AdapterProcess("always") as adapter:
        done = streameval(
            "run",
            "--adapter-url",
            adapter.url,
            "--benchmark",
            str(bad),
            "--store",
            f"sqlite:///{tmp_path / 's.db'}",
        )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"benchmark file {bad}: records.0.qa.record_id: Field required" in done.stderr


def test_adapter_serve_lists_and_refuses_unknown_names():
    listed = streameval("adapter", "list")
    assert listed.stdout.splitlines()[2].split()[0] == "always"  # below the header
    unknown = streameval("adapter", "serve", "nobody", "--port", "0")
    assert unknown.returncode != 0
    assert "unknown adapter 'nobody'" in unknown.stderr and "Traceback" not in unknown.stderr


def ovo_offline_run(benchmark_path: Path, tmp_path: Path) -> tuple[str, str]:
    """A run of the QA records under the ovo-offline protocol profile: (store, run id)."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess("always") as adapter:
        ran = streameval(
            "run", "--adapter-url", adapter.url, "--benchmark", str(benchmark_path),
            "--profile", "ovo-offline", "--task", "qa", "--json", "--store", store,
        )  # fmt: skip
    return store, json.loads(ran.stdout)["run_id"]


def test_score_defaults_to_the_scoring_profile_of_the_run_protocol(benchmark_path, tmp_path):
    store, run_id = ovo_offline_run(benchmark_path, tmp_path)
    scored = json.loads(streameval("score", run_id, "--json", "--store", store).stdout)
    assert (scored["protocol"], scored["profile"]["name"]) == ("ovo-offline", "ovo-offline")
    forced = streameval("score", run_id, "--json", "--profile", "trace-paper-v1", "--store", store)
    assert json.loads(forced.stdout)["profile"]["name"] == "trace-paper-v1"


def test_compare_never_subtracts_timings_of_a_logical_and_a_wall_clock_run(
    benchmark_path, tmp_path
):
    store = f"sqlite:///{tmp_path / 's.db'}"
    runs = []
    with AdapterProcess("always") as adapter:
        for pacing in ("logical", "wall_clock"):
            ran = streameval(
                "run", "--adapter-url", adapter.url, "--benchmark", str(benchmark_path),
                "--pacing", pacing, "--speed", "8", "--json", "--store", store,
            )  # fmt: skip
            assert ran.returncode == 0, ran.stderr
            runs.append(json.loads(ran.stdout)["run_id"])
    compared = streameval(
        "compare", *runs, "--profile", "trace-extended", "--json", "--store", store
    )
    assert compared.returncode == 0, compared.stderr
    comparison = json.loads(compared.stdout)
    proactive = comparison["overall"]["proactive"]
    for name in ("median_response_delay_runtime_s", "median_response_delay_video_s"):
        delay = proactive[name]
        assert delay["a"] is not None and delay["b"] is not None, name
        assert (delay["diff"], delay["ci95"]) == (None, None), name
    ttft = comparison["overall"]["qa"]["ttft_s_p50"]
    assert ttft["a"] is not None and ttft["diff"] is None
    # Everything not measured on the clock is still compared.
    assert proactive["in_window_accuracy"]["diff"] is not None
    assert comparison["notes"] == [
        "the runs were paced differently (logical and wall_clock at speed 8): TTFT, latency "
        "and response delays measure different things, so they are not subtracted; both "
        "values are shown"
    ]
    shown = streameval("compare", *runs, "--store", store)
    assert "note: the runs were paced differently" in shown.stdout


def test_profiles_print_json_for_scripts():
    from streameval.core.config import PROTOCOL_PROFILES
    from streameval.scorer.profiles import SCORING_PROFILES
    from streameval.scorer.report import profile_report

    listed = streameval("profiles", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {
        "protocol": [profile.model_dump(mode="json") for profile in PROTOCOL_PROFILES.values()],
        "scoring": [
            profile_report(profile).model_dump(mode="json") for profile in SCORING_PROFILES.values()
        ],
    }


def test_compare_and_report_default_to_the_scoring_profile_of_the_run_protocol(
    benchmark_path, tmp_path
):
    store, run_id = ovo_offline_run(benchmark_path, tmp_path)
    compared = streameval("compare", run_id, run_id, "--json", "--explain", "--store", store)
    assert compared.returncode == 0, compared.stderr
    comparison = json.loads(compared.stdout)
    assert comparison["profile"]["name"] == "ovo-offline"
    # The run's task types are none of OVO-Bench's: `other`, which OVO-Bench's total leaves out.
    assert "total" not in comparison["explain"]["ovo"]
    assert comparison["explain"]["ovo"]["other"]["unit"] == "%"
    html = tmp_path / "r.html"
    reported = streameval("report", run_id, "--html", str(html), "--store", store)
    assert reported.returncode == 0, reported.stderr
    assert re.search(r'"profiles":\s*\[\{"name":\s*"ovo-offline"', html.read_text())
    shown = streameval("score", run_id, "--explain", "--store", store)
    assert "  other · % · 0-100, higher is better" in shown.stdout.splitlines()
