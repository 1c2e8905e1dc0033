"""End to end: every protocol profile run on each importer's records and scored with the
scoring profile that reproduces it, against the three baseline adapters.

For each importer's fixture (tests/fixtures) a handful of short records is cut from the
source file (the importer reads the slice like the full file), tiny stand-in
videos are generated at the durations the records need, and the Core runs them under
`trace`, `realstream`, `ovo-offline` and `streamingbench-polling`. Every run must complete,
record its protocol, and score exactly what the baselines' behaviour implies: `silent`
declines everything, `always` answers the first option ("A") and says "yes" at every step,
`random-choice` picks a seeded option and stays silent at steps. What each says to a
question is read from the adapter class itself, in process.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streameval.adapters.baselines import AlwaysAdapter, RandomChoiceAdapter, SilentAdapter
from streameval.adapters.sdk import Adapter, Responder
from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.ovo_bench import CATEGORY_OF
from streameval.core.benchmark.records import ProactiveRecord, QARecord, Record
from streameval.core.benchmark.validate import trigger_bounds
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import probe_task_id
from streameval.protocol import Question, Step
from streameval.scorer.profiles import scoring_profile_for
from streameval.scorer.report import RunScores, score_run
from tests.test_data_cli import execute, write_video
from tests.test_import_trace import FIXTURES

PROTOCOLS = ("trace", "realstream", "ovo-offline", "streamingbench-polling")
BASELINES: dict[str, type[Adapter]] = {
    "always": AlwaysAdapter,
    "silent": SilentAdapter,
    "random-choice": RandomChoiceAdapter,
}


# ----------------------------------------------------------------------------- slices


def _trace_slice(source: Path, keep: set, target: Path) -> Path:
    target.mkdir()
    for name in ("qa.jsonl", "proactive.jsonl"):
        lines = (source / name).read_text().splitlines()
        kept = [line for line in lines if line.strip() and json.loads(line)["record_id"] in keep]
        (target / name).write_text("\n".join(kept) + "\n")
    return target


def _ovo_slice(source: Path, keep: set, target: Path) -> Path:
    target.mkdir()
    entries = [entry for entry in json.loads(source.read_text()) if entry["id"] in keep]
    (target / source.name).write_text(json.dumps(entries))
    return target / source.name


def _streamingbench_slice(source: Path, keep: set, target: Path) -> Path:
    target.mkdir()
    entries = [e for index, e in enumerate(json.loads(source.read_text())) if index in keep]
    (target / source.name).write_text(json.dumps(entries))  # the name says which part
    return target / source.name


@dataclass(frozen=True)
class Sample:
    parts: tuple[str, ...]
    cut: Callable[[Path, set, Path], Path]
    keep: frozenset  # record ids, OVO-Bench ids or StreamingBench entry positions


# Short records (the longest needs 55 s of video), covering QA with right and wrong
# first options and each source's proactive kind.
SAMPLES = {
    "trace": Sample(
        ("trace_release",),
        _trace_slice,
        frozenset(
            {
                "streambench_qa:901",  # 14 s, A
                "streambench_qa:905",  # 19 s, A
                "streambench_qa:906",  # 55 s, C
                "ovo_bench_qa:916",  # ASI, 25 s, A
                "ovo_bench_proactive:1921",  # REC, seven windows up to 22.6 s
            }
        ),
    ),
    "ovo_bench": Sample(
        ("ovo_bench", "ovo_bench_new.json"),
        _ovo_slice,
        # FPD at 0.03 s (A); HLD 8 s (B); ASI 21 s (D) and 45 s (A); REC probes to 31/15 s
        frozenset({2151, 2162, 2112, 2111, 2192, 2193}),
    ),
    "streamingbench-real": Sample(
        ("streamingbench", "questions_real.json"),
        _streamingbench_slice,
        frozenset({1, 2, 3}),  # 19 s (A), 10 s (B), 3 s (A)
    ),
    "streamingbench-proactive": Sample(
        ("streamingbench", "questions_proactive.json"),
        _streamingbench_slice,
        frozenset({3}),  # instruction at 11 s, "White Hit" at 17 s
    ),
}


def latest_needed_s(record: Record) -> float:
    """The latest video time a record's run reads: question, window bound or probe."""
    if isinstance(record, QARecord):
        return record.question_time_s
    bounds = [t for trigger in record.triggers for t in trigger_bounds(trigger) if t is not None]
    return max([record.instruction_time_s, *bounds, *(probe.t for probe in record.probes)])


@dataclass
class Prepared:
    path: Path
    records: list[Record]


