"""One run of a benchmark against `ScriptedAdapter` (tests/wire_adapters.py), exported: how
the differential tests (TRACE, OVO-Bench, StreamingBench fidelity) stream their scripts
through the real Core before scoring the export twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.export import export_jsonl
from streameval.core.store.store import Store
from tests.test_data_cli import execute


def scripted_run(
    store: Store, root: Path, name: str, said: dict, concurrency: int = 4, **config: Any
) -> tuple[Path, list[dict]]:
    """Runs `config` (a RunConfig's fields but its endpoints) against a ScriptedAdapter that
    says `said` (by record id), and returns the run's export and its lines."""
    script = root / f"{name}.script.json"
    script.write_text(json.dumps(said))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STREAMEVAL_TEST_SCRIPT", str(script))  # the adapter process reads it
        with AdapterProcess("tests.wire_adapters:ScriptedAdapter") as adapter:
            endpoint = EndpointConfig(url=adapter.url, concurrency=concurrency)
            summary = execute(RunConfig(endpoints=[endpoint], **config), store)
    assert summary.failed == 0
    exported = root / f"{name}.jsonl"
    with exported.open("w") as handle:
        export_jsonl(store, summary.run_id, handle)
    return exported, [json.loads(line) for line in exported.read_text().splitlines()]
