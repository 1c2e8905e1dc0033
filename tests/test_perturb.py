"""Stream perturbations of a robustness run (docs/robustness.md): the pure transforms with
exact outputs, spec errors, and whole runs where what a real adapter process received is
both what the Core recorded and what the spec says, computed here on its own."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streameval.adapters.sdk import Adapter, Frame, Responder, Session
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.frames.types import FrameRef
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store
from streameval.core.streams.perturb import perturb
from streameval.core.streams.perturb_spec import PerturbationError, parse_spec, run_variants
from streameval.core.streams.timeline import Timeline, TimelineItem
from streameval.events import EventKind
from streameval.protocol import AdapterConditions, Instruction, Question, Step
from streameval.variants import RobustnessCondition, read_condition, variant_record_id

# ------------------------------------------------------------------ the adapter


class FrameLog(Adapter):
    """Logs every frame's index, id and header time, and every task and step, as JSON lines
    to $STREAMEVAL_TEST_LOG/<session>.jsonl; answers "A", stays silent at steps."""

    name = "frame-log"
    conditions = AdapterConditions(state="native", initiation="polled", model_name="test")

    def _log(self, session: Session, **entry) -> None:
        path = os.path.join(os.environ["STREAMEVAL_TEST_LOG"], f"{session.session_id}.jsonl")
        with open(path, "a") as handle:
            handle.write(json.dumps({**entry, "ns": time.monotonic_ns()}) + "\n")

    async def on_frame(self, session: Session, frame: Frame) -> None:
        self._log(session, kind="frame", t=frame.t, index=frame.index, frame_id=frame.frame_id)

    async def on_question(self, session: Session, question: Question, respond: Responder):
        self._log(session, kind="question", t=question.t)
        await respond.say("A")

    async def on_instruction(self, session: Session, instruction: Instruction, respond):
        self._log(session, kind="instruction", t=instruction.t)

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        self._log(session, kind="step", t=step.t, step=step.step)
        await respond.silent(step.step)


# ------------------------------------------------------------------ pure transforms


def ref(i: int) -> FrameRef:
    return FrameRef(i, i, float(i), f"v:f{i}", 8, 8, 100)


def timeline() -> Timeline:
    """Frames at 0..11 s, the instruction after the 3 s frame, a step after every frame
    from then on (a proactive timeline's shape)."""
    items = []
    for i in range(12):
        items.append(TimelineItem("frame", float(i), ref(i)))
        if i == 3:
            items.append(TimelineItem("instruction", 3.5))
        if i >= 3:
            items.append(TimelineItem("step", float(i), step=i - 3))
    return Timeline("r", "proactive", tuple(items))


def shown(items) -> list[str]:
    """F4@4.0 (a frame), F4@4.0>5.0 (sent at 5.0 under wall clock), s0@3.0, instruction@3.5."""
    out = []
    for item in items:
        if item.kind == "frame":
            held = "" if item.send_t is None else f">{item.send_t}"
            out.append(f"F{item.frame.index}@{item.t}{held}")
        elif item.kind == "step":
            out.append(f"s{item.step}@{item.t}")
        else:
            out.append(f"{item.kind}@{item.t}")
    return out


def applied(spec: str, seed: int = 0, base: str = "r") -> list[str]:
    return shown(perturb(timeline(), parse_spec(spec), seed, base).items)


def expected(frames: list[tuple[int, float]]) -> list[str]:
    """The items of `timeline()` for these (frame index, delivered t), steps renumbered."""
    out, step = [], 0
    for index, t in frames:
        out.append(f"F{index}@{t}")
        if index == 3:
            out.append("instruction@3.5")
        if index >= 3:
            out.append(f"s{step}@{t}")
            step += 1
    return out


def draws(label: str, seed: int = 0, base: str = "r") -> random.Random:
    return random.Random(f"{seed}\n{label}\n{base}")


def test_drop_leaves_frames_out_by_seeded_draws_never_the_one_before_a_task():
    rng = draws("drop:p=0.5")
    kept = [(i, float(i)) for i in range(12) if rng.random() >= 0.5 or i == 3]
    assert applied("drop:p=0.5") == expected(kept)
    assert applied("drop:p=0.5") == [
        "F3@3.0", "instruction@3.5", "s0@3.0", "F4@4.0", "s1@4.0", "F5@5.0", "s2@5.0",
        "F6@6.0", "s3@6.0", "F7@7.0", "s4@7.0", "F8@8.0", "s5@8.0", "F10@10.0", "s6@10.0",
    ]  # fmt: skip
    assert applied("drop:p=1") == ["F3@3.0", "instruction@3.5", "s0@3.0"]
    assert applied("drop:p=0") == shown(timeline().items)


def test_duplicate_sends_a_frame_twice_in_a_row_before_its_steps():
    rng = draws("duplicate:p=0.3")
    twice = {i for i in range(12) if rng.random() < 0.3}
    assert twice == {3, 7}
    result = applied("duplicate:p=0.3")
    # The first copy is sent back to back with the second (at its own time, ">3.0").
    assert result[:6] == ["F0@0.0", "F1@1.0", "F2@2.0", "F3@3.0>3.0", "F3@3.0", "instruction@3.5"]
    assert result[13:17] == ["F7@7.0>7.0", "F7@7.0", "s4@7.0", "F8@8.0"]
    assert len(result) == len(shown(timeline().items)) + 2


def test_jitter_moves_time_stamps_uniformly_keeping_them_increasing():
    rng = draws("jitter:max=0.5")
    times, previous = [], None
    for i in range(12):
        t = float(i) + rng.uniform(-0.5, 0.5)
        t = max(t, 0.0) if previous is None else max(t, 0.0, previous + 0.001)
        previous = round(t, 6)
        times.append(previous)
    assert applied("jitter:max=0.5") == expected(list(enumerate(times)))
    assert times[:3] == [0.096824, 1.018096, 1.736243]
    # Frames 2 s apart jittered by up to 5 s: kept strictly increasing, 1 ms apart at least.
    wide = perturb(timeline(), parse_spec("jitter:max=5"), 0, "r")
    stamps = [item.t for item in wide.items if item.kind == "frame"]
    assert all(b - a >= 0.001 - 1e-9 for a, b in zip(stamps, stamps[1:], strict=False))
    assert min(stamps) >= 0.0
    assert [item.frame.t for item in wide.items if item.kind == "frame"] == list(range(12))


def test_rate_thins_every_other_period_evenly():
    # Periods of 4 s from the first frame: [4, 8) keeps half its frames (4 and 6).
    assert applied("rate:factor=0.5,period=4") == expected(
        [(i, float(i)) for i in (0, 1, 2, 3, 4, 6, 8, 9, 10, 11)]
    )
    # A third of [3, 6) and of [9, 12): frames 3 (before the instruction) and 9.
    assert applied("rate:factor=0.34,period=3") == expected(
        [(i, float(i)) for i in (0, 1, 2, 3, 6, 7, 8, 9)]
    )


def test_burst_holds_frames_back_and_sends_them_together_without_steps():
    assert applied("burst:every=4,hold=2") == [
        "F0@0.0", "F1@1.0", "F2@2.0", "F3@3.0", "instruction@3.5", "s0@3.0",
        "F4@4.0>5.0", "F5@5.0", "s1@5.0", "F6@6.0", "s2@6.0", "F7@7.0", "s3@7.0",
        "F8@8.0>9.0", "F9@9.0", "s4@9.0", "F10@10.0", "s5@10.0", "F11@11.0", "s6@11.0",
    ]  # fmt: skip
    # A held frame followed by the instruction releases the burst there.
    assert applied("burst:every=2,hold=1.5")[2:6] == [
        "F2@2.0>3.0",
        "F3@3.0",
        "instruction@3.5",
        "s0@3.0",
    ]


def test_cut_goes_after_the_last_frame_at_or_before_its_time():
    clean = shown(timeline().items)
    # 50% of the 0..11 s span is 5.5 s: after the 5 s frame and its step.
    assert applied("cut:at=50%") == [*clean[:10], "cut@5.5", *clean[10:]]
    assert applied("cut:at=7") == [*clean[:14], "cut@7.0", *clean[14:]]
    assert applied("cut:at=0%") == [*clean[:1], "cut@0.0", *clean[1:]]


def test_the_same_seed_gives_the_same_stream_another_seed_or_record_another():
    for spec in ("jitter:max=0.5", "drop:p=0.5", "duplicate:p=0.5"):
        assert applied(spec, seed=3) == applied(spec, seed=3)
        assert applied(spec, seed=3) != applied(spec, seed=4)
        assert applied(spec, seed=3, base="r") != applied(spec, seed=3, base="other")


# ------------------------------------------------------------------ specs


def test_specs_are_normalised_with_defaults():
    assert parse_spec("drop").label == "drop:p=0.1"
    assert parse_spec(" drop:p=0.20 ").label == "drop:p=0.2"
    assert parse_spec("rate:period=10").params == {"factor": 0.5, "period": 10.0}
    assert parse_spec("rate:period=10").label == "rate:factor=0.5,period=10"
    assert parse_spec("cut").label == "cut:at=50%"
    assert parse_spec("cut:at=12.5").params == {"at": 12.5}
    assert parse_spec("negative").kind == "negative"
    labels = [v.label for v in run_variants(["drop:p=0.1", "drop", "jitter"], "standard")]
    assert labels == [
        "jitter:max=0.25", "drop:p=0.1", "duplicate:p=0.1", "rate:factor=0.5,period=30",
        "burst:every=20,hold=5", "cut:at=50%", "negative",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("drop:p=2", "perturbation drop: p must be in [0, 1], got 2"),
        ("rate:factor=0", "perturbation rate: factor must be in (0, 1], got 0"),
        ("cut:at=150%", "perturbation cut: at must be in [0, 100]%, got 150%"),
        ("drop:p=x", "perturbation drop: p must be a number, got 'x'"),
        ("drop:p=nan", "perturbation drop: p must be in [0, 1], got nan"),
        (
            "shake",
            "unknown perturbation 'shake'; known: jitter, drop, duplicate, rate, "
            "burst, cut, negative",
        ),  # fmt: skip
        ("drop:q=1", "perturbation drop: unknown parameter 'q'; it takes p"),
        ("drop:p", "perturbation drop: p needs a value (p=VALUE)"),
        ("drop:p=0.1,p=0.2", "perturbation drop: p is given twice"),
        (
            "burst:every=5,hold=5",
            "perturbation burst: hold must be less than every, got hold=5 and every=5",
        ),  # fmt: skip
        ("negative:p=1", "perturbation negative takes no parameters, got 'p=1'"),
    ],
)
def test_a_bad_spec_is_one_line(spec, message):
    with pytest.raises(PerturbationError) as raised:
        parse_spec(spec)
    assert str(raised.value) == message


