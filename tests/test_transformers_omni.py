"""The transformers adapter on a tiny random Qwen2.5-Omni thinker: it hears the stream.

The thinker is built in the test from a config and an offline byte-level tokenizer
(tests/tiny_qwen_omni.py). Its sound is real PCM (tones, 16 kHz mono int16) delivered in the
Core's 0.5 s chunks between frames, as the Core sends them: each chunk just before the first
frame or question at or after its end.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.model_stack import require_model_stack

os.environ["HF_HUB_OFFLINE"] = "1"
require_model_stack()
pytestmark = pytest.mark.models  # .ci/run runs these in its model-stack venv

import torch  # noqa: E402

from streameval.adapters.sdk import AudioChunk, Responder, Session  # noqa: E402
from streameval.adapters.transformers_adapter import (  # noqa: E402
    TransformersAdapter,
    TransformersAdapterConfig,
)
from streameval.events import EventKind  # noqa: E402
from streameval.protocol import AudioConditions, Question  # noqa: E402
from tests.recording import Wire  # noqa: E402
from tests.test_transformers_adapter import jpeg_frame, new_session  # noqa: E402
from tests.tiny_qwen_omni import build_tiny_omni  # noqa: E402

RATE = 16_000
CHUNK_S = 0.5
QUESTION = Question(task_id="q", t=4.5, text="What do you hear?", options=[])


@pytest.fixture(scope="module")
def tiny_omni(tmp_path_factory) -> Path:
    return build_tiny_omni(tmp_path_factory.mktemp("tiny-omni"))


@pytest.fixture(scope="module")
def omni(tiny_omni: Path) -> TransformersAdapter:
    return TransformersAdapter(TransformersAdapterConfig(model=str(tiny_omni), max_tokens_qa=8))


def tone(hz: float, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def chunks_of(sound: np.ndarray) -> list[AudioChunk]:
    size = int(CHUNK_S * RATE)
    return [
        AudioChunk(
            k, k * CHUNK_S, (k + 1) * CHUNK_S, RATE, sound[k * size : (k + 1) * size].tobytes()
        )
        for k in range(len(sound) // size)
    ]


def hearing_session(wire: Wire) -> Session:
    return new_session(wire, AudioConditions(sample_rate=RATE, chunk_s=CHUNK_S))


async def stream(adapter: TransformersAdapter, session: Session, sound: np.ndarray) -> None:
    """Frames at 0, 2 and 4 s, the sound's chunks each before the first frame at or after
    its end, then the chunk that ends at the question's 4.5 s."""
    await adapter.on_session_start(session)
    chunks = chunks_of(sound)
    for index in range(3):
        frame = jpeg_frame(index)
        while chunks and chunks[0].t <= frame.t:
            await adapter.on_audio(session, chunks.pop(0))
        await adapter.on_frame(session, frame)
    for chunk in chunks:
        await adapter.on_audio(session, chunk)


def test_only_a_model_that_hears_consumes_audio(omni, tmp_path):
    from tests.tiny_qwen2vl import build_tiny_model

    assert omni.consumes_audio is True and omni.info()["audio"] is True
    deaf = TransformersAdapter(TransformersAdapterConfig(model=str(build_tiny_model(tmp_path))))
    assert deaf.consumes_audio is False and deaf.info()["audio"] is False
    assert "sound in audio blocks of at most 2 s" in omni.conditions.history


def test_an_audio_block_is_featurised_as_the_processor_featurises_the_sound(omni):
    vlm = omni.vlm
    sound = tone(440, 0.5)
    block = vlm.encode_audio(sound, RATE)
    # The processor's way: padded to its 300-s window, the mask says which frames are sound.
    reference = vlm.feature_extractor(
        sound.astype(np.float32) / 32768.0,
        sampling_rate=RATE,
        padding="max_length",
        return_attention_mask=True,
        return_tensors="pt",
    )
    frames = int(reference["attention_mask"].sum())
    assert frames == 50  # one per 10 ms
    torch.testing.assert_close(block.features, reference["input_features"][0, :, :frames])
    # 25 audio tokens a second, less the encoder's rounding per block.
    assert (block.tokens, block.seconds) == (12, 0.5)
    assert vlm.encode_audio(tone(440, 2.0), RATE).tokens == 50
    assert vlm.encode_audio(tone(440, 0.02), RATE) is None  # no token in 20 ms


