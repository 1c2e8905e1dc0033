"""The transformers adapter on a tiny random Qwen2-VL: cache arithmetic, silence, real runs.

The model is built in the test from a config and an offline byte-level tokenizer (one token
per byte of text, one per special marker), so every token count below is exact. Its text is
random: the tests assert structure and counts, never content. (Qwen2.5-VL and Qwen3-VL are
built too, for the cache-equivalence check.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.model_stack import require_model_stack

# No hub access, here and in the adapter processes (set before huggingface_hub reads it).
os.environ["HF_HUB_OFFLINE"] = "1"
require_model_stack()
pytestmark = pytest.mark.models  # .ci/run runs these in its model-stack venv

import torch  # noqa: E402

from streameval.adapters.config import AdapterConfigError, read_config_file  # noqa: E402
from streameval.adapters.hf.chat import AFTER_ANSWER, ASSISTANT_TURN  # noqa: E402
from streameval.adapters.hf.text import IncrementalText  # noqa: E402
from streameval.adapters.registry import load_adapter  # noqa: E402
from streameval.adapters.sdk import Frame, Responder, Session  # noqa: E402
from streameval.adapters.transformers_adapter import (  # noqa: E402
    TransformersAdapter,
    TransformersAdapterConfig,
)
from streameval.core.config import EndpointConfig, RunConfig  # noqa: E402
from streameval.core.launch.adapter_process import AdapterProcess  # noqa: E402
from streameval.core.run.runner import RunExecutor  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import EventKind  # noqa: E402
from streameval.protocol import (  # noqa: E402
    AUDIO_FEATURE,
    AudioConditions,
    Instruction,
    Question,
    RunConditions,
    Step,
)
from tests.recording import Wire  # noqa: E402
from tests.timeline_fixtures import PROACTIVE, QA, write_benchmark  # noqa: E402
from tests.tiny_qwen2vl import build_tiny_model  # noqa: E402

# The test video's 64x48 frames are resized to 56x56: 2x2 merged patches = 4 visual tokens,
# plus vision start and end. Each frame also carries its text label ("Frame at 5s:").
IMAGE_TOKENS = 4 + 2
FRAME_PIXELS = 56 * 56


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2vl"))


def configured(model: Path, **options) -> TransformersAdapter:
    return TransformersAdapter(TransformersAdapterConfig(model=str(model), **options))


@pytest.fixture(scope="module")
def adapter(tiny_model: Path) -> TransformersAdapter:
    return configured(tiny_model)


def byte_tokens(text: str) -> int:
    """Tokens of `text` under the tiny tokenizer: one per byte, one per special marker."""
    special = ("<|im_start|>", "<|im_end|>")
    count = sum(text.count(marker) for marker in special)
    for marker in special:
        text = text.replace(marker, "")
    return count + len(text.encode())


def frame_tokens(adapter: TransformersAdapter, t: float, index: int) -> int:
    return byte_tokens(adapter.chat.label(t, index)) + IMAGE_TOKENS


def test_a_character_split_across_tokens_goes_out_with_the_token_that_completes_it(adapter):
    tokens = adapter.vlm.tokenize("aé!")
    assert len(tokens) == 4  # "é" is two bytes, two tokens
    text = IncrementalText(adapter.vlm.detokenize)
    assert [text.push(t) for t in tokens] == ["a", "", "é", "!"]
    dangling = IncrementalText(adapter.vlm.detokenize)
    assert [dangling.push(t) for t in tokens[:2]] == ["a", ""]
    assert dangling.text == "a"


# ------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"visual_tokens": 2}, "visual_tokens: Input should be greater than or equal to 4"),
        ({"instruction_prompt": "{query}"}, "instruction_prompt: bad template"),
        ({"qa_prompt": "{query}"}, "qa_prompt: unknown placeholder {query}"),
        ({"model": "/nonexistent/model"}, "model: directory '/nonexistent/model' does not exist"),
    ],
)
def test_bad_options_are_one_clear_error(tiny_model, options, message):
    with pytest.raises(AdapterConfigError, match=message):
        load_adapter("transformers", {"model": str(tiny_model), **options})


def test_a_model_outside_the_qwen_vl_families_is_refused(tiny_model, tmp_path):
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    tiny = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1}
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**tiny, num_attention_heads=4, image_size=28),
        text_config=LlamaConfig(**tiny, vocab_size=263, num_attention_heads=4),
        image_token_index=261,
    )
    LlavaForConditionalGeneration(config).save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"):
        shutil.copy(tiny_model / name, tmp_path / name)
    with pytest.raises(AdapterConfigError, match="model type 'llava' is not supported"):
        load_adapter("transformers", {"model": str(tmp_path)})


# ------------------------------------------------------------------ model state


@pytest.mark.parametrize(("visual_tokens", "expected"), [(128, 117), (768, 391)])
def test_visual_tokens_per_frame_follow_the_preset(tiny_model, visual_tokens, expected):
    vlm = configured(tiny_model, visual_tokens=visual_tokens).vlm
    # 640x480: capped at 128 tokens it is resized to 364x252 (13x9 tokens); 768 tokens
    # allow its native size, rounded to 644x476 (23x17).
    encoded = vlm.encode_frame(np.zeros((480, 640, 3), dtype=np.uint8))
    assert len(encoded.token_ids) - 2 == expected
    assert encoded.pixels == expected * 28 * 28


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_appending_chunk_by_chunk_equals_one_pass_over_the_whole_sequence(
    family, tiny_model, tmp_path
):
    """The cache after frames committed one at a time holds exactly what one forward pass
    over the whole conversation computes: same next-token logits, one cache slot per token.
    """
    model = tiny_model if family == "qwen2_vl" else build_tiny_model(tmp_path, family)
    adapter = configured(model)
    vlm = adapter.vlm
    rng = np.random.default_rng(0)
    # Square, tall and wide layouts: an image advances the positions by its longer side.
    frames = [
        vlm.encode_frame(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        for height, width in ((48, 64), (84, 56), (56, 112))
    ]
    # (Qwen3-VL's 16-pixel patches round these sizes to the same grids.)
    assert [f.grid_thw.tolist() for f in frames] == [[[1, 4, 4]], [[1, 6, 4]], [[1, 4, 8]]]
    chunks = [(vlm.tokenize(adapter.chat.preamble()), None)]
    for index, frame in enumerate(frames):
        chunks.append((vlm.tokenize(adapter.chat.label(float(index), index)), None))
        chunks.append((frame.token_ids, frame))
    chunks.append((vlm.tokenize(adapter.chat.question(3.0, "Which?", ["A. one"])), None))

    cache, position = vlm.new_cache(), 0
    for ids, frame in chunks:
        before = cache.get_seq_length()
        logits, position = vlm.forward(cache, position, ids, frame)
        assert cache.get_seq_length() - before == len(ids)

    whole = torch.tensor([[t for ids, _ in chunks for t in ids]], device=vlm.device)
    with torch.inference_mode():
        reference = vlm.model(
            input_ids=whole,
            pixel_values=torch.cat([f.pixel_values for f in frames]).to(vlm.device),
            image_grid_thw=torch.cat([f.grid_thw for f in frames]).to(vlm.device),
            mm_token_type_ids=(whole == vlm.image_token_id).int(),
        ).logits[0, -1]
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ decisions, in process


def new_session(wire: Wire, audio: AudioConditions | None = None) -> Session:
    """A 0.5 fps session; with `audio`, one that streams sound to a Core that reads the
    workload's audio counts."""
    conditions = RunConditions(
        profile="realstream",
        pacing="logical",
        fps=0.5,
        max_width=960,
        jpeg_quality=90,
        qa_history_s=0,
        proactive_lead_s=0,
        audio=audio,
    )
    features = frozenset() if audio is None else frozenset({AUDIO_FEATURE})
    return Session("run", "s", ["r"], conditions, wire.send, core_features=features)


