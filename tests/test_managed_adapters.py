"""Managed adapters (issue 34, item 1): `streameval run --adapter NAME` and `streameval worker
--adapter NAME` start the adapter's replicas themselves, restart one that dies and leave no
process behind, whether the run finishes, is interrupted with Ctrl-C or the Core is killed.

Real processes throughout: the Core as `python -m streameval.cli` started from an empty
folder, its replicas as `python -m streameval.adapters`. Every process of a test carries a
mark in its environment (inherited by whatever the Core starts, however deep), so /proc
tells which of them are still alive.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streameval.adapters.sdk import Session
from streameval.core.launch import managed_adapters
from streameval.core.launch.managed_adapters import (
    AdapterSpec,
    ManagedAdapterError,
    ManagedAdapters,
)
from streameval.core.store.store import Store
from tests.faults import cli, wait_for, without_progress
from tests.wire_adapters import InstantAdapter

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc; the replicas die with the Core"
)

REPO = Path(__file__).resolve().parent.parent
MARK = "STREAMEVAL_TEST_MANAGED_MARK"
SLOW = "tests.wire_adapters:SlowReferenceAdapter"
ENV_REPORTING = "tests.test_managed_adapters:EnvReportingAdapter"
STARTED = re.compile(r"adapter replica (\d+) started: pid (\d+) listening on port (\d+)")


class EnvReportingAdapter(InstantAdapter):
    """Says in its log which GPUs it was given."""

    name = "env-reporting"

    def __init__(self) -> None:
        super().__init__()
        print(f"adapter sees CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")


class DyingAdapter(InstantAdapter):
    """Listens, then dies at once: a replica that crashes every time it starts."""

    name = "dying"

    async def start(self) -> None:
        os._exit(3)

    async def on_session_start(self, session: Session) -> None:  # never reached
        raise AssertionError


class Core:
    """The environment of a Core started from an empty folder, marked so that every process
    it starts can be found."""

    def __init__(self, folder: Path, *, test_adapters: bool = False) -> None:
        self.folder = folder
        self.mark = uuid.uuid4().hex
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("STREAMEVAL_STORE", "PYTHONPATH")
        }
        self.env |= {MARK: self.mark, "STREAMEVAL_CACHE_DIR": str(folder / "cache")}
        if test_adapters:  # the adapters of tests/, imported by the replicas
            self.env["PYTHONPATH"] = str(REPO)
        self.store = f"sqlite:///{folder / 'runs.db'}"
        with Store(self.store):  # created here: a test reads it while the Core writes
            pass

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli(*args),
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            cli(*args),
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def alive(self) -> list[int]:
        """The marked processes still alive (zombies are dead)."""
        needle = f"{MARK}={self.mark}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in environ and state != "Z":
                found.append(int(entry.name))
        return found

    def log_files(self) -> list[Path]:
        return sorted((self.folder / "cache" / "adapter-logs").glob("*/*.log"))


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return without_progress(stderr)


def started(log: Path) -> list[tuple[int, int]]:
    """(pid, port) of each start the Core noted in a replica's log."""
    return [(int(pid), int(port)) for _, pid, port in STARTED.findall(log.read_text())]


def one_session_running(store_url: str, core: subprocess.Popen[str]) -> bool:
    assert core.poll() is None, core.communicate()
    with Store(store_url) as store:
        runs = store.list_runs()
        return bool(runs) and any(s.status == "running" for s in store.sessions(runs[0].run_id))


def only_run(store_url: str) -> str:
    with Store(store_url) as store:
        [run] = store.list_runs()
        return run.run_id


def test_run_starts_the_reference_adapter_itself_and_leaves_no_process(tmp_path: Path):
    core = Core(tmp_path)
    done = core.run("run", "--adapter", "reference", "--limit", "4", "--json")

    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["sessions"], summary["finished"], summary["failed"]) == (4, 4, 0)
    assert summary["adapter_restarts"] == [0]
    [log] = [Path(path) for path in summary["adapter_logs"]]
    assert log.parent.parent == tmp_path / "cache" / "adapter-logs"
    assert log.name == "reference-0.log"
    [(pid, port)] = started(log)
    assert f"streameval-adapter listening on ws://127.0.0.1:{port}/ws" in log.read_text()
    with Store(summary["store"]) as store:
        endpoints = {s.endpoint for s in store.sessions(summary["run_id"])}
    assert endpoints == {f"ws://127.0.0.1:{port}/ws"}
    assert core.alive() == []
    assert not Path(f"/proc/{pid}").exists()