def reference_answer(
    adapter: TransformersAdapter, sound: np.ndarray
) -> tuple[list[int], torch.Tensor]:
    """Greedy decoding by full forward passes over the whole conversation, positions from
    the model's own rule, no cache: the token ids the adapter must answer with, and the
    first token's logits."""
    vlm, chat = adapter.vlm, adapter.config.chat_format(sound=True)
    frames = [jpeg_frame(index) for index in range(3)]
    visuals = [vlm.encode_frame(frame.rgb()) for frame in frames]
    size = int(2.0 * RATE)  # a block per 2-s encoder window, the rest before the question
    audios = [vlm.encode_audio(sound[start : start + size], RATE) for start in (0, size)]
    audios.append(vlm.encode_audio(sound[2 * size :], RATE))
    labels = ["Audio from 0s to 2s:", "Audio from 2s to 4s:", "Audio from 4s to 4.5s:"]
    heard = [
        vlm.tokenize(label) + audio.token_ids for label, audio in zip(labels, audios, strict=True)
    ]
    ids = vlm.tokenize(chat.preamble())
    for index, (frame, visual) in enumerate(zip(frames, visuals, strict=True)):
        if index:
            ids += heard[index - 1]
        ids += vlm.tokenize(chat.label(frame.t, index)) + visual.token_ids
    ids += heard[2]
    ids += vlm.tokenize(chat.question(QUESTION.t, QUESTION.text, QUESTION.options))
    inputs = {
        "pixel_values": torch.cat([v.pixel_values for v in visuals]),
        "image_grid_thw": torch.cat([v.grid_thw for v in visuals]),
        **vlm.audio_inputs(audios),
    }
    answer: list[int] = []
    first = None
    while len(answer) < adapter.config.max_tokens_qa:
        whole = torch.tensor([ids + answer])
        with torch.inference_mode():
            logits = vlm.model(
                input_ids=whole, attention_mask=torch.ones_like(whole), **inputs
            ).logits[0, -1]
        logits = logits.index_fill(0, vlm.unspeakable, -torch.inf)
        first = logits if first is None else first
        token = int(logits.argmax())
        if token in vlm.stop_ids:
            break
        answer.append(token)
    return answer, first


def ask(adapter: TransformersAdapter, sound: np.ndarray) -> tuple[Wire, Session]:
    wire = Wire()
    session = hearing_session(wire)

    async def go() -> None:
        await stream(adapter, session, sound)
        await adapter.on_question(session, QUESTION, Responder(wire.send, "q"))

    asyncio.run(go())
    return wire, session


def test_the_answer_from_sound_and_frames_equals_greedy_full_forward_passes(omni):
    sound = tone(440, 4.5)
    wire, _ = ask(omni, sound)
    expected, _ = reference_answer(omni, sound)
    (final,) = wire.of("response_final")
    assert len(expected) == omni.config.max_tokens_qa  # a whole answer, not an early stop
    assert final["text"] == omni.vlm.detokenize(expected)
    assert final["output_tokens"] == len(expected)
    # Sound commits: a block per full 2-s encoder window, as the chunks arrive, and the
    # last half second before the question. Each block: its label ("Audio from 0s to 2s:",
    # a token a byte), its audio tokens and two markers.
    heard = [
        (c["audio_seconds"], c["audio_tokens"], c["input_tokens"])
        for c in wire.workloads("state_commit")
        if c.get("audio_seconds") is not None
    ]
    assert heard == [(2.0, 50, 20 + 52), (2.0, 50, 20 + 52), (0.5, 12, 22 + 14)]
    # In stream order: preamble, frame 0, sound to 2 s, frame 1, sound to 4 s, frame 2, the
    # last half second.
    commits = [
        "audio" if c.get("audio_seconds") else len(c["frame_ids"])
        for c in wire.workloads("state_commit")
    ]
    assert commits == [0, 1, "audio", 1, "audio", 1, "audio"]