def jpeg_frame(index: int) -> Frame:
    """Frame `index` of a 0.5 fps stream: 64x48, at 2 * index seconds."""
    data = io.BytesIO()
    Image.fromarray(np.full((48, 64, 3), 40 * index % 256, dtype=np.uint8)).save(data, "JPEG")
    return Frame(index, f"f{index}", 2.0 * index, 64, 48, data.getvalue())


@pytest.fixture
def parrot(tiny_model: Path):
    """The tiny model with its output layer zeroed: every logit is 0, so greedy decoding
    always picks token 0, the byte "!". A model whose every answer is known."""

    def build(**options) -> TransformersAdapter:
        built = configured(tiny_model, **options)
        with torch.no_grad():
            built.vlm.model.lm_head.weight.zero_()
        return built

    return build


def run_steps(adapter: TransformersAdapter, steps: int) -> tuple[Wire, Session]:
    """A realstream-style session: a frame, then a decision, `steps` times."""
    wire = Wire()
    session = new_session(wire)

    async def go() -> None:
        await adapter.on_session_start(session)
        respond = Responder(wire.send, "task")
        for step in range(steps):
            await adapter.on_frame(session, jpeg_frame(step))
            await adapter.on_step(session, Step(task_id="task", step=step, t=2.0 * step), respond)

    asyncio.run(go())
    return wire, session


def test_the_wait_word_is_a_silent_decision_and_stays_in_context(parrot):
    adapter = parrot(wait_word="!", max_tokens_proactive=6)
    wire, session = run_steps(adapter, 3)
    assert [m["step"] for m in wire.of("silent")] == [0, 1, 2]
    assert wire.of("response_start") == []
    # Each step: the assistant turn, six "!" (the wait word, as the model said it), the
    # turn back to the user. No task was given, so the first step says how to pass.
    turn = byte_tokens(ASSISTANT_TURN) + byte_tokens(AFTER_ANSWER)
    standby = byte_tokens(adapter.chat.first_standby_step()) + byte_tokens(AFTER_ANSWER)
    calls = wire.workloads("model_call")
    assert [(c["input_tokens"], c["output_tokens"]) for c in calls] == [
        (standby, 6),
        (turn, 6),
        (turn, 6),
    ]
    commits = [c["input_tokens"] for c in wire.workloads("state_commit")]
    frames = [frame_tokens(adapter, 2.0 * i, i) for i in range(3)]
    assert commits == [byte_tokens(adapter.chat.preamble())] + frames
    assert session.state["stream"].length == sum(commits) + standby + 2 * turn + 3 * 6


def test_text_that_leaves_the_wait_word_is_streamed_one_delta_per_token(parrot):
    adapter = parrot(wait_word="!?", max_tokens_proactive=5)
    wire, _ = run_steps(adapter, 2)
    assert wire.of("silent") == []
    finals = wire.of("response_final")
    assert [(f["text"], f["output_tokens"]) for f in finals] == [("!!!!!", 5)] * 2
    # The first "!" was held (it could have begun "!?"); it goes out with the second.
    deltas = wire.of("response_delta")
    assert [d["text"] for d in deltas] == ["!"] * 10
    assert [d["seq"] for d in deltas] == [0, 1, 2, 3, 4] * 2


