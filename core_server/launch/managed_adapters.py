"""Adapters the Core runs itself (`streameval run --adapter NAME`, `worker --adapter`):
replicas of one adapter started, watched, restarted and stopped, whose endpoints are the
run's.

Each replica is `python -m streameval.adapters NAME --port 0` on loopback, its output (its
stdout and stderr) in a log file of its own, on one GPU (`CUDA_VISIBLE_DEVICES` set to it)
or on the CPU. Entering `ManagedAdapters` returns once every replica listens; a model may
still be loading, which the run's readiness wait shows and waits for
(core_server/session/readiness.py). A supervisor thread restarts a replica that dies, on
the same port, so that its endpoint URL stays valid: the endpoint health rules
(core_server/run/endpoint_health.py) took it out of rotation and readmit it once it answers
again. A replica that keeps dying is restarted MAX_RESTARTS times in a row with a growing
delay, then left down (it counts afresh once it stayed up STABLE_S). Every start, death and
restart is written in the replica's log. Leaving the context stops every replica; how none
outlives even a killed Core: replica_process.py.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streameval.core.errors import CoreError
from streameval.core.launch.adapter_process import adapter_command
from streameval.core.launch.replica_process import (
    ReplicaLaunch,
    ReplicaProcess,
    ReplicaStartError,
    exit_text,
    stop_all,
    wait_listening,
)
from streameval.protocol import WS_PATH

if TYPE_CHECKING:
    from streameval.core.config import EndpointConfig

HOST = "127.0.0.1"
MAX_RESTARTS = 5  # restarts in a row before a replica is left down
RESTART_FIRST_S = 1.0  # the delay before the first restart, doubling up to RESTART_MAX_S
RESTART_MAX_S = 30.0
STABLE_S = 120.0  # a replica up this long before it died counts its restarts afresh
SUPERVISE_POLL_S = 0.2  # how often the supervisor looks for a replica that died


class ManagedAdapterError(CoreError):
    """Managed adapters that cannot start: a bad spec, replicas that did not listen."""


@dataclass(frozen=True)
class AdapterSpec:
    """One adapter as `streameval adapter serve` takes it."""

    name: str  # registry name (reference, transformers, vllm, openai, ...) or module:Class
    options: tuple[str, ...] = ()  # the `-A key=value` texts as typed
    config: str | None = None  # preset name or YAML file (--config)

    def launch(self, port: int, *, gpu: str | None = None) -> ReplicaLaunch:
        """What a replica of this adapter on `port` (and on `gpu`, if given) runs."""
        command = adapter_command(self.name, HOST, port, self.config, self.options)
        return ReplicaLaunch(command, {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {})

    @property
    def file_stem(self) -> str:
        """The name as a file name: `module:Class` -> `module-Class`."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", self.name).strip("-.") or "adapter"


@dataclass
class _Restarts:
    total: int = 0
    in_a_row: int = 0
    gave_up: bool = False