def test_the_answer_depends_on_what_is_heard(omni):
    def first_logits(sound: np.ndarray) -> torch.Tensor:
        wire = Wire()
        session = hearing_session(wire)
        asyncio.run(stream(omni, session, sound))
        prompt = omni.config.chat_format(sound=True).question(
            QUESTION.t, QUESTION.text, QUESTION.options
        )
        asyncio.run(omni._commit_audio(session))
        return session.state["stream"].append(omni.vlm.tokenize(prompt))

    low, high = first_logits(tone(220, 4.5)), first_logits(tone(3000, 4.5))
    speakable = torch.isfinite(low)
    # The same sound again gives the same logits; another sound moves them far past that.
    torch.testing.assert_close(first_logits(tone(220, 4.5)), low, rtol=0, atol=1e-6)
    assert float((low - high)[speakable].abs().max()) > 1e-4
    _, reference = reference_answer(omni, tone(3000, 4.5))
    torch.testing.assert_close(high, reference, rtol=1e-4, atol=1e-5)


def test_a_silent_chunk_costs_nothing(omni):
    wire = Wire()
    session = hearing_session(wire)
    silence = AudioChunk(0, 0.0, 0.5, RATE, bytes(int(CHUNK_S * RATE) * 2), silent=True)

    async def go() -> None:
        await omni.on_session_start(session)
        await omni.on_audio(session, silence)
        await omni.on_frame(session, jpeg_frame(0))

    asyncio.run(go())
    assert [c.get("audio_seconds") for c in wire.workloads("state_commit")] == [None, None]


def test_the_released_layout_loads_the_thinker_s_weights(tmp_path):
    from safetensors.torch import load_file

    model = build_tiny_omni(tmp_path, released_layout=True)
    adapter = TransformersAdapter(TransformersAdapterConfig(model=str(model)))
    saved = load_file(model / "model.safetensors")
    assert not any(name.startswith(("talker", "token2wav")) for name in saved)
    assert type(adapter.vlm.model).__name__ == "Qwen2_5OmniThinkerForConditionalGeneration"
    torch.testing.assert_close(adapter.vlm.model.lm_head.weight, saved["thinker.lm_head.weight"])
    assert adapter.consumes_audio


def test_the_omni_preset_serves_the_thinker_with_qwen_s_system_prompt(tiny_omni):
    from streameval.adapters.registry import build_adapter

    adapter = build_adapter("transformers", "qwen2.5-omni-7b", [f"model={tiny_omni}"])
    assert adapter.consumes_audio
    assert adapter.conditions.model_name == "Qwen2.5-Omni-7B"
    assert adapter.chat.preamble().startswith("<|im_start|>system\nYou are Qwen, a virtual human")


# ------------------------------------------------------------------ through the Core


def replayed(
    adapter: TransformersAdapter, session_events: list, video: Path, cache: Path, config: dict
) -> str:
    """What the in-process adapter answers when fed what the Core sent, in its order: the
    JPEGs from the Core's frame cache, the PCM decoded from the video as the Core does."""
    from streameval.adapters.sdk import Frame
    from streameval.core.frames.audio_track import decode_audio
    from streameval.core.frames.cache import FrameCache
    from streameval.core.frames.types import ImageRules

    rules = ImageRules(config["fps"], config["max_width"], config["jpeg_quality"])
    frames = FrameCache(cache / "frames").lookup(video, rules)
    track = decode_audio(video, RATE)
    wire = Wire()
    session = hearing_session(wire)

    async def go() -> None:
        await adapter.on_session_start(session)
        for event in session_events:
            sent = event.payload
            if event.kind == EventKind.FRAME_SENT:
                (ref,) = frames.between(sent.t, sent.t)
                frame = Frame(
                    sent.index, sent.frame_id, sent.t, sent.width, sent.height, frames.read(ref)
                )
                await adapter.on_frame(session, frame)
            elif event.kind == EventKind.AUDIO_SENT:
                pcm, silent = track.chunk(sent.index, CHUNK_S)
                await adapter.on_audio(
                    session, AudioChunk(sent.index, sent.start_t, sent.t, RATE, pcm, silent)
                )
            elif event.kind == EventKind.QUESTION_SENT:
                asked = Question(
                    task_id=sent.task_id, t=sent.t, text=sent.text, options=sent.options
                )
                await adapter.on_question(session, asked, Responder(wire.send, sent.task_id))

    asyncio.run(go())
    (final,) = wire.of("response_final")
    return final["text"]