def test_a_question_is_answered_from_the_cache_and_the_answer_kept(parrot):
    adapter = parrot(max_tokens_qa=4)
    wire = Wire()
    session = new_session(wire)
    question = Question(task_id="q", t=4.0, text="Which?", options=["A. one", "B. two"])

    async def go() -> None:
        await adapter.on_session_start(session)
        for index in range(3):
            await adapter.on_frame(session, jpeg_frame(index))
        await adapter.on_question(session, question, Responder(wire.send, "q"))

    asyncio.run(go())
    kinds = [m["type"] for m in wire.messages if m["type"] != "workload"]
    assert kinds == ["response_start"] + ["response_delta"] * 4 + ["response_final"]
    assert wire.of("response_final")[0]["output_tokens"] == 4
    (call,) = wire.workloads("model_call")
    prompt = byte_tokens(adapter.chat.question(question.t, question.text, question.options))
    assert (call["input_tokens"], call["output_tokens"]) == (prompt + byte_tokens(AFTER_ANSWER), 4)
    commits = sum(c["input_tokens"] for c in wire.workloads("state_commit"))
    expected = commits + prompt + 4 + byte_tokens(AFTER_ANSWER)
    assert session.state["stream"].length == expected


def test_frames_past_the_context_budget_are_dropped_and_recorded(parrot, adapter):
    preamble = byte_tokens(adapter.chat.preamble())
    two_frames = frame_tokens(adapter, 0.0, 0) + frame_tokens(adapter, 2.0, 1)
    # Room for the preamble, two frames and the reserve: the third frame is dropped.
    dropping = parrot(
        context_tokens=preamble + two_frames + 20, reserve_tokens=20, cache_policy="fail"
    )
    wire = Wire()
    session = new_session(wire)

    async def go() -> None:
        await dropping.on_session_start(session)
        for index in range(3):
            await dropping.on_frame(session, jpeg_frame(index))

    asyncio.run(go())
    records = [(m["kind"], m["frame_ids"]) for m in wire.of("workload")]
    assert records == [
        ("state_commit", []),
        ("state_commit", ["f0"]),
        ("state_commit", ["f1"]),
        ("drop", ["f2"]),
    ]
    assert session.state["stream"].length == preamble + two_frames


def test_a_decision_with_no_room_left_is_a_fatal_error(parrot, adapter):
    preamble = byte_tokens(adapter.chat.preamble())
    standby = byte_tokens(adapter.chat.first_standby_step()) + byte_tokens(AFTER_ANSWER)
    # The frame fits (no reserve), then not a single answer token does.
    full = parrot(
        context_tokens=preamble + frame_tokens(adapter, 0.0, 0) + standby,
        reserve_tokens=0,
        cache_policy="fail",
    )
    wire, _ = run_steps(full, 1)
    assert wire.of("error") == [
        {
            "type": "error",
            "code": "context_full",
            "message": f"the context of {full.context_tokens} tokens is full",
            "fatal": True,
        }
    ]
    assert wire.workloads("model_call") == []


# ------------------------------------------------------------------ real runs


@pytest.fixture(scope="module")
def served(tiny_model: Path):
    """The adapter served by its registered name, as its own process."""
    options = {
        "model": str(tiny_model),
        "visual_tokens": 128,
        "max_tokens_qa": 8,
        "max_tokens_proactive": 8,
    }
    with AdapterProcess("transformers", options=options) as process:
        yield process


def run_core(url: str, profile: str, tmp_path: Path) -> dict[str, list]:
    """A logical-pacing run of a QA record and a proactive record of a real video."""
    benchmark = write_benchmark(tmp_path / "bench", records=(QA, PROACTIVE))
    config = RunConfig(
        benchmark=str(benchmark),
        endpoints=[EndpointConfig(url=url, concurrency=2)],
        cache_dir=str(tmp_path / "cache"),
        pacing="logical",
        profile=profile,
    )

    async def execute(store: Store):
        executor = RunExecutor(config, store)
        return await executor.execute(await executor.prepare())

    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        summary = asyncio.run(execute(store))
        assert (summary.finished, summary.failed) == (2, 0)
        events: dict[str, list] = {}
        for event in store.iter_events(summary.run_id):
            events.setdefault(event.session_id, []).append(event)
    return events


