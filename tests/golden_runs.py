"""Recorded runs and their scores, frozen so that a refactoring of the Core or the scorer can
show it changes no number (tests/test_golden_scores.py).

Three runs, made once with the code of the commit that wrote them (their end lines, which
exports gained later, were appended then, counting the lines they hold):
- `demo`: the `streameval demo` run (synthetic benchmark, reference adapter), exported whole.
- `trace_fixture`: the TRACE release written for these tests (tests/fixtures/trace_release)
  run with `ScriptedAdapter`, exported whole (its records are ours to keep).
- `trace_sample`: the TRACE release sample (../shared/data) run with `ScriptedAdapter`. The
  sample's annotations must not be copied into the project, so only its events are kept,
  with the question and instruction texts blanked (the scorer reads neither), and the
  adapter says no annotated sentence (REC counts, golden option texts and fixed phrases
  only). Its record lines are rebuilt from ../shared/data when the scores are checked, and
  its check is skipped where that folder is absent.

`python -m tests.golden_runs [NAME ...]` records the named runs (default: all) again and
rewrites their golden scores: do it only when a change of the scores is intended, and say
why in the commit. With `--scores-only` the frozen runs are kept and only their scores are
rewritten: for a change of what the scorer reports (a new metric) that must not touch the
recorded events, which then keep checking that events of older Cores still read.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.records import QARecord, Record
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import score_exported

GOLDEN = Path(__file__).resolve().parent / "golden"
SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "trace_release"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "trace_release"
RUNS = ("demo", "trace_fixture", "trace_sample")
_BLANKED = {"question_sent": ("text", "options"), "instruction_sent": ("text",)}


def trace_sample_records() -> list[Record]:
    with tempfile.TemporaryDirectory() as cache:
        return list(load_benchmark(str(SAMPLE), Path(cache)).records)


def golden_script(records: list[Record]) -> dict[str, Any]:
    """What ScriptedAdapter says: golden option texts to questions; around each trigger a
    REC count, silence tokens, "Silent." or noise, never an annotated sentence."""
    from tests.test_scorer_parsing import GOLDEN as TEXTS

    entries: dict[str, Any] = {}
    for position, record in enumerate(records):
        if isinstance(record, QARecord):
            entries[record.record_id] = {"answer": TEXTS[position % len(TEXTS)][0] or None}
            continue
        steps = []
        for index, trigger in enumerate(record.triggers):
            said = trigger.answer if record.task_type == "REC" else "something happened"
            cases = [said, f"  {said.upper()}  ", "Silent.", "wait", "<silent>", None]
            text = cases[(index + position) % len(cases)]
            if text is not None:
                steps.append((trigger.start_s, text))
            steps.append((trigger.start_s + 6.0, "noise"))
        entries[record.record_id] = {"steps": sorted(steps)}
    return entries


def export_text(name: str) -> str:
    """The run's export, its record lines rebuilt for the TRACE sample."""
    with gzip.open(GOLDEN / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    if name != "trace_sample":
        return "\n".join(lines) + "\n"
    records = sorted(trace_sample_records(), key=lambda record: record.record_id)
    record_lines = [
        json.dumps({"type": "record", **record.model_dump(mode="json")}) for record in records
    ]
    return "\n".join([lines[0], *record_lines, *lines[1:]]) + "\n"


def scores(name: str, profile: str, directory: Path) -> dict[str, Any]:
    """The run scored under `profile`; the TRACE sample's per-record results left out (they
    quote its annotations)."""
    path = directory / f"{name}.jsonl"
    path.write_text(export_text(name), encoding="utf-8")
    return score_exported(path, profile).to_json(include_records=name != "trace_sample")


def golden_scores(name: str) -> dict[str, Any]:
    with gzip.open(GOLDEN / f"{name}.scores.json.gz", "rt", encoding="utf-8") as handle:
        return json.load(handle)


# ----------------------------------------------------------------------------- recording


def _record_demo(store_url: str, directory: Path) -> str:
    from streameval.core.config import EndpointConfig, RunConfig
    from streameval.core.launch.adapter_process import AdapterProcess
    from streameval.core.store.store import Store
    from tests.test_data_cli import execute

    with AdapterProcess("reference") as adapter, Store(store_url) as store:
        config = RunConfig(
            benchmark="synthetic",
            endpoints=[EndpointConfig(url=adapter.url, concurrency=4)],
            cache_dir=str(directory / "cache"),
        )
        return _export(store, execute(config, store).run_id, keep_records=True)


def _record_trace(release: Path, keep_records: bool, store_url: str, directory: Path) -> str:
    from streameval.core.config import EndpointConfig, RunConfig
    from streameval.core.launch.adapter_process import AdapterProcess
    from streameval.core.store.store import Store
    from tests.test_data_cli import execute, stand_in_videos

    path = directory / "trace"
    path.mkdir()
    for part in ("qa.jsonl", "proactive.jsonl"):
        (path / part).write_text((release / part).read_text())
    benchmark = load_benchmark(str(path), directory / "cache")
    stand_in_videos(benchmark, path)
    script = directory / "script.json"
    script.write_text(json.dumps(golden_script(list(benchmark.records))))
    os.environ["STREAMEVAL_TEST_SCRIPT"] = str(script)
    with (
        AdapterProcess("tests.wire_adapters:ScriptedAdapter") as adapter,
        Store(store_url) as store,
    ):
        config = RunConfig(
            benchmark=str(path),
            endpoints=[EndpointConfig(url=adapter.url, concurrency=4)],
            cache_dir=str(directory / "cache"),
        )
        return _export(store, execute(config, store).run_id, keep_records=keep_records)


def _export(store, run_id: str, keep_records: bool) -> str:
    from streameval.core.store.export import export_jsonl

    buffer = io.StringIO()
    export_jsonl(store, run_id, buffer)
    kept = []
    for line in buffer.getvalue().splitlines():
        obj = json.loads(line)
        if obj["type"] == "record" and not keep_records:
            continue
        if obj["type"] == "event":
            for key in _BLANKED.get(obj["kind"], ()):
                obj["payload"][key] = [] if key == "options" else ""
        kept.append(json.dumps(obj, separators=(",", ":")))
    return "\n".join(kept) + "\n"


RECORDERS: dict[str, Callable[[str, Path], str]] = {
    "demo": _record_demo,
    "trace_fixture": partial(_record_trace, FIXTURE, True),
    "trace_sample": partial(_record_trace, SAMPLE, False),
}


def record(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        os.environ["STREAMEVAL_CACHE_DIR"] = str(directory / "streameval-cache")
        for name in names:
            recorder = RECORDERS[name]
            (directory / name).mkdir()
            text = recorder(f"sqlite:///{directory / name}.db", directory / name)
            with gzip.open(GOLDEN / f"{name}.jsonl.gz", "wt", encoding="utf-8") as handle:
                handle.write(text)
            frozen = {profile: scores(name, profile, directory) for profile in SCORING_PROFILES}
            with gzip.open(GOLDEN / f"{name}.scores.json.gz", "wt", encoding="utf-8") as handle:
                json.dump(frozen, handle, sort_keys=True)


def rescore(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as temporary:
        for name in names:
            frozen = {
                profile: scores(name, profile, Path(temporary)) for profile in SCORING_PROFILES
            }
            with gzip.open(GOLDEN / f"{name}.scores.json.gz", "wt", encoding="utf-8") as handle:
                json.dump(frozen, handle, sort_keys=True)


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    arguments = sys.argv[1:]
    names = [name for name in arguments if name != "--scores-only"] or list(RUNS)
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        sys.exit(f"error: no golden run named {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    rescore(names) if "--scores-only" in arguments else record(names)