def test_a_run_through_the_core_streams_the_sound_into_the_served_thinker(
    tiny_omni, omni, tmp_path
):
    """A real H.264 + AAC video (a 440 Hz tone over 1-2 s), the Core streaming its frames at
    1 fps and its sound in 0.5-s chunks to the thinker served in its own process."""
    from streameval.core.benchmark.records import Benchmark, QARecord
    from streameval.core.launch.adapter_process import AdapterProcess
    from streameval.core.store.store import Store
    from tests.sound_fixtures import write_sound_video
    from tests.test_cli import streameval
    from tests.test_core_run import events_by_session

    video = tmp_path / "tone.mp4"
    write_sound_video(video, seconds=4, tone=(1.0, 2.0))
    record = QARecord(
        record_id="tone", source_id="tone", source_benchmark="test", task_type="sound",
        video_path="tone.mp4", question="What did you hear?", options=("A. a tone", "B. nothing"),
        answer="A", question_time_s=3.2, evidence_anchor_s=3.2, needs_audio=True,
    )  # fmt: skip
    benchmark = tmp_path / "benchmark.json"
    benchmark.write_text(
        Benchmark(name="sound", version="1", video_root=".", records=[record]).model_dump_json()
    )
    store = f"sqlite:///{tmp_path / 's.db'}"
    options = {"model": str(tiny_omni), "max_tokens_qa": 8}
    with AdapterProcess("transformers", options=options) as served:
        ran = streameval(
            "run", "--adapter-url", served.url, "--benchmark", str(benchmark),
            "--cache-dir", str(tmp_path / "cache"), "--store", store, "--json",
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert (summary["finished"], summary["failed"]) == (1, 0)
    with Store(store, read_only=True) as read:
        config = read.get_run(summary["run_id"]).config
        (events,) = events_by_session(read, summary["run_id"]).values()
    assert config["modalities"] == ["video", "audio"]
    hello = next(e for e in events if e.kind == EventKind.ADAPTER_HELLO)
    assert hello.payload.audio is True

    # Chunks 0-5 (to 3 s: the one ending at 3.5 s comes after the question), two before
    # each frame after the first; each pair is one 1-s block (25 audio tokens and its two
    # markers), committed before the frame that follows it.
    sent = [e.payload.index for e in events if e.kind == EventKind.AUDIO_SENT]
    assert sent == list(range(6))
    commits = [
        e.payload
        for e in events
        if e.kind == EventKind.WORKLOAD and e.payload.kind == "state_commit"
    ]
    layout = [
        (c.audio_seconds, c.audio_tokens, c.input_tokens) if c.audio_seconds else len(c.frame_ids)
        for c in commits
    ]
    block = (1.0, 25, 20 + 27)  # "Audio from 0s to 1s:" and the block
    assert layout == [0, 1, block, 1, block, 1, block, 1]

    # The served answer is the in-process adapter's over the same bytes, whose cache path
    # equals full forward passes (test_the_answer_from_sound_and_frames_equals_greedy_...).
    streamed = [
        e
        for e in events
        if e.kind in (EventKind.FRAME_SENT, EventKind.AUDIO_SENT, EventKind.QUESTION_SENT)
    ]
    (final,) = [e.payload.text for e in events if e.kind == EventKind.RESPONSE_FINAL]
    (tokens,) = [e.payload.output_tokens for e in events if e.kind == EventKind.RESPONSE_FINAL]
    assert tokens == 8  # a whole answer: the limit, no early stop
    assert final == replayed(omni, streamed, video, tmp_path / "cache", config)


def test_a_run_at_another_sample_rate_is_refused_once_and_not_heard(omni):
    wire = Wire()
    session = hearing_session(wire)
    session.conditions = session.conditions.model_copy(
        update={"audio": AudioConditions(sample_rate=8000, chunk_s=CHUNK_S)}
    )

    async def go() -> None:
        await omni.on_session_start(session)
        await omni.on_audio(session, AudioChunk(0, 0.0, 0.5, 8000, tone(440, 0.25).tobytes()))
        await omni.on_frame(session, jpeg_frame(0))

    asyncio.run(go())
    assert wire.of("error") == [
        {
            "type": "error",
            "code": "unsupported",
            "message": "the model hears 16000 Hz sound; this run streams 8000 Hz "
            "(audio_sample_rate)",
            "fatal": True,
        }
    ]
    assert [c.get("audio_seconds") for c in wire.workloads("state_commit")] == [None, None]


def test_audio_blocks_are_evicted_oldest_first_with_the_frames(tiny_omni):
    # Preamble 6 tokens, a frame block 18 (label, 4 visual tokens, 2 markers), a 2-s audio
    # block 72 (label 20, 50 audio tokens, 2 markers): the second audio block finds 114 of
    # 120 tokens taken.
    small = TransformersAdapter(
        TransformersAdapterConfig(model=str(tiny_omni), cache_max_tokens=120, reserve_tokens=0)
    )
    wire = Wire()
    session = hearing_session(wire)
    asyncio.run(stream(small, session, tone(440, 4.5)))
    # The oldest frame block goes, then the sound after it: 114 - 18 - 72 + 72 fits.
    (evicted,) = wire.workloads("evict")
    assert (evicted["frame_ids"], evicted["images"]) == (["f0"], 1)
    state = session.state["stream"]
    assert [s.kind for s in state.segments] == ["pinned", "frame", "audio", "frame"]
    assert [s.frame_ids for s in state.segments if s.kind == "frame"] == [("f1",), ("f2",)]
    assert state.length == 6 + 18 + 72 + 18


def test_video_chunks_among_audio_blocks_equal_one_pass(tiny_omni):
    """Video mode: frames in temporal pairs as Qwen2.5-Omni's video blocks (TMRoPE: 25
    positions a second, 2 / fps seconds a pair), between audio blocks, committed one by one,
    equal one pass over the whole sequence."""
    adapter = TransformersAdapter(
        TransformersAdapterConfig(model=str(tiny_omni), input_mode="video", chunk_frames=4)
    )
    vlm = adapter.vlm
    rng = np.random.default_rng(0)
    rgbs = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(5)]
    four = vlm.encode_chunk(rgbs[:4], [0.0, 0.5, 1.0, 1.5], fps=2.0)
    one = vlm.encode_chunk(rgbs[4:], [2.0], fps=2.0)
    heard = [vlm.encode_audio(tone(hz, 1.0), RATE) for hz in (330, 660)]
    chunks = [
        (vlm.tokenize(adapter.chat.preamble()), None),
        (heard[0].token_ids, heard[0]),
        (vlm.tokenize(adapter._chunk_label(0.0, 2.0)) + four.token_ids, four),
        (heard[1].token_ids, heard[1]),
        (vlm.tokenize(adapter._chunk_label(2.0, 2.5)) + one.token_ids, one),
        (vlm.tokenize(adapter.chat.question(2.5, "Which?", ["A. one"])), None),
    ]
    cache, position = vlm.new_cache(), 0
    for ids, media in chunks:
        logits, position = vlm.forward(cache, position, ids, media)
    whole = torch.tensor([[t for ids, _ in chunks for t in ids]])
    with torch.inference_mode():
        reference = vlm.model(
            input_ids=whole,
            attention_mask=torch.ones_like(whole),
            pixel_values_videos=torch.cat([four.pixel_values, one.pixel_values]),
            video_grid_thw=torch.cat([four.grid_thw, one.grid_thw]),
            video_second_per_grid=torch.tensor([1.0, 1.0]),
            **vlm.audio_inputs(heard),
        ).logits[0, -1]
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-5)