def test_a_trace_run_through_the_core(served, tiny_model, adapter, tmp_path):
    events = run_core(served.url, "trace", tmp_path)
    chat = adapter.chat  # the same default prompts as the served adapter's
    hello = next(e for e in events["t:qa:1"] if e.kind == EventKind.ADAPTER_HELLO)
    assert hello.payload.conditions.state == "native"
    assert hello.payload.conditions.model_name == tiny_model.name

    # QA: the preamble, then each of the 13 frames committed in order, each adding exactly
    # its label and image tokens to the cache, each before its acknowledgement.
    qa = events["t:qa:1"]
    sent = [e.payload.model_dump() for e in qa if e.kind == EventKind.FRAME_SENT]
    assert len(sent) == 13
    commits = workloads(qa, "state_commit")
    assert commits[0]["frame_ids"] == []
    assert commits[0]["input_tokens"] == byte_tokens(chat.preamble())
    assert [c["frame_ids"] for c in commits[1:]] == [[frame["frame_id"]] for frame in sent]
    assert [c["input_tokens"] for c in commits[1:]] == [
        frame_tokens(adapter, frame["t"], i) for i, frame in enumerate(sent)
    ]
    assert {(c["images"], c["pixels"]) for c in commits[1:]} == {(1, FRAME_PIXELS)}
    assert all(c["started_ns"] <= c["ended_ns"] for c in commits)
    for frame in sent:
        assert seq_of(qa, EventKind.WORKLOAD, frame_ids=[frame["frame_id"]]) < seq_of(
            qa, EventKind.FRAME_ACK, index=frame["index"]
        )

    # The answer: start, one delta per generated token, the final; then its model call.
    kinds = [e.kind for e in qa]
    first = kinds.index(EventKind.RESPONSE_START)
    last = kinds.index(EventKind.RESPONSE_FINAL)
    assert set(kinds[first + 1 : last]) == {EventKind.RESPONSE_DELTA}
    deltas = [e.payload.model_dump() for e in qa[first + 1 : last]]
    final = qa[last].payload.model_dump()
    assert [d["seq"] for d in deltas] == list(range(len(deltas)))
    assert 1 <= final["output_tokens"] == len(deltas) <= 8
    assert final["text"] == "".join(d["text"] for d in deltas)
    (call,) = workloads(qa, "model_call")
    prompt = byte_tokens(chat.question(QA.question_time_s, QA.question, list(QA.options)))
    assert call["input_tokens"] == prompt + byte_tokens(AFTER_ANSWER)
    assert call["output_tokens"] == final["output_tokens"]
    assert (call["frame_ids"], call["images"]) == ([], 0)

    # Proactive: the instruction joins the context, then a decision at every step (silent
    # or a streamed answer), each a model call on top of the cache.
    pro = events["t:pro:1"]
    steps = [e.payload.step for e in pro if e.kind == EventKind.STEP_SENT]
    assert steps == list(range(14))
    assert_one_decision_per_step(pro, steps)
    calls = workloads(pro, "model_call")
    turn = byte_tokens(ASSISTANT_TURN) + byte_tokens(AFTER_ANSWER)
    assert [c["input_tokens"] for c in calls] == [turn] * 14
    text_commits = [c for c in workloads(pro, "state_commit") if c["images"] == 0]
    instruction = chat.instruction(PROACTIVE.instruction_time_s, PROACTIVE.instruction)
    assert text_commits[1]["input_tokens"] == byte_tokens(instruction)


def test_a_realstream_run_decides_at_every_frame(served, adapter, tmp_path):
    """The frame-level protocol: a decision after every frame, before any task too; the
    first of those carries the standby prompt, the others only the turn change."""
    events = run_core(served.url, "realstream", tmp_path)
    turn = byte_tokens(ASSISTANT_TURN) + byte_tokens(AFTER_ANSWER)
    standby = byte_tokens(adapter.chat.first_standby_step()) + byte_tokens(AFTER_ANSWER)
    calls: dict[str, list[int]] = {}
    for session_id, session in events.items():
        frames = [e.payload.frame_id for e in session if e.kind == EventKind.FRAME_SENT]
        commits = [c["frame_ids"] for c in workloads(session, "state_commit") if c["images"]]
        assert commits == [[frame_id] for frame_id in frames]
        steps = [e.payload.step for e in session if e.kind == EventKind.STEP_SENT]
        assert steps == list(range(len(steps)))
        assert_one_decision_per_step(session, steps)
        calls[session_id] = [c["input_tokens"] for c in workloads(session, "model_call")]

    # QA at 0.5 fps from the start to the question at 17 s: 9 frames, a step after each but
    # the last, then the question, answered from the cache.
    qa = events["t:qa:1"]
    assert sum(e.kind == EventKind.FRAME_SENT for e in qa) == 9
    question = adapter.chat.question(QA.question_time_s, QA.question, list(QA.options))
    answer = byte_tokens(question) + byte_tokens(AFTER_ANSWER)
    assert calls["t:qa:1"] == [standby] + [turn] * 7 + [answer]
    assert any(e.kind == EventKind.RESPONSE_FINAL for e in qa[seq_of(qa, "question_sent") :])
    # Proactive from the start (0, 2, 4 s before the instruction at 4 s) to 16 s: 9 steps.
    assert calls["t:pro:1"] == [standby] + [turn] * 8


def seq_of(events, kind: str, **payload) -> int:
    """The sequence number of the one event of `kind` whose payload has these values."""
    (seq,) = [
        e.seq
        for e in events
        if e.kind == kind and all(getattr(e.payload, k) == v for k, v in payload.items())
    ]
    return seq


def workloads(events, kind: str) -> list[dict]:
    return [
        e.payload.model_dump()
        for e in events
        if e.kind == EventKind.WORKLOAD and e.payload.kind == kind
    ]


def assert_one_decision_per_step(events, steps: list[int]) -> None:
    """Every step gets exactly one decision before the next: silent, or an answer whose
    output tokens are its deltas. (The answer to a question is not a step's decision.)"""
    decided: list[int] = []
    step = None
    for event in events:
        if event.kind == EventKind.STEP_SENT:
            step = event.payload.step
        elif event.kind == EventKind.QUESTION_SENT:
            step = None
        elif event.kind == EventKind.SILENT:
            assert event.payload.step == step
            decided.append(step)
        elif event.kind == EventKind.RESPONSE_FINAL and step is not None:
            assert step not in decided
            deltas = [
                e
                for e in events
                if e.kind == EventKind.RESPONSE_DELTA
                and e.payload.response_id == event.payload.response_id
            ]
            assert event.payload.output_tokens == len(deltas)
            decided.append(step)
    assert decided == steps


# ------------------------------------------------------------------ bounded memory


