"""Endpoints have health (issue 13, items 1 and 7).

A replica SIGKILLed mid-run leaves the rotation: its unstarted sessions run on the healthy
replica instead of failing one after another at `connect`; when every replica is gone the
run stops `interrupted` with its unstarted sessions still pending, and `--resume` finishes
them. An adapter whose `/info` trickles forever or never ends is refused within the named
limits (INFO_TIMEOUT_S, INFO_MAX_BYTES) instead of hanging the Core or filling its memory.

Real processes and sockets throughout: adapters served by `python -m streameval.adapters`,
the Core as `python -m streameval.cli run`, and a tiny asyncio HTTP server for `/info`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.endpoint_admission import INFO_MAX_BYTES, check_endpoint
from streameval.core.run.errors import RunError
from streameval.core.store.store import Store
from tests.faults import PROGRESS_LINES, cli, free_port, wait_for, without_progress
from tests.timeline_fixtures import write_benchmark

SLOW = "tests.wire_adapters:SlowReferenceAdapter"
INSTANT = "tests.wire_adapters:InstantAdapter"


def error_lines(stderr: str) -> list[str]:
    """The lines a user reads but the run's progress; no traceback ever."""
    assert "Traceback" not in stderr, stderr
    return without_progress(stderr)


def one_run(store: Store) -> str:
    runs = store.list_runs()
    return runs[0].run_id if runs else ""