def test_ctrl_c_stops_the_run_and_its_replicas_and_a_resume_with_adapter_finishes(
    tmp_path: Path,
):
    core = Core(tmp_path)
    process = core.start(
        "run", "--adapter", "reference", "--replicas", "2", "--pacing", "wall_clock",
        "--speed", "2", "--limit", "4", "--store", core.store,
    )  # fmt: skip
    wait_for(lambda: one_session_running(core.store, process), what="a session running")
    replicas = [pid for pid in core.alive() if pid != process.pid]
    assert len(replicas) == 2
    assert {parent_of(pid) for pid in replicas} == {process.pid}
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    run_id = only_run(core.store)

    assert process.returncode == 130, err
    assert error_lines(err)[-1] == (
        f"interrupted: resume it with `streameval run --resume {run_id}`"
    )
    assert core.alive() == []

    resumed = core.run(
        "run", "--resume", run_id, "--store", core.store, "--adapter", "reference", "--json"
    )
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert (summary["run_id"], summary["status"]) == (run_id, "finished")
    assert summary["finished"] + summary["kept"] == 4
    assert core.alive() == []


def test_a_sigkilled_core_takes_its_replicas_with_it(tmp_path: Path):
    core = Core(tmp_path)
    process = core.start(
        "run", "--adapter", "reference", "--replicas", "2", "--pacing", "wall_clock",
        "--limit", "4", "--store", core.store,
    )  # fmt: skip
    wait_for(lambda: one_session_running(core.store, process), what="a session running")
    assert len(core.alive()) == 3  # the Core and its two replicas
    process.kill()
    process.communicate(timeout=30)
    wait_for(lambda: core.alive() == [], timeout_s=10, what="the replicas to die")


def test_a_killed_replica_is_restarted_on_its_port_and_the_run_finishes(tmp_path: Path):
    core = Core(tmp_path, test_adapters=True)
    process = core.start(
        "run", "--adapter", SLOW, "--limit", "6", "--concurrency", "2",
        "--store", core.store, "--json",
    )  # fmt: skip
    wait_for(lambda: one_session_running(core.store, process), what="a session running")
    [log] = core.log_files()
    [(pid, port)] = started(log)
    os.kill(pid, signal.SIGKILL)
    out, err = process.communicate(timeout=240)

    summary = json.loads(out)
    assert summary["adapter_restarts"] == [1]
    text = log.read_text()
    died = f"adapter replica 0 (port {port}) was killed by SIGKILL; restart 1 of 5 in 1s"
    assert died in text
    assert f"{died}, on the same port (log: {log})" in err
    assert re.search(rf"adapter replica 0 restarted: pid \d+ listening on port {port}\n", text)
    with Store(core.store) as store:
        sessions = store.sessions(summary["run_id"])
        status = store.get_run(summary["run_id"]).status
    failed = [s for s in sessions if s.status == "failed"]
    # The health rules: what the dead replica was streaming failed as an infrastructure
    # failure (retriable with --retry-failed); the rest ran on the restarted replica.
    assert all(s.failure_cause == "infrastructure" for s in failed), failed
    assert len(failed) <= 2
    assert {s.status for s in sessions} <= {"finished", "failed"}
    assert summary["finished"] == 6 - len(failed)
    assert status == "finished"
    assert process.returncode == (1 if failed else 0), err
    assert core.alive() == []


def test_a_worker_starts_its_replicas_and_spreads_the_sessions_over_them(tmp_path: Path):
    core = Core(tmp_path)
    created = core.run("run", "--detach", "--limit", "4", "--store", core.store, "--json")
    run_id = json.loads(created.stdout)["run_id"]
    done = core.run(
        "worker", "--store", core.store, "--run", run_id, "--adapter", "reference",
        "--replicas", "2", "--concurrency", "2", "--json",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["claimed"], summary["finished"], summary["failed"]) == (4, 4, 0)
    logs = [Path(path) for path in summary["adapter_logs"]]
    assert [log.name for log in logs] == ["reference-0.log", "reference-1.log"]
    ports = {f"ws://127.0.0.1:{started(log)[0][1]}/ws" for log in logs}
    with Store(core.store) as store:
        used = {s.endpoint for s in store.sessions(run_id)}
    assert used <= ports and len(ports) == 2
    assert core.alive() == []