def stream_of(adapter: TransformersAdapter, frames: int, reprefill: bool = False):
    """A StreamState holding the preamble, then `frames` random frames, each followed by a
    step decision; returns it with each segment's (ids, visual) for rebuilding by hand."""
    from streameval.adapters.hf.stream import StreamState

    vlm = adapter.vlm
    rng = np.random.default_rng(1)
    stream = StreamState(vlm, reprefill=reprefill)
    parts = [("pinned", (), vlm.tokenize(adapter.chat.preamble()), None)]
    for index in range(frames):
        encoded = vlm.encode_frame(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
        label = vlm.tokenize(adapter.chat.label(2.0 * index, index))
        parts.append(("frame", (f"f{index}",), label + encoded.token_ids, encoded))
        parts.append(("turn", (), vlm.tokenize(ASSISTANT_TURN + "ok" + AFTER_ANSWER), None))
    for kind, frame_ids, ids, visual in parts:
        stream.begin(kind, frame_ids)
        stream.append(ids, visual)
    return stream, parts


QUESTION = ASSISTANT_TURN + "Which?"


def next_logits(vlm, cache, position: int, ids: list[int], attention_mask=None):
    if attention_mask is None:
        return vlm.forward(cache, position, ids)[0]
    positions = (torch.arange(len(ids)) + position).view(1, 1, -1).expand(3, 1, -1)
    with torch.inference_mode():
        return vlm.model(
            input_ids=torch.tensor([ids]),
            position_ids=positions,
            attention_mask=attention_mask,
            cache=cache,
            use_cache=True,
        ).logits[0, -1]


def test_evicting_in_place_equals_no_longer_attending_to_the_evicted_tokens(adapter):
    """The oldest frame blocks and their decisions leave every layer's keys and values; the
    kept keys keep their positions. The next token's logits are those of the full cache
    with the evicted slots masked out of the attention."""
    vlm = adapter.vlm
    evicted, _ = stream_of(adapter, 4)
    full, _ = stream_of(adapter, 4)
    before = evicted.length
    question = vlm.tokenize(QUESTION)
    eviction = evicted.make_room(len(question), before, min_frames=2)
    unit = frame_tokens(adapter, 0.0, 0) + byte_tokens(ASSISTANT_TURN + "ok" + AFTER_ANSWER)
    assert eviction.frame_ids == ["f0", "f1"]
    assert (eviction.slots, eviction.reprefilled, eviction.repositioned) == (2 * unit, 0, False)
    assert evicted.length == before - 2 * unit
    assert [s.kind for s in evicted.segments] == ["pinned"] + ["frame", "turn"] * 2
    assert evicted.next_position == full.next_position  # positions go on growing

    mask = torch.ones(1, before + len(question), dtype=torch.long)
    preamble = byte_tokens(adapter.chat.preamble())
    mask[0, preamble : preamble + 2 * unit] = 0
    reference = next_logits(vlm, full.cache, full.next_position, question, mask)
    logits = next_logits(vlm, evicted.cache, evicted.next_position, question)
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-5)
    again, _ = stream_of(adapter, 4)
    unmasked = next_logits(vlm, again.cache, again.next_position, question)
    assert not torch.allclose(unmasked, reference, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def one_layer(tiny_model: Path, tmp_path_factory) -> TransformersAdapter:
    """The tiny model cut to its first layer: there a token's keys and values depend only
    on the token and its position, not on what it attended to."""
    directory = tmp_path_factory.mktemp("one-layer")
    for source in tiny_model.iterdir():
        shutil.copy(source, directory / source.name)
    config = json.loads((directory / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 1
    config["text_config"].pop("layer_types", None)
    (directory / "config.json").write_text(json.dumps(config))
    return configured(directory)


def test_with_one_layer_an_evicted_cache_equals_a_fresh_prefill_of_what_is_kept(one_layer):
    """In place, the kept tokens keep their positions: the cache is the one a fresh
    prefill of the kept segments at those positions computes. Closing the gaps turns every
    kept key to the position the model's rule gives the compacted conversation."""
    vlm = one_layer.vlm
    stream, parts = stream_of(one_layer, 5)
    question = vlm.tokenize(QUESTION)
    eviction = stream.make_room(len(question), stream.length, min_frames=2)
    assert eviction.frame_ids == ["f0", "f1"]
    kept = [parts[0]] + parts[5:]
    assert [s.start for s in stream.segments][1] > stream.segments[0].end  # a gap

    at_same_positions = vlm.new_cache()
    for segment, (_, _, ids, visual) in zip(stream.segments, kept, strict=True):
        vlm.forward(at_same_positions, segment.start, ids, visual)
    reference = next_logits(vlm, at_same_positions, stream.next_position, question)
    logits = vlm.forward(stream.cache, stream.next_position, question)[0]
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-5)

    # Closing the gaps (done when positions reach the model's maximum).
    stream, _ = stream_of(one_layer, 5)
    stream.make_room(len(question), stream.length, min_frames=2)
    stream._close_gaps()
    assert stream.repositions == 1
    compacted, position = vlm.new_cache(), 0
    for _, _, ids, visual in kept:
        _, position = vlm.forward(compacted, position, ids, visual)
    assert stream.next_position == position
    assert [(s.start, s.end) for s in stream.segments][0] == (0, len(parts[0][2]))
    torch.testing.assert_close(
        stream.cache.layers[0].keys, compacted.layers[0].keys, rtol=1e-4, atol=1e-5
    )
    torch.testing.assert_close(
        next_logits(vlm, stream.cache, stream.next_position, question),
        next_logits(vlm, compacted, position, question),
        rtol=1e-4,
        atol=1e-5,
    )


def test_reprefill_rebuilds_the_cache_the_compacted_conversation_gives(adapter):
    vlm = adapter.vlm
    stream, parts = stream_of(adapter, 4, reprefill=True)
    question = vlm.tokenize(QUESTION)
    eviction = stream.make_room(len(question), stream.length, min_frames=1)
    kept = [parts[0]] + parts[3:]
    assert eviction.frame_ids == ["f0"]
    assert eviction.reprefilled == stream.length == sum(len(ids) for _, _, ids, _ in kept)
    compacted, position = vlm.new_cache(), 0
    for _, _, ids, visual in kept:
        _, position = vlm.forward(compacted, position, ids, visual)
    assert stream.next_position == position
    torch.testing.assert_close(
        next_logits(vlm, stream.cache, stream.next_position, question),
        next_logits(vlm, compacted, position, question),
        rtol=1e-4,
        atol=1e-5,
    )
    # Only what is in the cache is kept to rebuild it.
    assert sum(len(s.media) for s in stream.segments) == 3


@pytest.mark.parametrize("policy", ["evict-oldest", "reprefill"])
def test_a_full_cache_evicts_the_oldest_frames_and_says_so(parrot, adapter, policy):
    """A bound of the preamble, the standby decision and two frame units: from the third
    frame on, each frame evicts the oldest frame and the decision after it."""
    preamble = byte_tokens(adapter.chat.preamble())
    standby = byte_tokens(adapter.chat.first_standby_step()) + byte_tokens(AFTER_ANSWER) + 2
    turn = byte_tokens(ASSISTANT_TURN) + byte_tokens(AFTER_ANSWER) + 2
    unit = frame_tokens(adapter, 0.0, 0) + turn  # labels "Frame at 0s:" .. "Frame at 8s:"
    bound = preamble + standby + frame_tokens(adapter, 0.0, 0) + unit
    evicting = parrot(
        wait_word="!", max_tokens_proactive=2, cache_max_tokens=bound, cache_policy=policy
    )
    assert evicting.conditions.settings == {
        "cache_policy": policy,
        "cache_max_tokens": bound,
        "context_tokens": 4096,
        "visual_tokens": 768,
        "input_mode": "images",
        "evict_frames": 1,
    }
    assert f"at most {bound} tokens" in evicting.conditions.history
    # Pretend positions past 150 are out of the model's range: gaps are then closed.
    evicting.vlm.max_context = 150
    wire, session = run_steps(evicting, 5)
    assert [m["step"] for m in wire.of("silent")] == [0, 1, 2, 3, 4]
    records = [
        (m["kind"], m["frame_ids"]) for m in wire.of("workload") if m["kind"] != "model_call"
    ]
    assert records == [
        ("state_commit", []),
        ("state_commit", ["f0"]),
        ("state_commit", ["f1"]),
        ("evict", ["f0"]),
        ("state_commit", ["f2"]),
        ("evict", ["f1"]),
        ("state_commit", ["f3"]),
        ("evict", ["f2"]),
        ("state_commit", ["f4"]),
    ]
    stream = session.state["stream"]
    # The first frame's unit leaves the standby decision behind: it is pinned.
    assert [s.kind for s in stream.segments] == [
        "pinned",
        "pinned",
        "frame",
        "turn",
        "frame",
        "turn",
    ]
    assert [s.frame_ids for s in stream.segments if s.kind == "frame"] == [("f3",), ("f4",)]
    evictions = wire.workloads("evict")
    assert {e["images"] for e in evictions} == {1}
    assert all(e["started_ns"] <= e["ended_ns"] for e in evictions)
    if policy == "evict-oldest":
        assert {e["input_tokens"] for e in evictions} == {0}
        assert stream.repositions > 0
        ends = [0] + [s.end for s in stream.segments]
        assert [s.start for s in stream.segments] == ends[:-1]  # no gaps left
        assert stream.next_position == ends[-1]
    else:
        assert [e["input_tokens"] for e in evictions] == [stream.length - unit] * 3
    assert stream.length <= bound + turn


# ------------------------------------------------------------------ video input


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_video_chunks_appended_one_by_one_equal_one_pass(family, tiny_model, tmp_path):
    """Chunks of frames go through the video path: groups of two frames (the last repeated
    to fill a group) share each visual token; a chunk's block is `vision_start`, its video
    tokens (Qwen3-VL: a timestamp before each group's), `vision_end`. Committed chunk by
    chunk, among images and text, the cache equals one pass over the whole sequence."""
    model = tiny_model if family == "qwen2_vl" else build_tiny_model(tmp_path, family)
    adapter = configured(model, input_mode="video", chunk_frames=4)
    vlm = adapter.vlm
    rng = np.random.default_rng(0)
    rgbs = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(6)]
    four = vlm.encode_chunk(rgbs[:4], [0.0, 0.5, 1.0, 1.5], fps=2.0)
    one = vlm.encode_chunk(rgbs[4:5], [2.0], fps=2.0)  # a partial chunk: padded to two
    image = vlm.encode_frame(rgbs[5])
    assert (four.grid_thw.tolist(), one.grid_thw.tolist()) == ([[2, 4, 4]], [[1, 4, 4]])
    frame_pixels = (4 * vlm.image_processor.patch_size) ** 2  # 4x4 patches
    assert (four.modality, four.pixels, one.pixels) == ("video", 4 * frame_pixels, 2 * frame_pixels)
    if family == "qwen3_vl":
        stamps = byte_tokens("<0.2 seconds>") + byte_tokens("<1.2 seconds>")
        assert len(four.token_ids) == 2 * IMAGE_TOKENS + stamps
    else:
        assert len(four.token_ids) == 2 * 4 + 2 and len(one.token_ids) == 4 + 2
    # A chunk of one frame twice holds what the image of that frame holds.
    twice = vlm.encode_chunk([rgbs[5], rgbs[5]], [0.0, 0.0], fps=2.0)
    assert torch.equal(twice.pixel_values, image.pixel_values)

    chunks = [
        (vlm.tokenize(adapter.chat.preamble()), None),
        (vlm.tokenize(adapter._chunk_label(0.0, 2.0)), None),
        (four.token_ids, four),
        (vlm.tokenize(adapter._chunk_label(2.0, 2.5)) + one.token_ids, one),
        (vlm.tokenize(adapter.chat.label(3.0, 5)) + image.token_ids, image),
        (vlm.tokenize(adapter.chat.question(3.0, "Which?", ["A. one"])), None),
    ]
    cache, position = vlm.new_cache(), 0
    for ids, visual in chunks:
        logits, position = vlm.forward(cache, position, ids, visual)
    whole = torch.tensor([[t for ids, _ in chunks for t in ids]])
    types = (whole == vlm.image_token_id).int() + 2 * (whole == vlm.video_token_id).int()
    seconds = {"second_per_grid_ts": torch.tensor([1.0, 1.0])} if family == "qwen2_5_vl" else {}
    with torch.inference_mode():
        reference = vlm.model(
            input_ids=whole,
            pixel_values=image.pixel_values,
            image_grid_thw=image.grid_thw,
            pixel_values_videos=torch.cat([four.pixel_values, one.pixel_values]),
            video_grid_thw=torch.cat([four.grid_thw, one.grid_thw]),
            mm_token_type_ids=types,
            **seconds,
        ).logits[0, -1]
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-5)


