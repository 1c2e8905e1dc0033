"""Protocol profiles change what the adapter sees, exactly as each source protocol says."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from streameval.core.benchmark.records import Probe
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store
from streameval.events import EventKind
from tests.timeline_fixtures import PROACTIVE, QA, write_benchmark


def run(benchmark: Path, url: str, tmp_path: Path, **overrides):
    config = RunConfig(
        benchmark=str(benchmark),
        endpoints=[EndpointConfig(url=url, concurrency=2)],
        cache_dir=str(tmp_path / "cache"),
        **overrides,
    )

    async def go():
        with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
            executor = RunExecutor(config, store)
            summary = await executor.execute(await executor.prepare())
            events = list(store.iter_events(summary.run_id))
            return summary, events

    return asyncio.run(go())


def seen(log_dir: Path, session_id: str) -> list[tuple[str, float | None]]:
    lines = (log_dir / f"{session_id}.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    return [(e["kind"], e["t"]) for e in entries if e["kind"] != "session_start"]


def test_realstream_asks_for_a_decision_at_every_step_from_the_start(adapter_env, tmp_path):
    benchmark = write_benchmark(tmp_path / "b", records=(QA, PROACTIVE))
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        summary, events = run(benchmark, adapter.url, tmp_path, profile="realstream")
    assert (summary.finished, summary.failed) == (2, 0)
    # 0.5 fps from the video's start; a step after every frame; the query at its step.
    qa = []
    for t in range(0, 16, 2):
        qa += [("frame", float(t)), ("step", float(t))]
    qa += [("frame", 16.0), ("question", 17.0)]
    assert seen(adapter_env, QA.record_id) == qa
    proactive = [("frame", 0.0), ("step", 0.0), ("frame", 2.0), ("step", 2.0), ("frame", 4.0)]
    proactive += [("instruction", 4.0), ("step", 4.0)]
    for t in range(6, 17, 2):
        proactive += [("frame", float(t)), ("step", float(t))]
    assert seen(adapter_env, PROACTIVE.record_id) == proactive
    silences = [e for e in events if e.kind == EventKind.SILENT]
    assert len(silences) == 8 + 9  # every step decided, before the question too


def test_ovo_offline_asks_the_probes_one_by_one(adapter_env, tmp_path):
    probed = PROACTIVE.model_copy(
        update={
            "probes": (
                Probe(t=7.9, question="Yes or no?", answer="No"),
                Probe(t=3.0, question="How many?", answer="2"),
                Probe(t=7.5, question="Yes or no?", answer="Yes"),
            )
        }
    )
    benchmark = write_benchmark(tmp_path / "b", records=(QA, probed))
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        summary, events = run(benchmark, adapter.url, tmp_path, profile="ovo-offline")
    assert (summary.finished, summary.failed) == (2, 0)
    # QA: the whole legal prefix; proactive: no instruction, each probe after its frame.
    assert seen(adapter_env, QA.record_id) == [("frame", float(t)) for t in range(18)] + [
        ("question", 17.0)
    ]
    expected = [("frame", float(t)) for t in range(4)] + [("question", 3.0)]
    expected += [("frame", float(t)) for t in range(4, 8)]
    expected += [("question", 7.5), ("question", 7.9)]
    assert seen(adapter_env, probed.record_id) == expected
    asked = [
        (e.payload.task_id, e.payload.t)
        for e in events
        if e.kind == EventKind.QUESTION_SENT and e.session_id == probed.record_id
    ]
    assert asked == [
        ("t:pro:1#probe1", 3.0),
        ("t:pro:1#probe2", 7.5),
        ("t:pro:1#probe0", 7.9),
    ]
    answered = {e.payload.task_id for e in events if e.kind == EventKind.RESPONSE_START}
    assert answered >= {task for task, _ in asked}


def test_streamingbench_polling_polls_every_second_and_refuses_query_adapters(
    adapter_env, tmp_path
):
    benchmark = write_benchmark(tmp_path / "b", records=(PROACTIVE,))
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        summary, _ = run(benchmark, adapter.url, tmp_path, profile="streamingbench-polling")
    assert summary.finished == 1
    log = seen(adapter_env, PROACTIVE.record_id)
    steps = [t for kind, t in log if kind == "step"]
    assert steps == [float(t) for t in range(4, 18)]
    assert log[:6] == [("frame", float(t)) for t in range(5)] + [("instruction", 4.0)]


def test_a_profile_that_needs_logical_pacing_refuses_wall_clock():
    with pytest.raises(ValidationError, match="profile realstream needs logical pacing"):
        RunConfig(
            benchmark="synthetic",
            endpoints=[EndpointConfig(url="ws://127.0.0.1:1/ws")],
            profile="realstream",
            pacing="wall_clock",
        )