class ManagedAdapters:
    """Replicas of one adapter for the time of a `with` block (one per GPU of `gpus`, else
    `replicas` on the CPU); `notice` is told each restart in one line."""

    def __init__(
        self,
        spec: AdapterSpec,
        *,
        replicas: int = 1,
        gpus: Sequence[str] = (),
        concurrency: int = 4,
        log_dir: Path,
        startup_timeout_s: float = 120.0,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        if replicas < 1:
            raise ManagedAdapterError(f"--replicas must be at least 1, got {replicas}")
        if gpus and replicas not in (1, len(gpus)):
            raise ManagedAdapterError("give --replicas or --gpus (one replica per GPU), not both")
        self.spec = spec
        self.concurrency = concurrency
        self.log_dir = log_dir
        self.startup_timeout_s = startup_timeout_s
        self.notice = notice
        placements: list[str | None] = list(gpus) if gpus else [None] * replicas
        self._replicas = [
            ReplicaProcess(
                index,
                functools.partial(spec.launch, gpu=gpu),
                log_dir / f"{spec.file_stem}-{index}.log",
            )
            for index, gpu in enumerate(placements)
        ]
        self._restarts = [_Restarts() for _ in self._replicas]
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._supervisor: threading.Thread | None = None

    @property
    def endpoints(self) -> list[EndpointConfig]:
        from streameval.core.config import EndpointConfig

        return [
            EndpointConfig(url=f"ws://{HOST}:{r.port}{WS_PATH}", concurrency=self.concurrency)
            for r in self._replicas
        ]

    @property
    def log_files(self) -> list[Path]:
        return [r.log_file for r in self._replicas]

    @property
    def restarts(self) -> list[int]:
        """How often each replica was restarted so far."""
        return [r.total for r in self._restarts]

    def launches(self) -> list[ReplicaLaunch]:
        """What each replica's first start runs (its command line and environment)."""
        return [r.launch(0) for r in self._replicas]

    def __enter__(self) -> ManagedAdapters:
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ManagedAdapterError(
                f"adapter log folder {self.log_dir} cannot be created ({exc.strerror or exc})"
            ) from None
        # One thread starts, restarts and stops every replica: a replica dies with the
        # thread that started it (replica_process.py), which lives as long as this context.
        self._supervisor = threading.Thread(
            target=self._supervise, name="streameval-managed-adapters", daemon=True
        )
        self._supervisor.start()
        try:
            self._started.wait()
        except BaseException:  # Ctrl-C while the replicas start: stop them all the same
            self.__exit__()
            raise
        if self._start_error is not None:
            self.__exit__()
            raise self._start_error
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
            self._supervisor = None

    def _supervise(self) -> None:
        try:
            try:
                self._start_all()
            except (ReplicaStartError, OSError) as exc:
                self._start_error = _start_error(self.spec, exc)
                return
            except BaseException as exc:  # a bug: raised again in the caller's thread
                self._start_error = exc
                return
            finally:
                self._started.set()
            while not self._stopping.wait(SUPERVISE_POLL_S):
                for replica, restarts in zip(self._replicas, self._restarts, strict=True):
                    status = replica.exit_status()
                    if status is not None and not restarts.gave_up:
                        self._restart(replica, restarts, status)
        finally:
            stop_all(self._replicas)

    def _start_all(self) -> None:
        for replica in self._replicas:
            replica.spawn()
        wait_listening(self._replicas, self.startup_timeout_s, self._stopping.is_set)
        for replica in self._replicas:
            replica.note(f"adapter replica {replica.index} started: {_listening(replica)}")

    def _restart(self, replica: ReplicaProcess, restarts: _Restarts, status: int) -> None:
        """Start a replica that died again on its port, after a delay that grows with each
        restart in a row; leave it down after MAX_RESTARTS of them."""
        if time.monotonic() - replica.started_at >= STABLE_S:
            restarts.in_a_row = 0
        while not self._stopping.is_set():
            died = f"adapter replica {replica.index} (port {replica.port}) {exit_text(status)}"
            if restarts.in_a_row >= MAX_RESTARTS:
                restarts.gave_up = True
                self._say(replica, f"{died}; not restarted again after {MAX_RESTARTS} restarts")
                return
            delay = min(RESTART_FIRST_S * 2**restarts.in_a_row, RESTART_MAX_S)
            restarts.in_a_row += 1
            restarts.total += 1
            self._say(
                replica,
                f"{died}; restart {restarts.in_a_row} of {MAX_RESTARTS} in {delay:g}s, "
                "on the same port",
            )
            if self._stopping.wait(delay):
                return
            try:
                replica.spawn()
                wait_listening([replica], self.startup_timeout_s, self._stopping.is_set)
            except (ReplicaStartError, OSError) as exc:
                stop_all([replica])
                status = replica.process.returncode if replica.process else 1
                replica.note(f"restart failed: {exc}")
                continue
            self._say(replica, f"adapter replica {replica.index} restarted: {_listening(replica)}")
            return

    def _say(self, replica: ReplicaProcess, line: str) -> None:
        replica.note(line)
        if self.notice is not None:
            self.notice(f"{line} (log: {replica.log_file})")


def _listening(replica: ReplicaProcess) -> str:
    pid = replica.process.pid if replica.process else "?"
    return f"pid {pid} listening on port {replica.port}"


def _start_error(spec: AdapterSpec, exc: ReplicaStartError | OSError) -> ManagedAdapterError:
    if isinstance(exc, OSError):
        return ManagedAdapterError(f"adapter {spec.name!r} cannot be started: {exc}")
    return ManagedAdapterError(str(exc))