def test_in_video_mode_frames_are_committed_a_chunk_at_a_time(parrot):
    """Full chunks as they fill; a partial chunk before a decision, so the model sees
    every delivered frame when it decides."""
    adapter = parrot(input_mode="video", chunk_frames=4, wait_word="!", max_tokens_proactive=2)
    assert adapter.conditions.settings["input_mode"] == "video"
    assert adapter.conditions.settings["chunk_frames"] == 4
    wire = Wire()
    session = new_session(wire)  # 0.5 fps: a frame every 2 s

    async def go() -> None:
        await adapter.on_session_start(session)
        respond = Responder(wire.send, "task")
        for index in range(6):
            await adapter.on_frame(session, jpeg_frame(index))
        await adapter.on_step(session, Step(task_id="task", step=0, t=10.0), respond)

    asyncio.run(go())
    commits = [c for c in wire.workloads("state_commit") if c["images"]]
    assert [(c["frame_ids"], c["images"]) for c in commits] == [
        (["f0", "f1", "f2", "f3"], 4),
        (["f4", "f5"], 2),
    ]
    # Each chunk's span: its first frame's time to its last one's plus a frame interval.
    labels = [byte_tokens("Time=0.0-8.0s"), byte_tokens("Time=8.0-12.0s")]
    assert [c["input_tokens"] for c in commits] == [labels[0] + 2 * 4 + 2, labels[1] + 4 + 2]
    assert [c["pixels"] for c in commits] == [4 * FRAME_PIXELS, 2 * FRAME_PIXELS]
    assert [m["step"] for m in wire.of("silent")] == [0]


