"""The adapter `run` and `worker` start themselves (`--adapter NAME [-A k=v] [--config
PRESET] [--replicas N | --gpus 0,1]`, core_server/launch/managed_adapters.py): the options,
their checks, and the replicas started for the command's time, with their log files.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from streameval.core.cli.common import console, fail

if TYPE_CHECKING:
    from streameval.core.launch.managed_adapters import ManagedAdapters

AdapterOption = Annotated[
    str | None,
    typer.Option(
        "--adapter",
        help="Start this adapter itself (a name from `streameval adapter list`, or "
        "module:Class), wait until it is ready and stop it at the end; instead of "
        "--adapter-url.",
    ),
]
AdapterOptionsOption = Annotated[
    list[str] | None,
    typer.Option(
        "-A",
        "--adapter-option",
        metavar="KEY=VALUE",
        help="With --adapter: one of its options over --config (repeatable); "
        "`streameval adapter options NAME` lists them.",
    ),
]
AdapterConfigOption = Annotated[
    str | None,
    typer.Option("--config", help="With --adapter: a YAML file of its options, or a preset name."),
]
ReplicasOption = Annotated[
    int | None,
    typer.Option(
        "--replicas",
        help="With --adapter: start this many replicas (on the CPU) [default: 1].",
    ),
]
GpusOption = Annotated[
    str | None,
    typer.Option(
        "--gpus",
        metavar="0,1,...",
        help="With --adapter: one replica per GPU, each seeing only its own "
        "(CUDA_VISIBLE_DEVICES).",
    ),
]

# Seconds a replica may take to listen (a model loads after that, while the run waits).
STARTUP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class AdapterChoice:
    """The managed-adapter options of one command, as given (None: not given)."""

    adapter: str | None
    adapter_options: list[str] | None
    adapter_config: str | None
    replicas: int | None
    gpus: str | None

    def check(self, adapter_url_given: bool) -> None:
        """One line for options that do not go together, before anything starts."""
        if self.adapter is not None and adapter_url_given:
            raise fail(
                "give --adapter (the Core starts it) or --adapter-url (one you run), not both"
            )
        if self.adapter is None:
            given = [
                flag
                for flag, value in (
                    ("-A", self.adapter_options),
                    ("--config", self.adapter_config),
                    ("--replicas", self.replicas),
                    ("--gpus", self.gpus),
                )
                if value
            ]
            if given:
                raise fail(f"{given[0]} goes with --adapter NAME (the adapter it starts)")
            return
        _check_known(self.adapter)
        if self.replicas is not None and self.gpus is not None:
            raise fail("give --replicas or --gpus (one replica per GPU), not both")
        if self.replicas is not None and self.replicas < 1:
            raise fail(f"--replicas must be at least 1, got {self.replicas}")
        self.gpu_list()

    def gpu_list(self) -> list[str]:
        """`--gpus 0,1` as ["0", "1"]; one line for an empty or repeated entry."""
        if self.gpus is None:
            return []
        gpus = [gpu.strip() for gpu in self.gpus.split(",")]
        if not all(gpus) or any(" " in gpu for gpu in gpus):
            raise fail(f"--gpus takes GPU numbers or ids separated by commas, got {self.gpus!r}")
        repeated = sorted({gpu for gpu in gpus if gpus.count(gpu) > 1})
        if repeated:
            raise fail(f"--gpus names GPU {repeated[0]} twice: one replica per GPU")
        return gpus


def _check_known(name: str) -> None:
    """A name that is not `module:Class` must be registered: said before anything starts
    (the registry reads entry points only; a module:Class is checked by its replica)."""
    if ":" in name:
        return
    from streameval.adapters.registry import UnknownAdapter, available_adapters

    if name not in available_adapters():
        raise fail(str(UnknownAdapter(name)))


@contextlib.contextmanager
def started_adapters(
    choice: AdapterChoice, concurrency: int, cache_dir: Path | None
) -> Iterator[ManagedAdapters | None]:
    """The chosen adapter's replicas, listening, for the block's time (None without
    --adapter). A SIGTERM while they start stops them and exits 143."""
    if choice.adapter is None:
        yield None
        return
    from streameval.core.launch.managed_adapters import AdapterSpec, ManagedAdapters
    from streameval.core.session.readiness import stderr_notice
    from streameval.core.store.locations import default_cache_dir

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    logs = (
        (cache_dir or default_cache_dir()) / "adapter-logs" / f"{stamp}-{os.getpid()}"
    )  # two commands in one second
    gpus = choice.gpu_list()
    managed = ManagedAdapters(
        AdapterSpec(choice.adapter, tuple(choice.adapter_options or ()), choice.adapter_config),
        replicas=choice.replicas or 1,
        gpus=gpus,
        concurrency=concurrency,
        log_dir=logs,
        startup_timeout_s=STARTUP_TIMEOUT_S,
        notice=stderr_notice,
    )
    count = len(gpus) or choice.replicas or 1
    where = f" on GPUs {', '.join(gpus)}" if gpus else ""
    console.print(
        f"starting adapter {choice.adapter}: {count} replica{'s' if count > 1 else ''}"
        f"{where}, logs in {logs}",
        highlight=False,
    )
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        managed.__enter__()
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        yield managed
    finally:
        managed.__exit__()


class TerminatedWhileStarting(Exception):
    """SIGTERM arrived while the managed adapters started."""


def _terminated(signum: int, frame: Any) -> None:
    raise TerminatedWhileStarting


def adapter_report(managed: ManagedAdapters | None) -> dict[str, list]:
    """The summary's lines about managed replicas: their log files and restarts."""
    if managed is None:
        return {}
    return {
        "adapter_logs": [str(path) for path in managed.log_files],
        "adapter_restarts": managed.restarts,
    }


def print_adapter_report(managed: ManagedAdapters | None) -> None:
    if managed is None:
        return
    restarted = [
        f"replica {index} restarted {count} time{'s' if count > 1 else ''}"
        for index, count in enumerate(managed.restarts)
        if count
    ]
    restarts = f" ({'; '.join(restarted)})" if restarted else ""
    files = "\n".join(f"  {path}" for path in managed.log_files)
    console.print(f"adapter logs{restarts}:\n{files}", highlight=False)
