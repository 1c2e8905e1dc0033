"""`streameval eval SUITE.yaml` (issue 34, item 2): two adapters (the reference adapter and
tests/load_adapter.py with an option) on two benchmarks (the synthetic one and an OVO-Bench
file read by its importer, on generated videos), in real processes on a real SQLite store.

The suite runs to the end and prints one table per benchmark whose numbers are those of
`streameval score` of each run; killed (SIGKILL) in the middle of its second run it leaves
no adapter behind, and `eval --resume SUITE_ID` keeps the finished run untouched, resumes
the interrupted one, creates the missing ones and prints the table; a bad file is one line
and exit 2, before anything starts.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from streameval.core.benchmark.loader import load_benchmark
from streameval.core.store.store import Store
from streameval.scorer.report import format_value
from tests.faults import cli, wait_for
from tests.test_data_cli import stand_in_videos
from tests.test_import_trace import FIXTURES

REPO = Path(__file__).resolve().parent.parent

# Three QA entries of the OVO-Bench fixture, on videos of 46, 22 and 9 seconds.
OVO_IDS = (2111, 2112, 2162)
ADAPTERS = ["reference", "load"]
BENCHMARKS = ["synthetic", "ovo"]
RECORDS = 3  # per benchmark


def write_suite(root: Path, run: str = "pacing: logical") -> Path:
    """The suite file, its OVO-Bench benchmark beside it (relative paths)."""
    ovo = root / "data" / "ovo"
    ovo.mkdir(parents=True)
    entries = json.loads((FIXTURES / "ovo_bench" / "ovo_bench_new.json").read_text())
    source = ovo / "ovo_bench_new.json"
    source.write_text(json.dumps([entry for entry in entries if entry["id"] in OVO_IDS]))
    stand_in_videos(load_benchmark(str(source), root / "cache"), ovo)
    suite = root / "suite.yaml"
    suite.write_text(
        f"""\
name: two adapters, two benchmarks
adapters:
  - adapter: reference
  - label: load
    adapter: tests.load_adapter:LoadAdapter
    options: {{ttft_per_session_s: 0.01}}
benchmarks:
  - benchmark: synthetic
    task: [qa]
    limit: {RECORDS}
  - label: ovo
    benchmark: data/ovo/ovo_bench_new.json
    limit: {RECORDS}
protocol_profile: trace
run:
  {run}
"""
    )
    return suite


def run_eval(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli("eval", *args), capture_output=True, text=True, timeout=300)


def markdown_tables(out: str) -> dict[str, list[dict[str, str]]]:
    """Each benchmark's table as printed: its rows, by header."""
    tables: dict[str, list[dict[str, str]]] = {}
    label = None
    header: list[str] = []
    for line in out.splitlines():
        if line in BENCHMARKS:
            label, header = line, []
        elif line.startswith("| ") and label is not None:
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            if not header:
                header = cells
            elif not set(cells[0]) <= {"-", ":"}:
                tables.setdefault(label, []).append(dict(zip(header, cells, strict=True)))
    return tables