def test_a_longer_first_chunk_and_one_decision_per_chunk(parrot):
    """LiveCC's schedule: a first chunk of 6 frames, then chunks of 2; the model decides
    once per committed chunk, and the steps in between are silent without a model call."""
    adapter = parrot(
        input_mode="video",
        chunk_frames=2,
        first_chunk_frames=6,
        decide_at="chunk",
        wait_word="!",
        max_tokens_proactive=2,
    )
    settings = adapter.conditions.settings
    assert (settings["first_chunk_frames"], settings["decide_at"]) == (6, "chunk")
    wire = Wire()
    session = new_session(wire)

    async def go() -> None:
        await adapter.on_session_start(session)
        respond = Responder(wire.send, "task")
        for index in range(10):
            await adapter.on_frame(session, jpeg_frame(index))
            await adapter.on_step(session, Step(task_id="task", step=index, t=2.0 * index), respond)

    asyncio.run(go())
    commits = [c["frame_ids"] for c in wire.workloads("state_commit") if c["images"]]
    assert commits == [[f"f{i}" for i in range(6)], ["f6", "f7"], ["f8", "f9"]]
    # Every step was decided; the model ran at the steps right after each chunk.
    assert [m["step"] for m in wire.of("silent")] == list(range(10))
    assert len(wire.workloads("model_call")) == 3


