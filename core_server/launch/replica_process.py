"""One managed adapter replica as an operating-system process: started with its output in a
log file, found listening by the ready line it writes there, and stopped with whatever it
started itself.

No process may outlive the Core, even one killed with SIGKILL, which runs no cleanup: on
Linux each replica asks the kernel, between fork and exec, to SIGKILL it when the thread
that started it ends (`prctl(PR_SET_PDEATHSIG)`), so one long-lived thread starts them all
(managed_adapters.py). Each replica also leads a process group of its own: Ctrl-C in the
terminal reaches the Core alone, which stops the run before its adapters, and a stop
signals the whole group, so what an adapter forked itself (vLLM's engine processes) goes
with it. Elsewhere than Linux only the group remains (a stopped Core still stops them).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from streameval.adapters.__main__ import READY_PREFIX
from streameval.core.errors import CoreError
from streameval.core.run.exit_codes import EXIT_CANNOT_START
from streameval.listening import listened_url

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WAIT_POLL_S = 0.05  # how often a starting replica's log is read for its ready line
STOP_GRACE_S = 10.0  # SIGTERM, then this long before SIGKILL
# Lines of a replica's own output a failure to start quotes, at most.
TAIL_LINES = 3
# The prefix of the lines the Core writes into a replica's log (restarts, stops).
NOTE_PREFIX = "streameval-core:"


class ReplicaStartError(CoreError):
    """A replica exited or stayed silent before it listened; one line, with its log."""


@dataclass(frozen=True)
class ReplicaLaunch:
    """What starting one replica runs: its command line and the environment variables it
    sets over the Core's own."""

    command: list[str]
    env: Mapping[str, str]


@dataclass
class ReplicaProcess:
    """One replica: its launch, its log file and, once started, its process and port."""

    index: int
    launch: Callable[[int], ReplicaLaunch]  # the port to listen on (0: the OS chooses)
    log_file: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    _log_offset: int = field(default=0, repr=False)

    def spawn(self) -> None:
        """Start the process on `port` (0 the first time), its output appended to the log."""
        launch = self.launch(self.port)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **launch.env}
        placed = "".join(f"{key}={value} " for key, value in launch.env.items())
        self.note(f"starting adapter replica {self.index}: {placed}{shlex.join(launch.command)}")
        with open(self.log_file, "ab") as log:
            self._log_offset = log.tell()
            self.process = subprocess.Popen(
                launch.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        self.started_at = time.monotonic()

    def exit_status(self) -> int | None:
        """None while the process runs; once it ended, its exit status, after killing what
        it left in its group (while it is not yet reaped its group id cannot be reused)."""
        assert self.process is not None
        if self.process.returncode is not None:
            return self.process.returncode
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        if os.waitid(os.P_PID, self.process.pid, flags) is None:
            return None
        self.signal_group(signal.SIGKILL)
        return self.process.wait()

    def signal_group(self, signum: int) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)  # it leads its group: group id == pid

    def listening_port(self) -> int | None:
        """The port of the ready line this start wrote, None while there is none; raises
        ReplicaStartError when the process exited before writing it."""
        assert self.process is not None
        exited = self.exit_status()  # read before the log: a line written before exit counts
        for line in self._new_lines():
            if line.startswith(READY_PREFIX):
                return urlsplit(listened_url(line)).port
        if exited is not None:
            raise ReplicaStartError(self._start_failure(exited))
        return None

    def _new_lines(self) -> list[str]:
        with open(self.log_file, "rb") as log:
            log.seek(self._log_offset)
            text = log.read().decode("utf-8", "replace")
        return text.splitlines()

    def _start_failure(self, status: int) -> str:
        """One line: the `error: ...` line an adapter that cannot start writes (its exit
        status 2), else the exit status and the last lines it wrote."""
        lines = [line.strip() for line in self._new_lines() if line.strip()]
        errors = [line for line in lines if line.startswith("error: ")]
        if status == EXIT_CANNOT_START and errors:
            return f"{errors[-1].removeprefix('error: ')} (log: {self.log_file})"
        tail = " | ".join(lines[-TAIL_LINES:]) or "no output"
        return (
            f"adapter replica {self.index} {exit_text(status)} before it listened: {tail} "
            f"(log: {self.log_file})"
        )

    def note(self, text: str) -> None:
        """A line of the Core's in the replica's log, between the adapter's own."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with open(self.log_file, "a", encoding="utf-8") as log:
            log.write(f"{NOTE_PREFIX} {stamp} {text}\n")


def wait_listening(
    replicas: Sequence[ReplicaProcess], timeout_s: float, cancelled: Callable[[], bool]
) -> None:
    """Wait until every replica wrote its ready line and note its port; ReplicaStartError
    for the first that exits first or the first still silent after `timeout_s`. Returns
    early, with ports unset, once `cancelled()`."""
    deadline = time.monotonic() + timeout_s
    waiting = list(replicas)
    while waiting and not cancelled():
        for replica in list(waiting):
            port = replica.listening_port()
            if port is not None:
                replica.port = port
                waiting.remove(replica)
        if waiting and time.monotonic() >= deadline:
            first = waiting[0]
            raise ReplicaStartError(
                f"adapter replica {first.index} did not listen within {timeout_s:g}s "
                f"(log: {first.log_file})"
            )
        time.sleep(WAIT_POLL_S if waiting else 0)


def stop_all(replicas: Sequence[ReplicaProcess], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every replica's process group, SIGKILL those still there after `grace_s`
    (all replicas share the grace period: they stop side by side)."""
    running = [r for r in replicas if r.process is not None and r.exit_status() is None]
    for replica in running:
        replica.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while running and time.monotonic() < deadline:
        running = [r for r in running if r.exit_status() is None]
        time.sleep(WAIT_POLL_S if running else 0)
    for replica in running:
        replica.signal_group(signal.SIGKILL)  # the group's other members with it
        assert replica.process is not None
        replica.process.wait()


def die_with_parent() -> Callable[[], None] | None:
    """Run in the child between fork and exec (Linux): SIGKILL it when the thread that
    forked it ends, and exit at once if the Core died before that was armed."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def exit_text(status: int) -> str:
    """`exited with status 1`, `was killed by SIGKILL`."""
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"
