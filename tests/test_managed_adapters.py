"""Managed adapters (issue 34, item 1): `streameval run --adapter NAME` and `streameval worker
--adapter NAME` start the adapter's replicas themselves, restart one that dies and leave no
process behind, whether the run finishes, is interrupted with Ctrl-C or the Core is killed.

Real processes throughout: the Core as `python -m streameval.cli` started from an empty
folder (tests/managed_core.py, which finds every process it left alive), its replicas as
`python -m streameval.adapters`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
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
from tests.faults import wait_for
from tests.managed_core import (
    MARK,
    REPO,
    Core,
    error_lines,
    one_session_running,
    only_run,
    parent_of,
    started,
)
from tests.test_adapter_guide import FENCE, GUIDE, fresh_folder, guide_files, user_env
from tests.wire_adapters import InstantAdapter

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc; the replicas die with the Core"
)

SLOW = "tests.wire_adapters:SlowReferenceAdapter"
LOADING = "tests.test_managed_adapters:LoadingAdapter"
NEVER_LISTENING = "tests.test_managed_adapters:NeverListeningAdapter"
ENV_REPORTING = "tests.test_managed_adapters:EnvReportingAdapter"
STARTED = re.compile(r"adapter replica (\d+) started: pid (\d+) listening on port (\d+)")


class EnvReportingAdapter(InstantAdapter):
    """Says in its log which GPUs it was given."""

    name = "env-reporting"

    def __init__(self) -> None:
        super().__init__()
        print(f"adapter sees CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")


class LoadingAdapter(InstantAdapter):
    """Loads its model once it listens, until the file $STREAMEVAL_TEST_GATE exists."""

    name = "loading"

    async def start(self) -> None:
        while not os.path.exists(os.environ["STREAMEVAL_TEST_GATE"]):
            await asyncio.sleep(0.02)


class NeverListeningAdapter(InstantAdapter):
    """Takes forever to be built, before it listens (a huge import, say)."""

    name = "never-listening"

    def __init__(self) -> None:
        super().__init__()
        print("building forever", flush=True)
        time.sleep(3600)


class DyingAdapter(InstantAdapter):
    """Listens, then dies at once: a replica that crashes every time it starts."""

    name = "dying"

    async def start(self) -> None:
        os._exit(3)

    async def on_session_start(self, session: Session) -> None:  # never reached
        raise AssertionError


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


def test_sigterm_mid_run_exits_143_and_stops_the_replicas(tmp_path: Path):
    core = Core(tmp_path)
    process = core.start(
        "run", "--adapter", "reference", "--pacing", "wall_clock", "--limit", "4",
        "--store", core.store,
    )  # fmt: skip
    wait_for(lambda: one_session_running(core.store, process), what="a session running")
    assert len(core.alive()) == 2  # the Core and its replica
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)

    assert process.returncode == 143, err
    run_id = only_run(core.store)
    assert error_lines(err)[-1] == (
        f"terminated (SIGTERM): resume it with `streameval run --resume {run_id}`"
    )
    assert core.alive() == []


@pytest.mark.parametrize(
    ("signum", "status", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
)
def test_a_signal_while_a_replica_starts_stops_it(
    tmp_path: Path, signum: int, status: int, said: str
):
    core = Core(tmp_path, test_adapters=True)
    process = core.start("run", "--adapter", NEVER_LISTENING, "--limit", "1", "--store", core.store)

    def building() -> bool:
        assert process.poll() is None, process.communicate()
        logs = core.log_files()
        return bool(logs) and "building forever" in logs[0].read_text()

    wait_for(building, what="the replica to be building")
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)

    assert process.returncode == status, err
    assert error_lines(err)[-1] == said
    assert core.alive() == []


def test_the_run_shows_its_replica_loading_until_it_is_ready(tmp_path: Path):
    core = Core(tmp_path, test_adapters=True)
    gate = tmp_path / "loaded"
    core.env["STREAMEVAL_TEST_GATE"] = str(gate)
    process = core.start("run", "--adapter", LOADING, "--limit", "1", "--json")
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # the run waits for the model: then it may load
        seen.append(line)
        if line.startswith("waiting for adapter at "):
            gate.touch()
            break
    out, err = process.communicate(timeout=120)

    assert process.returncode == 0, err
    [log] = [Path(path) for path in json.loads(out)["adapter_logs"]]
    [(_, port)] = started(log)
    url = f"ws://127.0.0.1:{port}/ws"
    assert seen[-1] == f"waiting for adapter at {url}: loading (0s of 600s)\n"
    assert f"adapter at {url} is ready (waited " in err
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


def test_the_guide_one_command_run_starts_a_module_of_the_current_folder(tmp_path: Path):
    [command] = [
        body.strip()
        for language, body in FENCE.findall(GUIDE.read_text())
        if language == "bash" and body.startswith("streameval run --adapter my_adapter:")
    ]
    folder = fresh_folder(tmp_path, guide_files())
    mark = uuid.uuid4().hex
    env = user_env(tmp_path) | {MARK: mark}
    ran = subprocess.run(
        shlex.split(command), cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )

    assert ran.returncode == 0, ran.stderr
    assert re.search(r"run \w+: 4 finished, 0 failed", ran.stderr), ran.stderr
    [log] = (tmp_path / "cache" / "adapter-logs").glob("*/my_adapter-LastFrameAdapter-0.log")
    assert f"adapter logs:\n  {log}" in ran.stderr
    assert Core.marked(mark) == []


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
    assert len(ports) == 2 and used == ports  # the slots start round-robin
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

    unknown_option = core.run("run", "--adapter", "reference", "-A", "x=1", "--limit", "4")
    assert unknown_option.returncode == 2
    [log] = core.log_files()
    assert error_lines(unknown_option.stderr)[-1] == (
        f"error: reference config: unknown option 'x' (options: work_width, audio) (log: {log})"
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
