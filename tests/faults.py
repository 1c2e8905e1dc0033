"""Helpers of the fault-injection tests: the Core as a process, waiting on conditions,
dropping root's permission override, and stopping and starting the PostgreSQL test server
(`pg_database` and `admin_sql` in conftest.py give a database that survives a restart)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import make_url

from streameval.progress import Phase

# How the lines of a run's progress begin on a stderr that is no terminal.
PROGRESS_LINES = tuple(f"{phase.value}: " for phase in Phase)


def cli(*args: str) -> list[str]:
    """`streameval ARGS` as a command line for a subprocess."""
    return [sys.executable, "-m", "streameval.cli", *args]


def without_progress(stderr: str) -> list[str]:
    """The non-blank lines of a command's stderr but its progress: without a terminal a run
    says as each phase starts and ends (core_server/cli/progress_display.py), before any error."""
    return [
        line for line in stderr.splitlines() if line.strip() and not line.startswith(PROGRESS_LINES)
    ]


def wait_for(
    predicate: Callable[[], bool], timeout_s: float = 90.0, what: str = "the condition"
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def unprivileged(command: list[str]) -> list[str]:
    """`command` bound by permission bits even when the tests run as root."""
    if os.geteuid() != 0:
        return command
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *command]


def pg_ctl(data: str, *args: str) -> None:
    """pg_ctl as the server's owner (the data folder's), as .ci/start-postgres.sh runs it."""
    bindir = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    command = shlex.join([str(bindir[-1] / "pg_ctl"), "-D", data, *args])
    owner = Path(data).owner()
    if os.geteuid() == 0 and owner != "root":
        subprocess.run(["su", owner, "-s", "/bin/bash", "-c", command], check=True)
    else:
        subprocess.run(["bash", "-c", command], check=True)


def restart_postgres(data: str, server_url: str, down_s: float = 1.0) -> None:
    """Stop the server (fast: every connection is ended), leave it down for `down_s` so the
    Core meets a server that is gone, not only reset connections, then start it again."""
    stop_postgres(data)
    time.sleep(down_s)
    start_postgres(data, server_url)


def stop_postgres(data: str) -> None:
    """Stop the server fast: every connection is ended, new ones are refused."""
    pg_ctl(data, "-m", "fast", "-w", "stop")


def start_postgres(data: str, server_url: str) -> None:
    """Start the server stopped by stop_postgres again, as .ci/start-postgres.sh did."""
    port = make_url(server_url).port
    options = f"-h 127.0.0.1 -p {port} -k '{data}' -c fsync=off"
    pg_ctl(data, "-l", f"{data}/server.log", "-w", "-t", "60", "-o", options, "start")