def test_a_killed_replica_leaves_the_rotation_and_the_other_runs_its_sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess(SLOW) as healthy, AdapterProcess(SLOW) as doomed:
        core = subprocess.Popen(
            cli(
                "run", "--store", url, "--adapter-url", healthy.url, "--adapter-url",
                doomed.url, "--concurrency", "2", "--limit", "12", "--json",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with Store(url) as store:

            def doomed_finished_one() -> bool:
                run_id = one_run(store)
                return bool(run_id) and any(
                    s.status == "finished" and s.endpoint == doomed.url
                    for s in store.sessions(run_id)
                )

            wait_for(doomed_finished_one)
            doomed.kill()  # mid-run, as a node failure would
            out, err = core.communicate(timeout=240)
            run_id = one_run(store)
            sessions = store.sessions(run_id)
            run = store.get_run(run_id)

    summary = json.loads(out)
    failed = [s for s in sessions if s.status == "failed"]
    # Only sessions that were streaming on the killed replica failed (TRACE's rule for a
    # session whose tasks were delivered); none burnt at `connect`, the rest finished.
    assert all(s.failure_stage != "connect" for s in failed), failed
    assert all(s.endpoint == doomed.url and s.failure_cause == "infrastructure" for s in failed)
    assert len(failed) <= 2  # the killed replica's concurrency
    assert {s.status for s in sessions} <= {"finished", "failed"}
    assert sum(s.status == "finished" for s in sessions) == 12 - len(failed)
    # The sessions the dead replica could not take were rerun elsewhere as new attempts.
    assert all(s.endpoint == healthy.url for s in sessions if s.attempt > 0)
    assert summary["finished"] + summary["failed"] == 12
    assert core.returncode == (1 if failed else 0), err
    assert run.status == "finished"
    assert "out of rotation" in err


def test_when_every_replica_is_gone_the_run_stops_interrupted_and_resumes(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess(SLOW) as only:
        core = subprocess.Popen(
            cli(
                "run", "--store", url, "--adapter-url", only.url, "--concurrency", "1",
                "--limit", "10", "--unreachable-timeout", "2", "--json",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with Store(url) as store:

            def one_finished() -> bool:
                run_id = one_run(store)
                return bool(run_id) and any(s.status == "finished" for s in store.sessions(run_id))

            wait_for(one_finished)
            only.kill()
            started = time.monotonic()
            out, err = core.communicate(timeout=120)
            took = time.monotonic() - started
            run_id = one_run(store)
            stopped = {s.session_id: s for s in store.sessions(run_id)}
            status = store.get_run(run_id).status

    assert core.returncode == 4, err
    lines = error_lines(err)
    assert f"run {run_id} stopped: every adapter endpoint has been unreachable for 2s" in lines[-1]
    assert f"streameval run --resume {run_id}" in lines[-1]
    assert took < 60
    assert status == "interrupted"
    pending = [s for s in stopped.values() if s.status == "pending"]
    assert pending, "the unstarted sessions must stay pending, not fail"
    assert all(s.failure_stage != "connect" for s in stopped.values())

    with AdapterProcess(SLOW) as revived:  # back, on another port
        resumed = subprocess.run(
            cli("run", "--resume", run_id, "--store", url, "--adapter-url", revived.url, "--json"),
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    with Store(url) as store:
        after = {s.session_id: s for s in store.sessions(run_id)}
        assert store.get_run(run_id).status == "finished"
    assert resumed.returncode in (0, 1), resumed.stderr
    assert all(after[s.session_id].status == "finished" for s in pending)
    assert all(s.failure_stage != "connect" for s in after.values())


def left_out_line(err: str, url: str) -> str:
    """The one stderr line naming an endpoint left out of rotation at start, and why."""
    (line,) = [line for line in error_lines(err) if line.startswith(f"adapter at {url} ")]
    return line


def test_a_run_starts_without_an_unreachable_replica_and_runs_on_the_live_one(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    closed = f"ws://127.0.0.1:{free_port()}/ws"  # nothing listens there
    with AdapterProcess(INSTANT) as live:
        done = subprocess.run(
            cli(
                "run", "--store", url, "--adapter-url", live.url, "--adapter-url", closed,
                "--limit", "6", "--json",
            ),
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = left_out_line(done.stderr, closed)
    assert line.startswith(f"adapter at {closed} is out of rotation: adapter endpoint {closed} ")
    assert "is not reachable" in line
    summary = json.loads(done.stdout)
    assert (summary["finished"], summary["failed"]) == (6, 0)
    with Store(url) as store:
        run_id = one_run(store)
        sessions = store.sessions(run_id)
        run = store.get_run(run_id)
    assert run.status == "finished"
    assert [(s.status, s.endpoint) for s in sessions] == [("finished", live.url)] * 6
    # Only the endpoint that answered is recorded as an adapter the run used.
    assert [a["endpoint"] for a in run.conditions["adapters"]] == [live.url]


def test_a_resume_with_a_replica_down_proceeds_on_the_others(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    closed = f"ws://127.0.0.1:{free_port()}/ws"
    with AdapterProcess(INSTANT) as live:
        created = subprocess.run(
            cli("run", "--store", url, "--adapter-url", live.url, "--limit", "4", "--detach",
                "--json"),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        run_id = json.loads(created.stdout)["run_id"]
        resumed = subprocess.run(
            cli(
                "run", "--resume", run_id, "--store", url, "--adapter-url", closed,
                "--adapter-url", live.url, "--json",
            ),
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "is not reachable" in left_out_line(resumed.stderr, closed)
    with Store(url) as store:
        sessions = store.sessions(run_id)
        assert store.get_run(run_id).status == "finished"
    assert [(s.status, s.endpoint) for s in sessions] == [("finished", live.url)] * 4


def test_with_no_usable_replica_the_run_refuses_to_start_as_before(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    closed = [f"ws://127.0.0.1:{free_port()}/ws" for _ in range(2)]
    done = subprocess.run(
        cli("run", "--store", url, "--adapter-url", closed[0], "--adapter-url", closed[1]),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = error_lines(done.stderr)
    assert f"adapter endpoint {closed[0]} is not reachable" in line
    with Store(url) as store:
        assert store.list_runs() == []


# --------------------------------------------------------------------------- /info limits


class InfoServer:
    """A tiny HTTP server: `/healthz` says ok, `/info` is whatever `reply` makes of it."""

    def __init__(self, reply: Callable[[asyncio.StreamWriter], object]) -> None:
        self.reply = reply
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def listen() -> None:
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]
            self.ready.set()

        self.loop.create_task(listen())
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            path = request.split(b" ")[1]
            if path == b"/healthz":
                writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
            else:
                await self.reply(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def __enter__(self) -> InfoServer:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        async def shutdown() -> None:
            self.server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            self.loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop)
        self.thread.join(10)
        self.loop.close()


async def trickle(writer: asyncio.StreamWriter) -> None:
    """Headers at once, then one byte a tenth of a second: every read succeeds, the reply
    never ends."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
    while True:
        writer.write(b" ")
        await writer.drain()
        await asyncio.sleep(0.1)


async def one_gibibyte(writer: asyncio.StreamWriter) -> None:
    """A 1 GiB JSON string, chunked (no length declared up front)."""
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * (1 << 20)
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    writer.write(b'1\r\n"\r\n')
    for _ in range(1024):
        writer.write(framed)
        await writer.drain()
    writer.write(b'1\r\n"\r\n0\r\n\r\n')
    await writer.drain()


@contextmanager
def info_server(reply) -> Iterator[InfoServer]:
    with InfoServer(reply) as server:
        yield server


def test_a_trickling_info_is_refused_within_the_total_time_limit():
    with info_server(trickle) as server:
        config = RunConfig(benchmark="synthetic", endpoints=[EndpointConfig(url=server.url)])
        started = time.monotonic()
        with pytest.raises(RunError) as refused:
            asyncio.run(check_endpoint(config.endpoints[0], config, False, None, 1.5))
        took = time.monotonic() - started
    assert str(refused.value) == (
        f"adapter endpoint {server.url}: /info did not answer completely within 1.5s"
    )
    assert took < 5


def test_a_huge_info_is_refused_at_its_size_limit_without_taking_the_memory(tmp_path: Path):
    benchmark = write_benchmark(tmp_path / "bench")
    with info_server(one_gibibyte) as server:
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable, "-c",
                # VmHWM, not ru_maxrss: Linux carries the parent's peak (this whole
                # pytest process) into a child's ru_maxrss across fork and exec.
                "import re, sys\n"
                "from streameval.cli import main\n"
                "try:\n    main()\nfinally:\n"
                "    status = open('/proc/self/status').read()\n"
                "    kib = re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1)\n"
                "    print(f'maxrss_kib={kib}', file=sys.stderr)\n",
                "run", "--store", f"sqlite:///{tmp_path / 's.db'}", "--adapter-url", server.url,
                # A small ready-made benchmark: the synthetic one would be generated on a
                # cold cache, and its encoder's memory is not what this test measures.
                "--benchmark", str(benchmark), "--cache-dir", str(tmp_path / "cache"),
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        took = time.monotonic() - started
    lines = error_lines(done.stderr)
    assert done.returncode == 2, done.stderr
    assert lines[0] == (
        f"error: adapter endpoint {server.url}: /info is larger than its limit of "
        f"{INFO_MAX_BYTES} bytes (more)"
    )
    rss_mib = int(lines[-1].removeprefix("maxrss_kib=")) / 1024
    assert rss_mib < 600, f"the Core grew to {rss_mib:.0f} MiB"
    assert took < 60
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert store.list_runs() == []


def test_an_endpoint_left_out_at_start_joins_only_as_the_adapter_the_run_uses(tmp_path):
    """A replica unreachable at start is admitted later only after the checks it missed:
    an endpoint that comes up serving another adapter stays out of rotation."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    port = free_port()
    late = f"ws://127.0.0.1:{port}/ws"
    with AdapterProcess(SLOW) as live:
        core = subprocess.Popen(
            cli("run", "--store", url, "--adapter-url", live.url, "--adapter-url", late,
                "--limit", "12", "--json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # The endpoint comes up only once the run has started without it.
        first = core.stderr.readline()
        while first.startswith(PROGRESS_LINES):
            first = core.stderr.readline()
        assert first.startswith(f"adapter at {late} is out of rotation"), first
        impostor = subprocess.Popen(
            [sys.executable, "-m", "streameval.adapters", "always", "--port", str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            assert "listening" in impostor.stdout.readline()
            out, err = core.communicate(timeout=240)
        finally:
            impostor.terminate()
            impostor.wait(timeout=10)
            if core.poll() is None:
                core.kill()
    assert core.returncode == 0, err
    refused = [line for line in err.splitlines() if "answers but stays out of rotation" in line]
    assert refused, err
    assert refused[0].startswith(f"adapter at {late} answers but stays out of")
    assert "always" in refused[0]  # the identity it serves, named against the run's
    assert f"adapter at {late} is back in rotation" not in err
    with Store(url) as store:
        run = store.get_run(one_run(store))
        sessions = store.sessions(run.run_id)
    assert {(s.status, s.endpoint) for s in sessions} == {("finished", live.url)}
    assert [a["endpoint"] for a in run.conditions["adapters"]] == [live.url]
    assert json.loads(out)["finished"] == 12
