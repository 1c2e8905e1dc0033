"""Start an adapter as its own process on a free loopback port (what `demo` and tests use)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import deque
from types import TracebackType

from adapters.__main__ import READY_PREFIX
from adapters.protocol import WS_PATH


class AdapterProcessError(Exception):
    """The adapter process did not come up; the message carries its last output."""


class AdapterProcess:
    """`python -m adapters NAME --port 0` as a child; the OS picks the port, the child tells it."""

    def __init__(self, name: str, host: str = "127.0.0.1", startup_timeout_s: float = 60.0):
        self.name = name
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}{WS_PATH}"

    def start(self) -> AdapterProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "adapters", self.name, "--host", self.host, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: deque[str] = deque(maxlen=20)
        ready = threading.Event()

        def read_until_ready() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                lines.append(line.rstrip())
                # Keep draining after the ready line so a chatty child never blocks on a
                # full pipe.
                if not ready.is_set() and line.startswith(READY_PREFIX):
                    self.port = int(line.rsplit(":", 1)[1])
                    ready.set()

        threading.Thread(target=read_until_ready, daemon=True).start()
        if not ready.wait(self.startup_timeout_s):
            self.stop()
            tail = " | ".join(list(lines)[-3:]) or "no output"
            raise AdapterProcessError(f"adapter {self.name!r} did not start: {tail}")
        return self

    def kill(self) -> None:
        """Kill -9, as a crashing adapter would die (used by failure tests)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> AdapterProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
