"""The transformers adapter's decoding (issue 36) on the tiny random Qwen2-VL: Hugging Face's
repetition penalty over the token ids in the session's cache, seeded sampling that a rerun
repeats, greedy decoding unchanged, the presets' decoding in the hello; and video mode
committing whole chunks when a step comes with every frame.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.model_stack import require_model_stack

require_model_stack()
pytestmark = pytest.mark.models

import torch  # noqa: E402
from transformers.generation.logits_process import (  # noqa: E402
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from streameval.adapters.hf.decoding import Decoding, TokenChooser, penalise, warp  # noqa: E402
from streameval.adapters.hf.stream import StreamState  # noqa: E402
from streameval.adapters.registry import build_adapter  # noqa: E402
from streameval.adapters.sdk import Responder  # noqa: E402
from streameval.protocol import Question, Step  # noqa: E402
from tests.recording import Wire  # noqa: E402
from tests.test_transformers_adapter import (  # noqa: E402
    configured,
    jpeg_frame,
    new_session,
    run_steps,
)
from tests.tiny_qwen2vl import build_tiny_model  # noqa: E402

PENALTY = 1.3


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2vl"))


def test_the_penalty_and_warpers_are_hugging_face_s():
    """Against transformers' own logits processors, on scores of both signs."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(64, generator=generator) * 3
    ids = torch.tensor([[3, 7, 7, 12, 40, 63]])
    in_context = torch.zeros(64, dtype=torch.bool)
    in_context[ids[0]] = True
    theirs = RepetitionPenaltyLogitsProcessor(PENALTY)(ids, scores[None].clone())[0]
    assert torch.equal(penalise(scores, in_context, PENALTY), theirs)
    warped = scores[None].clone()
    for warper in (TemperatureLogitsWarper(0.7), TopKLogitsWarper(10), TopPLogitsWarper(0.8)):
        warped = warper(ids, warped)
    assert torch.equal(warp(scores, 0.7, 10, 0.8), warped[0])


def test_the_penalty_reads_the_token_ids_in_the_cache(tiny_model: Path):
    """The context of the penalty is every token id in the cache; an evicted block's ids
    leave it. Each penalised logit is the formula's, the others are untouched."""
    vlm = configured(tiny_model).vlm
    stream = StreamState(vlm, track_ids=True)
    kept, evicted = vlm.tokenize("kept text"), vlm.tokenize("QZ!")
    assert not set(kept) & set(evicted)
    stream.begin("pinned")
    stream.append(kept)
    stream.begin("frame", ("f0",))
    logits = stream.append(evicted)
    in_context = stream.in_context()
    assert in_context.nonzero().flatten().tolist() == sorted(set(kept + evicted))
    scores = logits.float()
    penalised = penalise(scores, in_context, PENALTY)
    for token in range(scores.numel()):
        score = scores[token]
        if token in kept or token in evicted:
            expected = score * PENALTY if score < 0 else score / PENALTY
        else:
            expected = score
        assert penalised[token] == expected
    assert stream.make_room(0, len(kept)) is not None  # the frame block goes
    assert stream.in_context().nonzero().flatten().tolist() == sorted(set(kept))


def test_greedy_without_a_penalty_is_the_argmax_as_before():
    logits = torch.tensor([0.5, 2.0, -1.0, 2.0])
    chooser = TokenChooser(Decoding(), "cpu")
    assert chooser.generator is None
    assert chooser.choose(logits, None) == 1  # the first of equal maxima, as argmax
    # A penalty moves the choice: 2.0 / 1.5 for the token in context, below the other.
    in_context = torch.tensor([False, True, False, False])
    assert TokenChooser(Decoding(repetition_penalty=1.5), "cpu").choose(logits, in_context) == 3


def messages(wire: Wire) -> list[tuple]:
    """What a session said, without timings."""
    said = [(m["type"], m.get("text"), m.get("step")) for m in wire.messages]
    return said + [(c["output_tokens"],) for c in wire.workloads("model_call")]


def test_sampling_is_seeded_per_session_so_a_rerun_draws_the_same(tiny_model: Path):
    options = {"temperature": 1.0, "top_k": 50, "top_p": 0.95, "max_tokens_proactive": 6}
    first, _ = run_steps(configured(tiny_model, seed=5, **options), 3)
    again, _ = run_steps(configured(tiny_model, seed=5, **options), 3)
    other, _ = run_steps(configured(tiny_model, seed=6, **options), 3)
    assert messages(first) == messages(again)
    assert messages(first) != messages(other)
    greedy, _ = run_steps(configured(tiny_model, max_tokens_proactive=6), 3)
    unpenalised, _ = run_steps(
        configured(tiny_model, max_tokens_proactive=6, repetition_penalty=1.0), 3
    )
    assert messages(greedy) == messages(unpenalised)


def test_the_livecc_preset_declares_its_decoding_in_its_hello(tiny_model: Path):
    adapter = build_adapter("transformers", "livecc-7b", [f"model={tiny_model}"])
    settings = adapter.conditions.settings
    assert (settings["repetition_penalty"], settings["max_tokens_proactive"]) == (1.15, 32)
    assert (settings["max_tokens_qa"], settings["stop_words"]) == (32, '[" ..."]')
    assert "temperature" not in settings  # greedy, the default: recorded by its absence


@pytest.mark.parametrize(("decide_at", "chunk"), [(None, 4), ("step", 2)])
def test_video_mode_with_a_step_per_frame_commits_whole_chunks(tiny_model, decide_at, chunk):
    """A step at every frame: by default the model decides once per chunk, and each chunk
    is committed whole; with decide_at step the pending frames go at each step, but only in
    whole temporal patches (2 frames), never one frame repeated. A question commits the odd
    frame still waiting: it must see every delivered frame."""
    options = {"decide_at": decide_at} if decide_at else {}
    adapter = configured(
        tiny_model, input_mode="video", chunk_frames=4, wait_word="!", max_tokens_proactive=2,
        **options,
    )  # fmt: skip
    assert adapter.conditions.settings["decide_at"] == (decide_at or "chunk")
    wire = Wire()
    session = new_session(wire)

    async def go() -> None:
        await adapter.on_session_start(session)
        respond = Responder(wire.send, "task")
        for index in range(9):
            await adapter.on_frame(session, jpeg_frame(index))
            await adapter.on_step(session, Step(task_id="task", step=index, t=2.0 * index), respond)
        question = Question(task_id="q", t=16.0, text="Which?", options=["A. a", "B. b"])
        await adapter.on_question(session, question, Responder(wire.send, "q"))

    asyncio.run(go())
    commits = [c for c in wire.workloads("state_commit") if c["images"]]
    sizes = [c["images"] for c in commits]
    assert sizes == [chunk] * (8 // chunk) + [1]  # the last one: f8, at the question
    assert commits[-1]["frame_ids"] == ["f8"]
    per_frame = commits[0]["pixels"] // chunk
    assert [c["pixels"] for c in commits] == [chunk * per_frame] * (8 // chunk) + [2 * per_frame]
    decisions = len(wire.workloads("model_call")) - 1  # the question's call aside
    assert decisions == (2 if decide_at is None else 9)