def test_the_livecc_preset_runs_livecc_s_streaming_format(parrot):
    """The streaming-native preset on the tiny model: at 2 fps the first chunk is 0-3 s,
    then one chunk and one decision per second, after Qwen2-VL's default system turn."""
    options = read_config_file("livecc-7b")
    assert options.pop("model") == "chenjoya/LiveCC-7B-Instruct"
    adapter = parrot(**options)
    wire = Wire()
    conditions = new_session(wire).conditions.model_copy(update={"fps": 2.0})
    session = Session("run", "s", ["r"], conditions, wire.send)

    def frame(index: int) -> Frame:
        return dataclasses.replace(
            jpeg_frame(index % 6), index=index, frame_id=f"f{index}", t=index / 2
        )

    async def go() -> None:
        await adapter.on_session_start(session)
        respond = Responder(wire.send, "task")
        instruction = Instruction(task_id="task", t=0.0, text="Comment on the match.")
        await adapter.on_instruction(session, instruction, respond)
        for index in range(10):
            await adapter.on_frame(session, frame(index))
            await adapter.on_step(session, Step(task_id="task", step=index, t=index / 2), respond)

    asyncio.run(go())
    preamble, instruction, *chunks = wire.workloads("state_commit")
    system = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    assert preamble["input_tokens"] == byte_tokens(system)
    assert instruction["input_tokens"] == byte_tokens("Comment on the match.\n")
    assert [c["frame_ids"] for c in chunks] == [
        [f"f{i}" for i in range(6)],
        ["f6", "f7"],
        ["f8", "f9"],
    ]
    labels = ["Time=0.0-3.0s", "Time=3.0-4.0s", "Time=4.0-5.0s"]
    assert [c["input_tokens"] for c in chunks] == [
        byte_tokens(labels[0]) + 3 * 4 + 2,
        byte_tokens(labels[1]) + 4 + 2,
        byte_tokens(labels[2]) + 4 + 2,
    ]
    # One model decision per chunk, at the step right after it; the rest are silent.
    assert len(wire.workloads("model_call")) == 3
    assert (len(wire.of("response_start")), len(wire.of("silent"))) == (3, 7)
    assert adapter.conditions.settings == {
        "cache_policy": "evict-oldest",
        "cache_max_tokens": adapter.cache_max_tokens,
        "context_tokens": adapter.context_tokens,
        "visual_tokens": 384,
        "input_mode": "video",
        "chunk_frames": 2,
        "first_chunk_frames": 6,
        "decide_at": "chunk",
        "evict_frames": 1,
    }


def test_chunk_schedules_apply_to_video_mode_only(tiny_model):
    with pytest.raises(AdapterConfigError, match="apply to input_mode: video only"):
        load_adapter("transformers", {"model": str(tiny_model), "decide_at": "chunk"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"input_mode": "video", "chunk_frames": 3}, "chunk_frames: 3 is not a multiple of"),
        (
            {"input_mode": "video", "first_chunk_frames": 5},
            "first_chunk_frames: 5 is not a multiple of",
        ),
        ({"chunk_label": "{t}"}, "chunk_label: bad template"),
        ({"stop_words": [""]}, "stop_words: a stop word must not be empty"),
        ({"cache_max_tokens": 5000}, "cache_max_tokens: 5000 is not between 1 and"),
    ],
)
def test_bad_video_and_cache_options_are_one_clear_error(tiny_model, options, message):
    with pytest.raises(AdapterConfigError, match=message):
        load_adapter("transformers", {"model": str(tiny_model), **options})


@pytest.fixture
def dots(tiny_model: Path):
    """The tiny model saying "." forever (its output layer: no weights, a bias for ".")."""

    def build(**options) -> TransformersAdapter:
        built = configured(tiny_model, **options)
        head = built.vlm.model.lm_head
        dot = built.vlm.tokenize(".")[0]
        biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        with torch.no_grad():
            biased.weight.zero_()
            biased.bias.zero_()
            biased.bias[dot] = 1.0
        built.vlm.model.lm_head = biased
        return built

    return build


@pytest.mark.parametrize("wait_word", ["...", "<silent>"])
def test_a_stop_word_ends_the_reply_and_dots_are_silence_when_they_are_the_wait_word(
    dots, wait_word
):
    adapter = dots(stop_words=["..."], wait_word=wait_word, max_tokens_proactive=8)
    wire, session = run_steps(adapter, 2)
    if wait_word == "...":
        assert [m["step"] for m in wire.of("silent")] == [0, 1]
    else:  # "." cannot begin "<silent>": the reply goes out as it is generated
        assert [(f["text"], f["output_tokens"]) for f in wire.of("response_final")] == [
            ("...", 3)
        ] * 2
    assert [c["output_tokens"] for c in wire.workloads("model_call")] == [3, 3]
    # The word stays in context: the reply's three tokens, then the turn change.
    turn = byte_tokens(ASSISTANT_TURN) + byte_tokens(AFTER_ANSWER)
    assert wire.workloads("model_call")[1]["input_tokens"] == turn


def test_a_video_mode_run_through_the_core(tiny_model, tmp_path):
    """Served in video mode: every delivered frame is committed, in chunks of two until a
    question needs the odd one still pending, and the run finishes; decisions follow the
    chunks (decide_at's default in video mode), so a step never commits a frame alone."""
    options = {
        "model": str(tiny_model),
        "max_tokens_qa": 4,
        "max_tokens_proactive": 4,
        "input_mode": "video",
        "chunk_frames": 2,
    }
    with AdapterProcess("transformers", options=options) as process:
        events = run_core(process.url, "trace", tmp_path)
    for session in events.values():
        hello = next(e for e in session if e.kind == EventKind.ADAPTER_HELLO)
        assert hello.payload.conditions.settings["input_mode"] == "video"
        frames = [e.payload.frame_id for e in session if e.kind == EventKind.FRAME_SENT]
        commits = [c["frame_ids"] for c in workloads(session, "state_commit") if c["images"]]
        assert [f for chunk in commits for f in chunk] == frames
        assert {len(chunk) for chunk in commits} <= {1, 2}
        steps = [e.payload.step for e in session if e.kind == EventKind.STEP_SENT]
        assert_one_decision_per_step(session, steps)
    # QA: 13 frames, no decision before the question: six chunks of two, then the last
    # frame alone, committed before the question.
    qa = [c["frame_ids"] for c in workloads(events["t:qa:1"], "state_commit") if c["images"]]
    assert [len(chunk) for chunk in qa] == [2] * 6 + [1]
    # Proactive: no question, so every chunk is a whole pair of frames.
    proactive = workloads(events["t:pro:1"], "state_commit")
    assert {len(c["frame_ids"]) for c in proactive if c["images"]} == {2}