def test_gpus_give_each_replica_its_own_device(tmp_path: Path):
    core = Core(tmp_path, test_adapters=True)
    done = core.run("run", "--adapter", ENV_REPORTING, "--gpus", "3,5", "--limit", "2", "--json")

    assert done.returncode == 0, done.stderr
    logs = [Path(path) for path in json.loads(done.stdout)["adapter_logs"]]
    assert [log.name for log in logs] == [
        "tests.test_managed_adapters-EnvReportingAdapter-0.log",
        "tests.test_managed_adapters-EnvReportingAdapter-1.log",
    ]
    for log, gpu in zip(logs, ("3", "5"), strict=True):
        text = log.read_text()
        assert f"adapter sees CUDA_VISIBLE_DEVICES={gpu}\n" in text
        assert f": CUDA_VISIBLE_DEVICES={gpu} " in text  # the Core's note of the launch
    assert core.alive() == []


def test_a_vllm_replica_runs_the_adapter_with_its_preset_on_its_gpu(tmp_path: Path):
    spec = AdapterSpec("vllm", ("max_model_len=8192", "gpu_memory_utilization=0.8"), "qwen2-vl-7b")
    managed = ManagedAdapters(spec, gpus=["0", "2"], log_dir=tmp_path)
    base = [sys.executable, "-P", "-m", "streameval.adapters", "vllm", "--host", "127.0.0.1"]
    options = ["--config", "qwen2-vl-7b", "-A", "max_model_len=8192"]
    options += ["-A", "gpu_memory_utilization=0.8"]

    launches = managed.launches()
    assert [launch.command for launch in launches] == [[*base, "--port", "0", *options]] * 2
    assert [dict(launch.env) for launch in launches] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "2"},
    ]
    assert managed.log_files == [tmp_path / "vllm-0.log", tmp_path / "vllm-1.log"]
    assert spec.launch(41234).command == [*base, "--port", "41234", *options]  # a restart


def test_a_bad_adapter_is_one_line_and_exit_2(tmp_path: Path):
    core = Core(tmp_path)
    unknown = core.run("run", "--adapter", "nope", "--limit", "4")
    assert unknown.returncode == 2
    [line] = error_lines(unknown.stderr)
    assert line.startswith("error: unknown adapter 'nope'; known: always, openai, ")

    takes_none = core.run("run", "--adapter", "reference", "-A", "x=1", "--limit", "4")
    assert takes_none.returncode == 2
    [log] = core.log_files()
    assert error_lines(takes_none.stderr)[-1] == (
        f"error: adapter 'reference' takes no options (log: {log})"
    )
    assert core.alive() == []

    both = core.run("run", "--adapter", "reference", "--adapter-url", "ws://127.0.0.1:1/ws")
    assert both.returncode == 2
    assert error_lines(both.stderr) == [
        "error: give --adapter (the Core starts it) or --adapter-url (one you run), not both"
    ]
    alone = core.run("worker", "--replicas", "2")
    assert alone.returncode == 2
    assert error_lines(alone.stderr) == [
        "error: --replicas goes with --adapter NAME (the adapter it starts)"
    ]


def test_a_replica_that_keeps_dying_is_left_down_after_its_restarts(tmp_path, monkeypatch):
    monkeypatch.setattr(managed_adapters, "RESTART_FIRST_S", 0.01)
    monkeypatch.setattr(managed_adapters, "MAX_RESTARTS", 2)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    notices: list[str] = []
    spec = AdapterSpec("tests.test_managed_adapters:DyingAdapter")
    with ManagedAdapters(spec, log_dir=tmp_path, notice=notices.append) as managed:
        [log] = managed.log_files
        wait_for(lambda: "not restarted again" in log.read_text(), what="the last restart")
        assert managed.restarts == [2]
    [(_, port)] = started(log)
    restarted = re.findall(rf"restarted: pid \d+ listening on port {port}\n", log.read_text())
    assert len(restarted) == 2  # on the port it had
    died = f"adapter replica 0 (port {port}) exited with status 3"
    assert [re.sub(r"pid \d+", "pid N", line) for line in notices] == [
        f"{died}; restart 1 of 2 in 0.01s, on the same port (log: {log})",
        f"adapter replica 0 restarted: pid N listening on port {port} (log: {log})",
        f"{died}; restart 2 of 2 in 0.02s, on the same port (log: {log})",
        f"adapter replica 0 restarted: pid N listening on port {port} (log: {log})",
        f"{died}; not restarted again after 2 restarts (log: {log})",
    ]


def test_a_replica_that_cannot_start_is_one_line(tmp_path: Path):
    spec = AdapterSpec("vllm", ("model=m",))
    with pytest.raises(ManagedAdapterError) as failed, ManagedAdapters(spec, log_dir=tmp_path):
        pass
    assert str(failed.value) == (
        "adapter 'vllm' needs the module 'vllm', which is not installed "
        f"(pip install 'streameval[vllm]') (log: {tmp_path / 'vllm-0.log'})"
    )
