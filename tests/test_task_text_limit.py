"""A benchmark task too large for one protocol message (a 20 MB question) is the input's
fault: refused by `data validate` and by `run` before anything is created, and, for a run
that streams one anyway, the session fails with cause `input` naming the record, never
blamed on the adapter (which would refuse the message with 1009)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from streameval.core.benchmark import importing
from streameval.core.benchmark.importing import BenchmarkError
from streameval.core.benchmark.records import Probe
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.protocol import MAX_MESSAGE_BYTES, MAX_TASK_TEXT_BYTES
from tests.servers import streameval_command
from tests.test_core_run import execute, run_config
from tests.timeline_fixtures import PROACTIVE, QA, QA_EARLY, write_benchmark

HUGE = "x" * (20 * 1024 * 1024)


def huge_benchmark(tmp_path: Path) -> Path:
    probe = Probe(
        t=5.0, question="Which?", answer="A", options=("A. " + HUGE[:MAX_TASK_TEXT_BYTES],)
    )
    records = (
        QA.model_copy(update={"question": HUGE}),
        QA_EARLY,
        PROACTIVE.model_copy(update={"probes": (probe,)}),
    )
    return write_benchmark(tmp_path / "bench", records)


def test_data_validate_names_each_oversized_task_and_the_limit(tmp_path):
    path = huge_benchmark(tmp_path)
    done = subprocess.run(
        streameval_command("data", "validate", str(path)), capture_output=True, text=True
    )
    assert done.returncode == 1, done.stdout + done.stderr
    limit = f"over the limit of {MAX_TASK_TEXT_BYTES} bytes for one task (docs/security.md)"
    question = 2 + len(HUGE) + 4 + len("A. one") + 4 + len("B. two") + 2  # ["..", "..", ".."]
    option = 2 + len("Which?") + 4 + 3 + MAX_TASK_TEXT_BYTES + 2
    lines = done.stdout.splitlines()
    assert (
        f"t:qa:1: the question with its options is {question} bytes of JSON text, {limit}" in lines
    )
    expected = (
        f"t:pro:1: probe 0's question with its options is {option} bytes of JSON text, {limit}"
    )
    assert expected in lines
    assert "Traceback" not in done.stderr


def test_run_refuses_the_benchmark_before_creating_anything(adapter_env, tmp_path):
    path = huge_benchmark(tmp_path)
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        config = run_config(path, tmp_path, "ws://127.0.0.1:9/ws", tasks=["qa"])
        with pytest.raises(BenchmarkError, match=r"^t:qa:1: the question with its options is "):
            execute(config, store)
        assert store.list_runs() == []


def test_a_task_over_the_message_limit_fails_its_session_as_input(
    adapter_env, tmp_path, monkeypatch
):
    # A run whose benchmark passed an older Core's load: the Core must not send the task.
    monkeypatch.setattr(importing, "MAX_TASK_TEXT_BYTES", 10**9)
    path = huge_benchmark(tmp_path)
    with (
        AdapterProcess("tests.wire_adapters:InstantAdapter") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        summary = execute(run_config(path, tmp_path, adapter.url, tasks=["qa"]), store)
        assert (summary.finished, summary.failed) == (1, 1)
        failed = next(s for s in store.sessions(summary.run_id) if s.status == "failed")
        size = len(f'{{"type":"question","task_id":"t:qa:1","t":17.0,"text":"{HUGE}"') + len(
            ',"options":["A. one","B. two"]}'
        )
        assert (failed.session_id, failed.failure_stage, failed.failure_cause) == (
            "t:qa:1",
            "streaming",
            "input",
        )
        assert failed.failure_reason == (
            f"record t:qa:1: its question is {size} bytes as sent, over the protocol's limit "
            f"of {MAX_MESSAGE_BYTES} bytes per message"
        )
        kinds = [e.kind for e in store.iter_events(summary.run_id, "t:qa:1")]
        assert EventKind.QUESTION_SENT not in kinds
        assert kinds[-1] == EventKind.SESSION_FAILED
