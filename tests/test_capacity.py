"""`streameval capacity` against an adapter whose latency grows with load in a known way
(tests/load_adapter.py, its own process): its time to first token is 0.5 s x the sessions
open at once, so under `ttft_p95=2.25` four sessions pass (2.0 s) and five fail (2.5 s). The
quarter second either side is what the Core's lag and the round trip may add on a machine
loaded several times over without moving the knee.

The search is run once for the module (`streameval capacity --json`, a real Core process,
real SQLite store): from 2 it doubles to 4 and 8 (breaks), then bisects 6 and 5 (both
break): the knee is 4. The adapter also serves vLLM-named Prometheus metrics, which every
curve point records. Each level is a 4 s video's first 2 s (three frames at 1 fps).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from streameval.cli import app
from streameval.core.analyses.capacity_search import (
    CapacityError,
    answer,
    next_level,
    parse_prometheus,
    parse_slo,
)
from streameval.core.benchmark.records import Benchmark
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from tests.servers import served, streameval_command
from tests.timeline_fixtures import QA, write_video

pytestmark = pytest.mark.timeout(240)
REPO = Path(__file__).resolve().parent.parent
TTFT_PER_SESSION_S = 0.5
SLO = "ttft_p95=2.25"
KNEE = 4
LEVELS = [2, 4, 5, 6, 8]  # the levels the search runs, in the order of sessions
TRIED = {2: 1, 4: 2, 8: 3, 6: 4, 5: 5}  # ... and when each ran
# What a level's TTFT may exceed the adapter's own delay by (the Core's lag and the WebSocket
# round trip on a loaded machine): half a step, so the SLO stays between two levels.
SLACK_S = TTFT_PER_SESSION_S / 2


def write_load_benchmark(root: Path) -> Path:
    """One QA record over a 4 s video, asked at 2 s: each session streams 3 frames."""
    write_video(root / "v.mp4", seconds=4)
    record = QA.model_copy(
        update={"record_id": "load:1", "question_time_s": 2.0, "evidence_anchor_s": 2.0}
    )
    benchmark = Benchmark(name="load", version="1", video_root=".", records=[record])
    path = root / "benchmark.json"
    path.write_text(benchmark.model_dump_json())
    return path


def child_env(cache: Path) -> dict[str, str]:
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": pythonpath, "STREAMEVAL_CACHE_DIR": str(cache)}


def run_capacity(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "streameval.cli", "capacity", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=200)


@dataclass
class Search:
    store_url: str
    env: dict[str, str]
    result: dict  # `capacity --json`


def capacity_search(root: Path, slo: str = SLO, start: int = 2, most: int = 16) -> Search:
    """A search against the load adapter, reading its metrics (this module's: from 2
    sessions at once to at most 16)."""
    env = child_env(root / "cache")
    benchmark = write_load_benchmark(root / "bench")
    store_url = f"sqlite:///{root / 'store.db'}"
    port_file = root / "metrics-port"
    options = {"ttft_per_session_s": TTFT_PER_SESSION_S, "metrics_port_file": str(port_file)}
    with AdapterProcess("tests.load_adapter:LoadAdapter", options=options) as adapter:
        metrics_url = f"http://127.0.0.1:{port_file.read_text()}/metrics"
        done = run_capacity(
            "--adapter-url", adapter.url, "--slo", slo, "--benchmark", str(benchmark),
            "--start", str(start), "--max", str(most), "--server-metrics", metrics_url,
            "--store", store_url, "--cache-dir", str(root / "cache"), "--json",
            env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return Search(store_url, env, json.loads(done.stdout))


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> Search:
    return capacity_search(tmp_path_factory.mktemp("capacity"))


# --------------------------------------------------------------------------- the search


def test_capacity_finds_the_known_knee(search: Search) -> None:
    result = search.result
    assert result["capacity"] == KNEE
    assert result["first_failing"] == KNEE + 1
    assert result["complete"] is True and result["limited_by_max"] is False
    assert [p["sessions"] for p in result["points"]] == LEVELS
    assert {p["sessions"]: p["tried"] for p in result["points"]} == TRIED
    assert {p["sessions"]: p["passed"] for p in result["points"]} == {n: n <= KNEE for n in LEVELS}
    for point in result["points"]:
        n, metrics = point["sessions"], point["metrics"]
        delay = TTFT_PER_SESSION_S * n
        assert delay <= metrics["ttft_p95_s"] <= delay + SLACK_S, point
        assert delay <= metrics["ttft_p50_s"] <= metrics["ttft_p95_s"]
        assert (metrics["sessions"], metrics["finished"], metrics["failed"]) == (n, n, 0)
        assert (metrics["frames_sent"], metrics["frames_dropped"]) == (3 * n, 0)
        assert metrics["drop_rate"] == 0.0 and metrics["qa_accuracy"] == 1.0
        assert 0 <= metrics["lag_p99_s"] < SLACK_S
        broken = [] if point["passed"] else [f"ttft_p95 {metrics['ttft_p95_s']:.4g} > 2.25"]
        assert point["broken"] == broken
    assert [term["term"] for term in result["slo"]] == ["ttft_p95", "failed_rate"]


def test_each_level_is_an_ordinary_run_scored_like_any(search: Search) -> None:
    """A level's TTFT is the scorer's own, and the level run names its search."""
    point = search.result["points"][1]
    done = subprocess.run(
        streameval_command("score", point["run_id"], "--json", "--store", search.store_url),
        capture_output=True, text=True, env=search.env, check=True,
    )  # fmt: skip
    qa = json.loads(done.stdout)["overall"]["qa"]
    assert qa["ttft_s_p95"]["value"] == point["metrics"]["ttft_p95_s"]
    assert qa["ttft_s_p50"]["value"] == point["metrics"]["ttft_p50_s"]
    with Store(search.store_url) as store:
        level = store.get_run(point["run_id"])
        sessions = store.sessions(point["run_id"])
    assert level.conditions["capacity_level"] == {
        "search": search.result["run_id"],
        "sessions": point["sessions"],
    }
    assert level.config["endpoints"][0]["concurrency"] == point["sessions"] == len(sessions)
    assert level.config["pacing"] == "wall_clock"
    assert sorted(s.session_id for s in sessions) == ["load:1", "load:1~2", "load:1~3", "load:1~4"]


def test_every_point_records_the_servers_own_metrics(search: Search) -> None:
    for point in search.result["points"]:
        n, server = point["sessions"], point["server"]
        assert server["error"] is None
        # Between levels nothing is in flight; over a level the server answered n questions,
        # each after 0.5 s x n (its own TTFT histogram's sum over count).
        assert server["start"]["vllm:num_requests_running"] == 0.0
        assert server["end"]["vllm:num_requests_running"] == 0.0
        assert server["requests"] == n
        assert server["ttft_mean_s"] == pytest.approx(TTFT_PER_SESSION_S * n, abs=1e-9)


def test_the_search_is_stored_as_a_finished_run(search: Search) -> None:
    run_id = search.result["run_id"]
    runs = subprocess.run(
        streameval_command("runs", "--json", "--store", search.store_url),
        capture_output=True, text=True, env=search.env, check=True,
    )  # fmt: skip
    listed = {row["run_id"]: row for row in json.loads(runs.stdout)}
    assert listed[run_id]["status"] == "finished"
    assert listed[run_id]["benchmark"] == "capacity search: load@1"
    assert (listed[run_id]["profile"], listed[run_id]["pacing"]) == ("trace", "wall_clock")
    assert listed[run_id]["adapters"] == ["load 0 (load)"]
    levels = {p["run_id"] for p in search.result["points"]}
    assert levels <= set(listed)
    api_command = streameval_command("results-api", "--store", search.store_url, "--port", "0")
    with served(api_command) as api:
        detail = httpx.get(f"{api.url}/runs/{run_id}", timeout=30).json()
    stored = detail["analyses"]["capacity"]
    assert stored["capacity"] == KNEE
    assert stored["points"] == search.result["points"]
    assert detail["sessions"] == {} and detail["events"] == 0


def test_score_names_the_level_runs_of_a_capacity_search(search: Search) -> None:
    run_id = search.result["run_id"]
    done = subprocess.run(
        streameval_command("score", run_id, "--json", "--store", search.store_url),
        capture_output=True, text=True, env=search.env, check=True,
    )  # fmt: skip
    levels = [
        {"sessions": p["sessions"], "run_id": p["run_id"], "passed": p["passed"]}
        for p in search.result["points"]
    ]
    assert json.loads(done.stdout) == {
        "run_id": run_id,
        "capacity_search": {"capacity": KNEE, "levels": levels},
    }


def test_resuming_a_capacity_search_is_one_line(search: Search) -> None:
    run_id = search.result["run_id"]
    done = subprocess.run(
        streameval_command("run", "--resume", run_id, "--store", search.store_url),
        capture_output=True, text=True, env=search.env, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: run {run_id} is a capacity search, not a benchmark run: it cannot be "
        "resumed or worked on (start it again)"
    )


def test_a_server_without_metrics_is_noted_not_fatal(tmp_path: Path) -> None:
    env = child_env(tmp_path / "cache")
    benchmark = write_load_benchmark(tmp_path / "bench")
    with AdapterProcess("tests.load_adapter:LoadAdapter") as adapter:
        # The adapter's own HTTP server has no /metrics: it answers 404.
        missing = f"http://127.0.0.1:{adapter.port}/metrics"
        done = run_capacity(
            "--adapter-url", adapter.url, "--slo", "ttft_p95=0.5", "--benchmark", str(benchmark),
            "--max", "1", "--server-metrics", missing, "--store", str(tmp_path / "s.db"),
            "--cache-dir", str(tmp_path / "cache"), "--json",
            env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["capacity"] == 1 and result["limited_by_max"] is True
    [point] = result["points"]
    assert point["server"]["error"] == f"{missing} answered HTTP 404"
    assert point["server"]["start"] == {} and point["server"]["requests"] is None


def test_the_metrics_endpoint_the_adapter_names_is_read_without_the_option(
    tmp_path: Path,
) -> None:
    """An adapter whose /info names its server's metrics (as the `openai` adapter does) gets
    them read with no --server-metrics; one that names none is measured without."""
    env = child_env(tmp_path / "cache")
    benchmark = write_load_benchmark(tmp_path / "bench")
    port_file = tmp_path / "metrics-port"
    options = {"ttft_per_session_s": 0.05, "metrics_port_file": str(port_file)}
    common = ["--slo", "ttft_p95=0.5", "--benchmark", str(benchmark), "--max", "1", "--json"]
    common += ["--cache-dir", str(tmp_path / "cache"), "--store", str(tmp_path / "s.db")]
    with AdapterProcess("tests.load_adapter:LoadAdapter", options=options) as adapter:
        named = run_capacity("--adapter-url", adapter.url, *common, env=env)
        metrics_url = f"http://127.0.0.1:{port_file.read_text()}/metrics"
    with AdapterProcess("tests.load_adapter:LoadAdapter") as adapter:
        unnamed = run_capacity("--adapter-url", adapter.url, *common, env=env)
    assert named.returncode == 0 and unnamed.returncode == 0, named.stderr + unnamed.stderr
    [point] = json.loads(named.stdout)["points"]
    assert point["server"]["url"] == metrics_url and point["server"]["error"] is None
    assert point["server"]["requests"] == 1
    assert json.loads(unnamed.stdout)["points"][0]["server"] is None


def wait_for_level(store_url: str, sessions: int, timeout_s: float = 30.0) -> None:
    """Until the level of `sessions` streams (its run is `running`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Store(store_url) as store:
            for run in store.list_runs():
                level = run.conditions.get("capacity_level") or {}
                if level.get("sessions") == sessions and run.status == "running":
                    return
        time.sleep(0.05)
    raise AssertionError(f"the level of {sessions} sessions never ran")


def test_sigterm_stops_the_search_and_keeps_its_curve(tmp_path: Path) -> None:
    """`docker stop` in the second level: the first level's point stays stored, the search
    run and the level in flight are `interrupted`, the command exits 143."""
    env = child_env(tmp_path / "cache")
    benchmark = write_load_benchmark(tmp_path / "bench")
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess("tests.load_adapter:LoadAdapter") as adapter:
        child = subprocess.Popen(
            streameval_command(
                "capacity", "--adapter-url", adapter.url, "--slo", "ttft_p95=60",
                "--benchmark", str(benchmark), "--store", store_url,
                "--cache-dir", str(tmp_path / "cache"),
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert child.stderr is not None
        first = child.stderr.readline()  # the first level's line, as it ends
        wait_for_level(store_url, 2)
        child.send_signal(signal.SIGTERM)
        _, rest = child.communicate(timeout=60)
    assert first.startswith("1 session at once: meets the SLO (run "), first
    assert child.returncode == 143, rest
    with Store(store_url) as store:
        [search] = [run for run in store.list_runs() if run.config.get("kind")]
        stored = store.analyses(search.run_id)["capacity"]
        statuses = {run.run_id: run.status for run in store.list_runs()}
    assert (
        rest
        == f"capacity search {search.run_id} terminated (SIGTERM): its curve so far is stored\n"
    )
    assert statuses.pop(search.run_id) == "interrupted"
    assert stored["complete"] is False and [p["sessions"] for p in stored["points"]] == [1]
    level = stored["points"][0]["run_id"]
    assert statuses.pop(level) == "finished"
    assert list(statuses.values()) == ["interrupted"]  # the second level, cut short


def test_an_unreachable_adapter_fails_the_search_in_one_line(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    benchmark = write_load_benchmark(tmp_path / "bench")
    done = run_capacity(
        "--adapter-url", "ws://127.0.0.1:9/ws", "--slo", "ttft_p95=1", "--store", store_url,
        "--benchmark", str(benchmark), "--cache-dir", str(tmp_path / "cache"),
        env=child_env(tmp_path / "cache"),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("error: adapter endpoint ws://127.0.0.1:9/ws is not reachable")
    assert done.stderr.count("\n") == 1
    with Store(store_url) as store:
        [search] = [run for run in store.list_runs() if run.config.get("kind")]
        stored = store.analyses(search.run_id)["capacity"]
    assert search.status == "failed"
    assert (stored["points"], stored["capacity"], stored["complete"]) == ([], None, False)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("slo", "message"),
    [
        ("ttft_p95", "error: --slo term 'ttft_p95' is not TERM=VALUE"),
        ("ttft_p96=1", "error: unknown --slo term 'ttft_p96'; known: ttft_p50, ttft_p95,"),
        ("ttft_p95=fast", "error: --slo ttft_p95: 'fast' is not a number"),
        ("lag_p99=-1", "error: --slo lag_p99: -1 is not a finite number of seconds, at least 0"),
        ("drop_rate=2", "error: --slo drop_rate: 2 is not between 0 and 1"),
        ("ttft_p95=nan", "error: --slo ttft_p95: nan is not a finite number"),
        ("ttft_p95=1,ttft_p95=2", "error: --slo names ttft_p95 twice"),
        (",", "error: --slo names no term"),
    ],
)
def test_slo_errors_are_one_line(tmp_path: Path, slo: str, message: str) -> None:
    args = ["capacity", "--adapter-url", "ws://127.0.0.1:9/ws", "--slo", slo]
    done = CliRunner().invoke(app, [*args, "--store", str(tmp_path / "s.db")])
    assert done.exit_code == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(message), done.stderr
    assert not (tmp_path / "s.db").exists()  # nothing was stored


def test_slo_parsing() -> None:
    terms = parse_slo("ttft_p95=1.0, lag_p99=0.5,qa_accuracy=0.8")
    assert [(t.term, t.metric, t.bound, t.limit) for t in terms] == [
        ("ttft_p95", "ttft_p95_s", "max", 1.0),
        ("lag_p99", "lag_p99_s", "max", 0.5),
        ("qa_accuracy", "qa_accuracy", "min", 0.8),
        ("failed_rate", "failed_rate", "max", 0.0),  # sessions must not fail unless said
    ]
    assert [t.limit for t in parse_slo("failed_rate=0.1")] == [0.1]
    with pytest.raises(CapacityError):
        parse_slo("")


# --------------------------------------------------------------------------- the method


def levels_run(knee: int, start: int, most: int) -> list[int]:
    """The levels the search runs against an endpoint that holds exactly `knee`."""
    passed: dict[int, bool] = {}
    while (level := next_level(passed, start, most)) is not None:
        passed[level] = level <= knee
    assert answer(passed)[0] == min(knee, most)
    return list(passed)


def test_the_search_doubles_then_bisects() -> None:
    assert levels_run(4, 2, 16) == [2, 4, 8, 6, 5]
    assert levels_run(37, 1, 256) == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert levels_run(300, 1, 256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]  # --max holds
    assert levels_run(100, 1, 100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert levels_run(0, 4, 16) == [4, 2, 1]  # below --start: down to 1
    assert levels_run(2, 4, 16) == [4, 2, 3]
    assert answer({1: False}) == (0, 1)
    assert answer({}) == (None, None)


def test_prometheus_text_is_summed_over_label_sets() -> None:
    text = (
        "# HELP vllm:num_requests_running Number of requests.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m",engine="0"} 3.0\n'
        'vllm:num_requests_running{model_name="m",engine="1"} 2.0\n'
        'vllm:request_success_total{finished_reason="stop",model_name="m"} 7\n'
        'vllm:request_success_total{finished_reason="length",model_name="m"} 1 1700000000\n'
        'vllm:weird{label="a } b"} 1.5\n'
        "process_cpu_seconds_total 12.5\n"
        "broken_line\n"
        "not_a_number{} x\n"
    )
    assert parse_prometheus(text) == {
        "vllm:num_requests_running": 5.0,
        "vllm:request_success_total": 8.0,
        "vllm:weird": 1.5,
        "process_cpu_seconds_total": 12.5,
    }