def scored(url: str, run_id: str) -> tuple[str, str]:
    """`streameval score RUN --json`'s records scored and QA accuracy, as a table shows them."""
    done = subprocess.run(
        cli("score", run_id, "--store", url, "--json"), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    scores = json.loads(done.stdout)
    accuracy = scores["overall"]["qa"]["accuracy"]["value"]
    return str(scores["records_scored"]), format_value(accuracy)


def assert_table(url: str, suite_id: str, out: str) -> None:
    """The printed tables: an adapter per row, n records each, `streameval score`'s
    accuracy of each run (to the digits shown)."""
    with Store(url) as store:
        runs = store.suite(suite_id).runs
    tables = markdown_tables(out)
    assert sorted(tables) == sorted(BENCHMARKS)
    for benchmark, rows in tables.items():
        assert [row["adapter (model)"] for row in rows] == ADAPTERS
        assert [row["n"] for row in rows] == [str(RECORDS)] * 2
        for adapter, row in zip(ADAPTERS, rows, strict=True):
            run_id = runs[(adapter, benchmark)]
            assert row["run"] == run_id
            shown = row["qa.accuracy (0-1) ↑"].strip("*")
            assert (row["n"], shown) == scored(url, run_id)


def test_a_suite_runs_every_adapter_on_every_benchmark_and_prints_its_tables(
    tmp_path: Path,
) -> None:
    suite = write_suite(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = run_eval(str(suite), "--store", url, "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr
    suite_id = re.search(r"suite (suite-[0-9a-f]+): 4 runs", done.stderr).group(1)
    assert_table(url, suite_id, done.stdout)
    with Store(url) as store:
        info = store.suite(suite_id)
        assert list(info.runs) == [(a, b) for a in ADAPTERS for b in BENCHMARKS]
        for run_id in info.runs.values():
            assert store.get_run(run_id).status == "finished"
            assert [s.status for s in store.sessions(run_id)] == ["finished"] * RECORDS
        ovo_config = store.get_run(info.runs[("load", "ovo")]).config
    # The file as resolved: defaults filled in, paths absolute, one per run's config.
    source = str(tmp_path / "data" / "ovo" / "ovo_bench_new.json")
    ovo = info.content["benchmarks"][1]
    assert ovo["benchmark"] == ovo_config["benchmark"] == source
    assert (ovo["protocol_profile"], ovo["scoring_profile"]) == ("trace", "trace-paper-v1")
    assert ovo["task"] == ["qa", "proactive"] and ovo["seed"] == 0
    assert [a["label"] for a in info.content["adapters"]] == ADAPTERS
    assert info.content["adapters"][1]["options"] == {"ttft_per_session_s": 0.01}
    assert info.content["run"]["response_timeout"] == 60.0
    # `streameval table SUITE_ID` tabulates the suite's runs, in the order they were made.
    table = subprocess.run(
        cli("table", suite_id, "--store", url, "--format", "json"), capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr
    rows = json.loads(table.stdout)["rows"]
    assert [row["run_id"] for row in rows] == list(info.runs.values())


def replica_pids(cache: Path) -> set[int]:
    """Every adapter replica started with this cache folder, from its replicas' logs."""
    logs = (cache / "adapter-logs").glob("*/*.log")
    return {int(pid) for log in logs for pid in re.findall(r"pid (\d+) listening", log.read_text())}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_suite_killed_mid_run_resumes_only_what_did_not_finish(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, run="pacing: wall_clock\n  speed: 2")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    cache = tmp_path / "cache"
    args = ["--store", url, "--cache-dir", str(cache)]
    core = subprocess.Popen(
        cli("eval", str(suite), *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    suite_id = re.match(r"suite (suite-[0-9a-f]+): ", core.stderr.readline()).group(1)
    with Store(url) as store:

        def second_run_streaming() -> bool:
            second = store.suite(suite_id).runs.get(("reference", "ovo"))
            return second is not None and "running" in {s.status for s in store.sessions(second)}

        try:
            wait_for(second_run_streaming, what="the suite's second run")
        finally:
            core.send_signal(signal.SIGKILL)
            core.communicate(timeout=60)
        runs = store.suite(suite_id).runs
        first, second = runs[("reference", "synthetic")], runs[("reference", "ovo")]
        assert sorted(runs) == [("reference", "ovo"), ("reference", "synthetic")]
        assert store.get_run(first).status == "finished"
        kept = (store.sessions(first), store.count_events(first))
        interrupted = {s.session_id for s in store.sessions(second) if s.status == "running"}
        assert interrupted
    # The replicas die with the Core that started them, however it died.
    started = replica_pids(cache)
    assert len(started) == 1
    wait_for(lambda: not any(alive(pid) for pid in started), 30, "the replicas to stop")

    suite.unlink()  # the store has the suite: no file needed
    done = run_eval("--resume", suite_id, *args)
    assert done.returncode == 0, done.stderr
    # Only what had not finished: the interrupted run, then the load adapter's two.
    ran = re.findall(rf"suite {suite_id}: (\w+) on (\w+): run (\w+) \((\w+)\)", done.stderr)
    assert [(a, b, action) for a, b, _, action in ran] == [
        ("reference", "ovo", "resumed"),
        ("load", "synthetic", "created"),
        ("load", "ovo", "created"),
    ]
    assert ran[0][2] == second
    assert_table(url, suite_id, done.stdout)
    with Store(url) as store:
        assert (store.sessions(first), store.count_events(first)) == kept
        sessions = store.sessions(second)
        assert [s.status for s in sessions] == ["finished"] * RECORDS
        assert {s.session_id for s in sessions if s.attempt == 1} == interrupted
        assert len(store.suite(suite_id).runs) == 4
    resumed = replica_pids(cache) - started
    assert len(resumed) == 2  # one replica for each adapter with work left
    assert not any(alive(pid) for pid in resumed)


BAD_FILES = {
    "unknown key": (
        "adapters:\n  - adapter: reference\n    optoins: {a: 1}\nbenchmarks:\n"
        "  - benchmark: synthetic\n",
        "adapters[0].optoins: unknown key (line 3)",
    ),
    "no adapter": (
        "benchmarks:\n  - benchmark: synthetic\n",
        "adapters: Field required",
    ),
    "unknown adapter": (
        "adapters:\n  - adapter: nosuch\nbenchmarks:\n  - benchmark: synthetic\n",
        "adapters[0].adapter: unknown adapter 'nosuch'; known: ",
    ),
    "unknown benchmark": (
        "adapters:\n  - adapter: reference\nbenchmarks:\n  - benchmark: synthetic\n"
        "  - benchmark: nowhere/ovo.json\n",
        "benchmarks[1].benchmark: 'nowhere/ovo.json' is neither 'synthetic' nor an existing "
        "path (relative to {root}) (line 5)",
    ),
    "bad run option": (
        "adapters:\n  - adapter: reference\nbenchmarks:\n  - benchmark: synthetic\n"
        "run:\n  speed: 0\n",
        "run.speed: Input should be greater than or equal to 0.01 (line 6)",
    ),
    "unknown metric": (
        "adapters:\n  - adapter: reference\nbenchmarks:\n  - benchmark: synthetic\n"
        "table:\n  metrics: [qa.nonsense]\n",
        "table.metrics: benchmark synthetic: profile trace-paper-v1 reports no metric "
        "'qa.nonsense'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_suite_file_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    text, problem = BAD_FILES[case]
    suite = tmp_path / "suite.yaml"
    suite.write_text(text)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = run_eval(str(suite), "--store", url, "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: suite file {suite}: {problem.format(root=tmp_path)}")
    with Store(url) as store:
        assert store.list_runs() == []


def test_resume_names_a_stored_suite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = run_eval("--resume", "suite-0", "--store", url)
    assert (done.returncode, done.stderr) == (
        2,
        f"error: unknown suite id 'suite-0' in store {url}\n",
    )
    both = run_eval(str(tmp_path / "suite.yaml"), "--resume", "suite-0", "--store", url)
    assert (both.returncode, both.stderr) == (
        2,
        "error: give a suite file or --resume SUITE_ID (one of them)\n",
    )


def test_the_example_suite_file_runs_as_its_comment_says(tmp_path: Path) -> None:
    """examples/suite.yaml on the benchmark files `streameval data sample` generates beside
    it: four benchmarks, each under its own profiles, two adapters."""
    example = tmp_path / "suite.yaml"
    example.write_text((REPO / "examples" / "suite.yaml").read_text())
    sample = subprocess.run(cli("data", "sample", str(tmp_path / "sample")), capture_output=True)
    assert sample.returncode == 0, sample.stderr
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = run_eval(str(example), "--store", url, "--cache-dir", str(tmp_path / "cache"), "--json")
    assert done.returncode == 0, done.stderr
    tables = json.loads(done.stdout)["tables"]
    shown = [
        (t["benchmark"], t["table"]["profile"], [row["label"] for row in t["table"]["rows"]])
        for t in tables
    ]
    assert shown == [
        ("synthetic", "trace-paper-v1", ["reference", "random"]),
        ("trace", "trace-paper-v1", ["reference", "random"]),
        ("ovo", "ovo-offline", ["reference", "random"]),
        ("streamingbench", "streamingbench", ["reference", "random"]),
    ]
    assert [t["table"]["n"] for t in tables] == [8, 5, 6, 3]
