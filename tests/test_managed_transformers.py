"""The Done-when of issue 34's managed adapters with a real model stack: from an empty folder,
`streameval run --adapter transformers -A model=<tiny model> --replicas 2 --limit 4` starts
two replicas of the transformers adapter, runs the synthetic benchmark over both and leaves
no process behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.model_stack import require_model_stack

require_model_stack()

pytestmark = pytest.mark.models  # .ci/run runs these in its model-stack venv

from streameval.core.store.store import Store  # noqa: E402
from tests.managed_core import Core, started  # noqa: E402
from tests.tiny_qwen2vl import build_tiny_model  # noqa: E402


def test_two_transformers_replicas_of_a_tiny_model_run_and_stop(tmp_path: Path):
    model = build_tiny_model(tmp_path / "tiny-qwen2vl")
    (tmp_path / "work").mkdir()
    core = Core(tmp_path / "work")
    done = core.run(
        "run", "--adapter", "transformers", "-A", f"model={model}", "--replicas", "2",
        "--limit", "4", "--json", timeout=900,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["sessions"], summary["finished"], summary["failed"]) == (4, 4, 0)
    assert summary["adapter_restarts"] == [0, 0]
    logs = [Path(path) for path in summary["adapter_logs"]]
    assert [log.name for log in logs] == ["transformers-0.log", "transformers-1.log"]
    ports = {f"ws://127.0.0.1:{port}/ws" for log in logs for _, port in started(log)}
    with Store(summary["store"]) as store:
        sessions = store.sessions(summary["run_id"])
    assert len(ports) == 2 and {s.endpoint for s in sessions} == ports
    assert core.alive() == []
