"""One user-error root per package, all under `streameval.errors.UserError`: the command line
catches that one class and prints one line, whatever part of the project raised it."""

from __future__ import annotations

import pytest

from streameval.adapters.config import AdapterConfigError
from streameval.adapters.errors import AdapterSetupError, ModelLoadError
from streameval.adapters.registry import AdapterLoadError
from streameval.core.benchmark.importing import BenchmarkError, EntryError
from streameval.core.errors import CoreError
from streameval.core.frames.errors import ImageRulesError, VideoDecodeError
from streameval.core.launch.adapter_process import AdapterProcessError
from streameval.core.launch.managed_adapters import ManagedAdapterError
from streameval.core.launch.replica_process import ReplicaStartError
from streameval.core.run.errors import RunError
from streameval.core.store.export import ExportFormatError
from streameval.core.store.store import StoreError
from streameval.core.streams.timeline import TimelineError
from streameval.errors import UserError
from streameval.scorer.errors import ScoreError
from streameval.scorer.judging.judges import JudgeError
from streameval.scorer.profiles import ProfileError
from tests.test_cli import streameval

ROOTS = {
    CoreError: (
        AdapterProcessError,
        BenchmarkError,
        EntryError,
        ExportFormatError,
        ImageRulesError,
        ManagedAdapterError,
        ReplicaStartError,
        RunError,
        StoreError,
        TimelineError,
        VideoDecodeError,
    ),
    AdapterSetupError: (AdapterConfigError, AdapterLoadError, ModelLoadError),
    ScoreError: (JudgeError, ProfileError),
}


@pytest.mark.parametrize("root", ROOTS)
def test_every_user_error_has_its_package_root_under_user_error(root: type) -> None:
    assert issubclass(root, UserError)
    for error in ROOTS[root]:
        assert issubclass(error, root), error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--adapter-url", "ws://127.0.0.1:9/ws", "--benchmark", "nowhere.json"], "nowhere"),
        # score opens the store read-only: an empty in-memory database is no store at all
        (["score", "no-such-run", "--store", "sqlite://"], "is not a streameval store"),
        (["adapter", "serve", "no-such-adapter", "--port", "0"], "no-such-adapter"),
    ],
)
def test_a_user_error_from_any_package_is_one_line(args: list[str], message: str) -> None:
    done = streameval(*args)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr, lines