def test_the_command_line_refuses_a_bad_spec_in_one_line(tmp_path):
    for args, message in (
        (["--perturb", "drop:p=2"], "error: perturbation drop: p must be in [0, 1], got 2"),
        (["--robustness", "heavy"], "error: unknown robustness preset 'heavy'; known: standard"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "streameval.cli", "run", "--adapter-url", "ws://127.0.0.1:9/ws"]
            + ["--store", f"sqlite:///{tmp_path / 's.db'}", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert done.returncode == 2
        assert (done.stdout + done.stderr).strip() == message


# ------------------------------------------------------------------ whole runs

SPECS = (
    "jitter:max=0.4",
    "drop:p=0.3",
    "duplicate:p=0.3",
    "rate:factor=0.5,period=4",
    "burst:every=4,hold=2",
)


def log_of(log_dir: Path, session_id: str) -> list[dict]:
    path = log_dir / f"{session_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def dropped_frames(events: list) -> list[tuple]:
    """(index, frame_id, t) of each frame the Core recorded as dropped (wall clock)."""
    return [
        (e.payload.index, e.payload.frame_id, e.payload.t)
        for e in events
        if e.kind == EventKind.FRAME_DROPPED
    ]


def with_dropped_frames(log: list[dict], dropped: list[tuple]) -> list[dict]:
    """A session's log with the frames the Core dropped put back at their times (before a
    task at the same time): the stream the spec's rules apply to."""
    frames = [{"kind": "frame", "index": i, "frame_id": f, "t": t} for i, f, t in dropped]
    return sorted([*log, *frames], key=lambda entry: (entry["t"], entry["kind"] != "frame"))


def less(expected: list[tuple], dropped: list[tuple]) -> list[tuple]:
    """`expected` without one occurrence of each dropped frame."""
    left = list(expected)
    for frame in dropped:
        left.remove(frame)
    return left


def frames_followed_by_task(log: list[dict]) -> list[tuple[dict, bool]]:
    """Each frame of a clean stream, and whether a question or instruction follows it."""
    out: list[tuple[dict, bool]] = []
    for entry in log:
        if entry["kind"] == "frame":
            out.append((entry, False))
        elif entry["kind"] in ("question", "instruction"):
            out[-1] = (out[-1][0], True)
    return out


def expected_frames(spec: str, clean: list[dict], seed: int, base: str) -> list[tuple]:
    """(index, frame_id, delivered t) the spec says a variant of the clean stream delivers,
    computed from the spec's own words (docs/robustness.md), not with core_server."""
    frames = frames_followed_by_task(clean)
    rng = random.Random(f"{seed}\n{parse_spec(spec).label}\n{base}")
    name, params = spec.split(":")[0], parse_spec(spec).params
    out: list[tuple] = []
    previous = None
    origin = frames[0][0]["t"]
    held_j, period_of = 0, None
    for frame, before_task in frames:
        sample = (frame["index"], frame["frame_id"], frame["t"])
        if name == "jitter":
            t = frame["t"] + rng.uniform(-params["max"], params["max"])
            t = round(max(t, 0.0) if previous is None else max(t, 0.0, previous + 0.001), 6)
            previous = t
            out.append((*sample[:2], t))
        elif name == "drop":
            if rng.random() >= params["p"] or before_task:
                out.append(sample)
        elif name == "duplicate":
            out += [sample, sample] if rng.random() < params["p"] else [sample]
        elif name == "rate":
            period = math.floor((frame["t"] - origin) / params["period"])
            held_j = held_j + 1 if period == period_of else 0
            period_of = period
            step_up = math.floor(held_j * params["factor"] + 1e-9) > math.floor(
                (held_j - 1) * params["factor"] + 1e-9
            )
            if period % 2 == 0 or held_j == 0 or step_up or before_task:
                out.append(sample)
        else:  # burst: every frame, at its own time stamp
            out.append(sample)
    return out


@pytest.mark.parametrize("pacing", ["logical", "wall_clock"])
def test_each_perturbation_delivers_what_is_recorded_and_what_the_spec_says(
    pacing, adapter_env, benchmark_path, tmp_path
):
    seed = 5
    with (
        AdapterProcess("tests.test_perturb:FrameLog") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = RunConfig(
            benchmark=str(benchmark_path),
            endpoints=[EndpointConfig(url=adapter.url, concurrency=2)],
            cache_dir=str(tmp_path / "cache"),
            pacing=pacing,
            speed=4.0,
            perturbations=list(SPECS),
            perturb_seed=seed,
        )

        async def go():
            executor = RunExecutor(config, store)
            return await executor.execute(await executor.prepare())

        summary = asyncio.run(go())
        assert (summary.finished, summary.failed) == (18, 0)
        condition = read_condition(store.get_run(summary.run_id).conditions)
        assert condition == RobustnessCondition(
            seed=seed, variants=tuple(parse_spec(spec) for spec in SPECS)
        )
        events: dict[str, list] = {}
        for event in store.iter_events(summary.run_id):
            events.setdefault(event.session_id, []).append(event)

    for base in ("t:qa:1", "t:qa:2", "t:pro:1"):
        clean = with_dropped_frames(log_of(adapter_env, base), dropped_frames(events[base]))
        for spec in SPECS:
            label = parse_spec(spec).label
            session = variant_record_id(base, label, seed)
            assert condition.labels([session]) == {session: label}
            received = log_of(adapter_env, session)
            delivered = [
                (e["index"], e["frame_id"], e["t"]) for e in received if e["kind"] == "frame"
            ]
            sent = [e for e in events[session] if e.kind == EventKind.FRAME_SENT]
            recorded = [(e.payload.index, e.payload.frame_id, e.payload.t) for e in sent]
            assert delivered == recorded, (session, spec)
            dropped = dropped_frames(events[session])
            # Wall-clock pacing skips a frame whose successor is already due, which a loaded
            # machine can make happen; logical pacing never drops one.
            assert pacing == "wall_clock" or not dropped
            expected = expected_frames(spec, clean, seed, base)
            assert delivered == less(expected, dropped), (session, spec)
            # The sample's own time is recorded where the time stamp moved.
            for e in sent:
                moved = e.payload.t != e.video_t
                assert e.payload.source_t == (e.video_t if moved else None)
            # Acknowledged once per delivery, duplicates included.
            acks = [e for e in events[session] if e.kind == EventKind.FRAME_ACK]
            assert len(acks) == len(sent)
            if spec.startswith("burst") and base == "t:pro:1":
                # Frames 8 and 9 s held back: no decision between them, sent together
                # (at 4 s the instruction releases the frame held before it).
                kinds = [(e["kind"], e["t"]) for e in received]
                at = kinds.index(("frame", 8.0))
                assert kinds[at - 1 : at + 3] == [
                    ("step", 7.0), ("frame", 8.0), ("frame", 9.0), ("step", 9.0)
                ]  # fmt: skip
                if pacing == "wall_clock":
                    held = {e.payload.t: e.payload.scheduled_ns for e in sent}
                    assert held[8.0] == held[9.0]
                    assert held[9.0] - held[7.0] == pytest.approx(2 / 4 * 1e9, abs=2)


def test_a_standard_robustness_run_stores_its_condition_and_a_session_per_variant(
    benchmark_path, tmp_path
):
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "run", "--benchmark", str(benchmark_path)]
        + ["--robustness", "standard", "--perturb", "drop:p=0.5", "--perturb-seed", "9"]
        + ["--detach", "--json", "--store", store_url, "--cache-dir", str(tmp_path / "c")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    with Store(store_url) as store:
        run = store.get_run(run_id)
        sessions = {s.session_id for s in store.sessions(run_id)}
        records = {r["record_id"]: r for r in store.records(run_id)}
    condition = read_condition(run.conditions)
    assert condition.seed == 9 and condition.preset == "standard"
    assert [v.label for v in condition.variants] == [
        "jitter:max=0.25", "drop:p=0.1", "duplicate:p=0.1", "rate:factor=0.5,period=30",
        "burst:every=20,hold=5", "cut:at=50%", "negative", "drop:p=0.5",
    ]  # fmt: skip
    assert run.config["robustness"] == "standard"
    assert run.config["perturbations"] == ["drop:p=0.5"]
    perturbations = [v.label for v in condition.variants if v.kind == "perturbation"]
    assert len(perturbations) == 7
    bases = ("t:qa:1", "t:qa:2", "t:pro:1")
    wanted = set(bases) | {
        variant_record_id(base, label, 9) for base in bases for label in perturbations
    }
    # The proactive record has room for a negative stream: one more session.
    wanted.add(variant_record_id("t:pro:1", "negative", 9))
    assert sessions == wanted == set(records)
    by_label = condition.labels(sessions)
    assert sorted(by_label.values()).count("clean") == 3
    assert list(by_label.values()).count("negative") == 1
    # A copy is the record under another id: nothing else names the variant.
    copy = records[variant_record_id("t:qa:1", "drop:p=0.5", 9)]
    assert {**copy, "record_id": "t:qa:1"} == records["t:qa:1"]


def test_a_robustness_run_resumes_with_its_variant_records(adapter_env, benchmark_path, tmp_path):
    """Created by one executor, run by another built from the stored configuration (as
    `run --resume` and workers do), then one finished variant session redone."""
    with (
        AdapterProcess("tests.test_perturb:FrameLog") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        endpoints = [EndpointConfig(url=adapter.url, concurrency=2)]
        config = RunConfig(
            benchmark=str(benchmark_path),
            endpoints=endpoints,
            cache_dir=str(tmp_path / "cache"),
            tasks=["proactive"],
            perturbations=["drop:p=0.5", "jitter:max=0.3"],
        )
        run_id = asyncio.run(RunExecutor(config, store).prepare())

        def resume():
            stored = RunConfig.model_validate(store.get_run(run_id).config)
            return asyncio.run(RunExecutor(stored, store).execute(run_id))

        first = resume()
        assert (first.total, first.finished, first.failed) == (3, 3, 0)
        dropped = variant_record_id("t:pro:1", "drop:p=0.5", 0)
        before = log_of(adapter_env, dropped)
        (adapter_env / f"{dropped}.jsonl").unlink()
        store.reset_session(run_id, dropped)
        again = resume()
        assert (again.kept, again.finished, again.failed) == (2, 1, 0)
        frames = [
            (e["index"], e["t"]) for e in log_of(adapter_env, dropped) if e["kind"] == "frame"
        ]
        assert frames == [(e["index"], e["t"]) for e in before if e["kind"] == "frame"]
        assert len(frames) < 18  # some of the 18 clean frames were left out