class Workspace:
    """Slices, stand-in videos, a frame cache and a store shared by the module's runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.prepared: dict[str, Prepared] = {}
        self.store_url = f"sqlite:///{root / 'store.db'}"

    def prepare(self, name: str) -> Prepared:
        if name not in self.prepared:
            spec = SAMPLES[name]
            path = spec.cut(FIXTURES.joinpath(*spec.parts), set(spec.keep), self.root / name)
            benchmark = load_benchmark(str(path), self.root / "cache")
            needed: dict[str, float] = defaultdict(float)
            for record in benchmark.records:
                needed[record.video_path] = max(needed[record.video_path], latest_needed_s(record))
            for video, latest in needed.items():
                # 32x24 at 2 fps, one second past the last time a record reads.
                write_video(Path(benchmark.video_root) / video, math.ceil(latest) + 1, fps=2)
            self.prepared[name] = Prepared(path, list(benchmark.records))
        return self.prepared[name]

    def run(self, path: Path, protocol: str, url: str) -> tuple[int, int, RunScores]:
        config = RunConfig(
            benchmark=str(path),
            endpoints=[EndpointConfig(url=url, concurrency=8)],
            cache_dir=str(self.root / "cache"),
            profile=protocol,
        )
        with Store(self.store_url) as store:
            summary = execute(config, store)
            scores = score_run(store, summary.run_id, scoring_profile_for(protocol))
        return summary.finished, summary.failed, scores


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("profile-runs"))


@pytest.fixture(scope="module")
def endpoints() -> Iterator[dict[str, str]]:
    processes = {name: AdapterProcess(name).start() for name in BASELINES}
    try:
        yield {name: process.url for name, process in processes.items()}
    finally:
        for process in processes.values():
            process.stop()


# ----------------------------------------------------------------------------- baselines


def _said(call: Callable[[Responder], object], task_id: str) -> str | None:
    """What an adapter hook says (the final text), or None when it declines."""
    sent: list[dict] = []

    async def send(raw: str) -> None:
        sent.append(json.loads(raw))

    asyncio.run(call(Responder(send, task_id)))
    finals = [message["text"] for message in sent if message["type"] == "response_final"]
    return finals[0] if finals else None


def answer(adapter: Adapter, task_id: str, options: tuple[str, ...]) -> str | None:
    question = Question(task_id=task_id, t=0.0, text="?", options=list(options))
    # The baselines never read the session; none is needed to ask them.
    return _said(lambda respond: adapter.on_question(None, question, respond), task_id)


def says_at_steps(adapter: Adapter) -> bool:
    step = Step(task_id="x", step=0, t=0.0)
    return _said(lambda respond: adapter.on_step(None, step, respond), "x") is not None


def qa_correct(adapter: Adapter, record: QARecord) -> bool:
    return answer(adapter, record.record_id, record.options) == record.answer


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


# ----------------------------------------------------------------------------- expectations


def expect_trace(scores: RunScores, records: list[Record], adapter: Adapter) -> None:
    qa = [r for r in records if isinstance(r, QARecord)]
    proactive = [r for r in records if isinstance(r, ProactiveRecord)]
    if qa:
        family = scores.overall["qa"]
        expected = mean([float(qa_correct(adapter, r)) for r in qa])
        assert family["accuracy"].value == pytest.approx(expected)
        assert family["completion_rate"].value == 1.0
    if proactive:
        family = scores.overall["proactive"]
        # No baseline ever says a window's answer ("yes" is none of them).
        assert family["in_window_accuracy"].value == 0.0
        assert family["completion_rate"].value == 1.0
        if not says_at_steps(adapter):
            assert family["miss_rate"].value == 1.0
            assert family["false_alarm_rate"].value is None  # no answered episode


def expect_realstream(scores: RunScores, records: list[Record], adapter: Adapter) -> None:
    """Per record S of Eq. 3 at 0.5 fps (frames at 0, 2, 4 s ...). A QA record is right or
    wrong at its question's step; speaking at every step repeats "yes" on consecutive turns
    (M = 0.5) once there are two steps before the question (t_q >= 4 s). A proactive record
    never gets its answer from a baseline (quality 0); a forward task (REC) is penalised
    for speaking at step 0 when its first target lies beyond step 1 (start > 2 s)."""
    chatty = says_at_steps(adapter)
    expected = []
    for record in records:
        if isinstance(record, QARecord):
            repeated = chatty and record.question_time_s >= 4.0
            expected.append(float(qa_correct(adapter, record)) * (0.5 if repeated else 1.0))
        else:
            first = min(trigger.start_s for trigger in record.triggers)
            early = chatty and record.task_type in ("REC", "SSR", "CRR") and first > 2.0
            expected.append(-0.1 if early else 0.0)
    realstream = scores.overall["realstream"]
    assert realstream["score"].value == pytest.approx(percent(mean(expected)))
    assert realstream["score"].population == len(records)  # QA records are turns too


def category(record: Record) -> str:
    return record.metadata.get("category") or CATEGORY_OF.get(record.task_type, "other")


def expect_ovo(scores: RunScores, records: list[Record], adapter: Adapter) -> None:
    """OVO-Bench's total: the mean over its three categories of the mean over task types
    of the question scores (tasks of no OVO category are not in it). A baseline answers a
    probe with a letter or not at all, which is never a count, a "Yes" nor a "No": every
    forward probe scores 0."""
    tasks: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        if isinstance(record, QARecord):
            said = answer(adapter, record.record_id, record.options)
            tasks[category(record)][record.task_type].append(
                float(said is not None and record.answer in said)
            )
        elif record.probes:
            probe_answers = {
                answer(adapter, probe_task_id(record.record_id, index), probe.options)
                for index, probe in enumerate(record.probes)
            }
            assert probe_answers <= {None, "A"}
            tasks[category(record)][record.task_type].append(0.0)
    if not tasks:  # nothing OVO-Bench can score: proactive records without probes
        assert "ovo" not in scores.overall
        assert any("have no probes" in note for note in scores.notes)
        return
    category_means = [
        mean([mean(s) for s in by_task.values()])
        for name, by_task in tasks.items()
        if name != "other"
    ]
    ovo = scores.overall["ovo"]
    expected = percent(mean(category_means)) if category_means else None
    assert ovo["total"].value == pytest.approx(expected)
    assert ovo["completion_rate"].value == 1.0


def expect_streamingbench(scores: RunScores, records: list[Record], adapter: Adapter) -> None:
    """QA by the answer's first character (a baseline's answer is a bare label), a declined
    question left out of the denominator and counted; no baseline ever gives a proactive
    output (the first thing `always` says is "yes")."""
    questions = [r for r in records if isinstance(r, QARecord)]
    answered = [r for r in questions if answer(adapter, r.record_id, r.options) is not None]
    correct = sum(qa_correct(adapter, r) for r in answered)
    targets = sum(len(r.triggers) for r in records if isinstance(r, ProactiveRecord))
    family = scores.overall["streamingbench"]
    counted = len(answered) + targets
    assert family["accuracy"].value == (
        None if not counted else pytest.approx(100.0 * correct / counted)
    )
    if questions:
        assert family["excluded_answers"].value == len(questions) - len(answered)
    if targets:
        assert family["proactive_accuracy"].value == 0.0
    assert family["completion_rate"].value == 1.0


EXPECT = {
    "trace": expect_trace,
    "realstream": expect_realstream,
    "ovo-offline": expect_ovo,
    "streamingbench-polling": expect_streamingbench,
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", SAMPLES)
def test_a_profile_run_completes_and_scores_what_the_baselines_imply(
    name: str, protocol: str, workspace: Workspace, endpoints: dict[str, str]
) -> None:
    prepared = workspace.prepare(name)
    for baseline, adapter_class in BASELINES.items():
        finished, failed, scores = workspace.run(prepared.path, protocol, endpoints[baseline])
        assert (finished, failed) == (len(prepared.records), 0), baseline
        assert scores.sessions.finished == scores.records_scored == len(prepared.records)
        assert scores.protocol == protocol
        assert not any(note.startswith("scoring profile") for note in scores.notes)
        EXPECT[protocol](scores, prepared.records, adapter_class())


def test_the_slices_hold_what_the_expectations_assume(workspace: Workspace) -> None:
    """The chosen records: both right and wrong first options, and each proactive kind."""
    kinds = {}
    for name in SAMPLES:
        records = workspace.prepare(name).records
        kinds[name] = sorted(
            {(r.task, r.answer if isinstance(r, QARecord) else r.task_type) for r in records}
        )
    assert kinds == {
        "trace": [("proactive", "REC"), ("qa", "A"), ("qa", "C")],
        "ovo_bench": [("proactive", "REC"), ("qa", "A"), ("qa", "B"), ("qa", "D")],
        "streamingbench-real": [("qa", "A"), ("qa", "B")],
        "streamingbench-proactive": [("proactive", "Proactive Output")],
    }