def test_reprefill_rebuilds_frames_and_sound_in_one_pass_as_appended(tiny_omni):
    """Re-prefill runs the kept frame and audio blocks in one forward pass (the thinker's
    rule over images and sound together): the cache is what appending them one by one on a
    fresh cache gives."""
    adapter = TransformersAdapter(
        TransformersAdapterConfig(
            model=str(tiny_omni), cache_policy="reprefill", cache_max_tokens=190
        )
    )
    wire = Wire()
    session = hearing_session(wire)
    asyncio.run(stream(adapter, session, tone(440, 4.5)))
    (evicted,) = wire.workloads("evict")
    state = session.state["stream"]
    # Frame 2 finds 186 of 190 tokens taken: the oldest frame goes, and the preamble, both
    # 2-s audio blocks and frame 1 are rebuilt in one pass.
    assert (evicted["frame_ids"], evicted["input_tokens"]) == (["f0"], 6 + 72 + 18 + 72)
    assert [s.kind for s in state.segments] == ["pinned", "audio", "frame", "audio", "frame"]
    vlm = adapter.vlm
    compacted, position = vlm.new_cache(), 0
    for segment in state.segments:
        _, position = vlm.forward(compacted, position, segment.ids, segment.media)
    assert position == state.next_position
    question = vlm.tokenize(adapter.chat.question(4.5, "Which?", []))
    expected, _ = vlm.forward(compacted, position, question)
    torch.testing.assert_close(
        state.append(question), expected.index_fill(0, vlm.unspeakable, -torch.inf)
    )
