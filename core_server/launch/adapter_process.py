"""Start an adapter as its own process on a free loopback port (what `demo` and tests use)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from streameval.adapters.__main__ import READY_PREFIX
from streameval.child_process import module_command
from streameval.core.errors import CoreError
from streameval.listening import listened_url
from streameval.protocol import WS_PATH


def adapter_command(
    name: str, host: str, port: int, config: str | Path | None, options: Iterable[str]
) -> list[str]:
    """`python -m streameval.adapters NAME --host H --port P [--config C] [-A k=v ...]`."""
    command = module_command("streameval.adapters", name, "--host", host, "--port", str(port))
    if config is not None:
        command += ["--config", str(config)]
    for option in options:
        command += ["-A", option]
    return command


class AdapterProcessError(CoreError):
    """The adapter process did not come up; the message carries its last output."""


class AdapterProcess:
    """`python -m streameval.adapters NAME --port 0` as a child; the OS picks the port, the
    child tells it.

    `config` is a YAML file or preset name (`--config`); `options` become `-A key=value`
    overrides, non-text values written as JSON (which the child reads as YAML).
    """

    def __init__(
        self,
        name: str,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 60.0,
        config: str | Path | None = None,
        options: Mapping[str, Any] | None = None,
    ):
        self.name = name
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self.config = config
        self.options = dict(options or {})
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}{WS_PATH}"

    def command(self) -> list[str]:
        options = [
            f"{key}={value if isinstance(value, str) else json.dumps(value)}"
            for key, value in self.options.items()
        ]
        return adapter_command(self.name, self.host, 0, self.config, options)

    def start(self) -> AdapterProcess:
        self.process = subprocess.Popen(
            self.command(),
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
                    self.port = urlsplit(listened_url(line)).port
                    ready.set()
            ready.set()  # the child exited: stop waiting (self.port stays None)

        threading.Thread(target=read_until_ready, daemon=True).start()
        if not ready.wait(self.startup_timeout_s) or self.port is None:
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
