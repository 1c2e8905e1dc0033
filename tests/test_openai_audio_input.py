"""The `openai` adapter's sound (`audio: true`): `input_audio` WAV parts among the images.

The window's sound goes in time order with its frames: contiguous chunks merged into one
span per stretch between two frames, each span after its label, as OpenAI's content part
`{"type": "input_audio", "input_audio": {"data": <base64 WAV>, "format": "wav"}}`. These
tests check the request body part by part, that every WAV decodes back to the exact PCM
samples at 16 kHz, that a real HTTP server (tests/openai_stand_in.py) receives that body and
its audio token count reaches the call's usage, and that with the option off the body, the
settings and the identity are those of before.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image
from websockets.asyncio.client import connect as ws_connect

from streameval.adapters.chat_prompts import (
    AUDIO_LABEL,
    AUDIO_OPEN_QA_PROMPT,
    AUDIO_PROACTIVE_PROMPT,
    AUDIO_QA_PROMPT,
    ChatRequest,
    PromptAudio,
    PromptImage,
    merge_audio,
    shared_images,
)
from streameval.adapters.config import AdapterConfigError
from streameval.adapters.openai_adapter import OpenAIAdapter, OpenAIAdapterConfig
from streameval.adapters.settings import config_settings
from streameval.adapters.video_chat import Usage, VideoChatAdapter, VideoChatConfig
from streameval.core.benchmark.records import Benchmark, QARecord
from streameval.core.frames.audio_track import decode_audio
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.protocol import (
    AUDIO_FEATURE,
    FEATURES_HEADER,
    PROTOCOL_VERSION,
    AudioConditions,
    AudioHeader,
    FrameHeader,
    Question,
    SessionEnd,
    SessionStart,
    encode_frame,
)
from streameval.scorer.report import score_run
from streameval.scorer.service.timeline import record_timeline
from streameval.scorer.source import store_source
from tests.openai_stand_in import FakeOpenAIServer, Reply
from tests.sound_fixtures import write_sound_video
from tests.test_openai_adapter import run_against, workloads
from tests.test_protocol import CONDITIONS
from tests.test_scorer_audio_workload import AUDIO_METRICS

RATE = 16_000
CHUNK_S = 0.5
# Two frames, each followed by the sound up to the next one (or the prompt).
TWO_FRAMES_EACH_WITH_SOUND_AFTER = [
    *("text", "image_url", "text", "input_audio"),
    *("text", "image_url", "text", "input_audio"),
    "text",
]


# --------------------------------------------------------------------------- helpers


def pcm(seed: int, seconds: float = CHUNK_S) -> bytes:
    """Distinct int16 noise for each seed, little-endian as the Core sends it."""
    samples = np.random.default_rng(seed).integers(-32768, 32767, int(seconds * RATE))
    return samples.astype("<i2").tobytes()


def chunk(k: int) -> PromptAudio:
    """Core chunk k: video time [k * 0.5, (k + 1) * 0.5)."""
    return PromptAudio(k * CHUNK_S, (k + 1) * CHUNK_S, RATE, pcm(k))


def frame(t: float) -> PromptImage:
    return PromptImage(f"f{t:g}", t, 8, 6, f"jpeg{t:g}".encode())


def image_part(t: float) -> dict:
    return {"type": "image_url", "image_url": {"url": frame(t).data_url}}


def wav_samples(part: dict) -> tuple[tuple[int, int, int], bytes]:
    """An `input_audio` part's WAV: (channels, sample width, rate) and its PCM bytes."""
    assert part["type"] == "input_audio"
    assert part["input_audio"]["format"] == "wav"
    data = base64.b64decode(part["input_audio"]["data"], validate=True)
    with wave.open(io.BytesIO(data)) as reader:
        params = (reader.getnchannels(), reader.getsampwidth(), reader.getframerate())
        return params, reader.readframes(reader.getnframes())


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def adapter_for(**options) -> OpenAIAdapter:
    return OpenAIAdapter(OpenAIAdapterConfig(model="fake-vl", **options))


# --------------------------------------------------------------------------- the body


def test_sound_goes_between_the_frames_as_merged_wav_spans():
    """Frames at 10 s and 11 s, chunks 20..22 (10..11.5 s): the two chunks before the
    11 s frame are one span, the chunk after it another; each WAV holds the exact samples."""
    images = (frame(10.0), frame(11.0))
    clips = [chunk(20), chunk(21), chunk(22)]
    spans = merge_audio(clips, [10.0, 11.0])
    assert [(s.start_t, s.t) for s in spans] == [(10.0, 11.0), (11.0, 11.5)]
    request = ChatRequest(images=images, prompt="Question: ?", max_tokens=5, audio=spans)
    body = adapter_for(audio=True).request_body(request)
    parts = body["messages"][-1]["content"]
    assert [p["type"] for p in parts] == TWO_FRAMES_EACH_WITH_SOUND_AFTER
    assert parts[:3] == [text("Frame at 10s:"), image_part(10.0), text("Audio from 10s to 11s:")]
    assert parts[4:7] == [text("Frame at 11s:"), image_part(11.0), text("Audio from 11s to 11.5s:")]
    assert parts[8] == text("Question: ?")
    assert wav_samples(parts[3]) == ((1, 2, RATE), pcm(20) + pcm(21))
    assert wav_samples(parts[7]) == ((1, 2, RATE), pcm(22))
    # The rest of the body is what an images request always had.
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "model": "fake-vl",
        "max_tokens": 5,
        "temperature": 0.0,
        "seed": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert request.audio_seconds == 1.5


@pytest.mark.parametrize(
    ("clips", "frames", "spans"),
    [
        # Frames every second, chunks of 0.5 s: one span per second, ending at a frame.
        ([chunk(k) for k in range(4)], [0.0, 1.0, 2.0], [(0.0, 1.0), (1.0, 2.0)]),
        # No frame inside: one span however long.
        ([chunk(k) for k in range(6)], [0.0], [(0.0, 3.0)]),
        # A missing chunk (index 2) splits.
        ([chunk(0), chunk(1), chunk(3)], [0.0], [(0.0, 1.0), (1.5, 2.0)]),
        # A frame between chunks that are not on a second (3 fps times).
        ([chunk(0), chunk(1)], [0.333333, 0.5], [(0.0, 0.5), (0.5, 1.0)]),
        ([], [0.0], []),
    ],
)
def test_contiguous_chunks_merge_until_a_frame(clips, frames, spans):
    merged = merge_audio(clips, frames)
    assert [(s.start_t, s.t) for s in merged] == spans
    assert b"".join(s.pcm for s in merged) == b"".join(c.pcm for c in clips)


def test_a_change_of_sample_rate_splits_and_the_wav_keeps_each_rate():
    other = PromptAudio(0.5, 1.0, 8000, pcm(9, 0.25))
    (first, second) = merge_audio([chunk(0), other], [0.0])
    assert (first.sample_rate, second.sample_rate) == (RATE, 8000)
    assert second.duration_s == 0.5
    with wave.open(io.BytesIO(second.wav())) as reader:
        assert (reader.getframerate(), reader.getnframes()) == (8000, 4000)


def test_sound_after_the_last_frame_comes_before_the_prompt_and_labels_can_go():
    """A question at 6.7 s: the chunk ending at 6.5 s arrived after the 6 s frame."""
    request = ChatRequest(
        images=(frame(6.0),),
        prompt="p",
        max_tokens=3,
        frame_label=None,
        audio=merge_audio([chunk(11), chunk(12)], [6.0]),
        audio_label=None,
    )
    parts = OpenAIAdapter(OpenAIAdapterConfig(model="m", audio=True)).request_body(request)[
        "messages"
    ][-1]["content"]
    assert [p["type"] for p in parts] == ["input_audio", "image_url", "input_audio", "text"]
    assert wav_samples(parts[0])[1] == pcm(11)
    assert wav_samples(parts[2])[1] == pcm(12)


def test_the_prefix_shared_with_the_last_call_counts_its_sound():
    """An image is shared only if every span before it is the same too."""
    images = (frame(1.0), frame(2.0))
    first = ChatRequest(images, "p", 3, audio=merge_audio([chunk(2), chunk(3)], [1.0, 2.0]))
    # The same sound up to 2 s, then more after the 2 s frame: both frames are shared.
    grown = merge_audio([chunk(2), chunk(3), chunk(4)], [1.0, 2.0])
    assert shared_images(first, ChatRequest(images, "p", 3, audio=grown)) == 2
    # Other sound between the frames: only the first frame is.
    changed = (PromptAudio(1.0, 2.0, RATE, pcm(99, 1.0)),)
    assert shared_images(first, ChatRequest(images, "p", 3, audio=changed)) == 1
    assert shared_images(first, ChatRequest(images, "p", 3)) == 1


# --------------------------------------------------------------------------- a real server


async def _one_call(adapter: OpenAIAdapter, request: ChatRequest) -> list:
    pieces = [piece async for piece in adapter.stream_completion(request)]
    await adapter.client().aclose()
    return pieces


def test_a_real_server_receives_the_parts_and_reports_the_audio_tokens():
    spans = merge_audio([chunk(20), chunk(21), chunk(22)], [10.0, 11.0])
    request = ChatRequest((frame(10.0), frame(11.0)), "Question: ?", 5, audio=spans)
    with FakeOpenAIServer(lambda body, i: Reply(["B"])) as server:
        adapter = adapter_for(base_url=server.base_url, audio=True)
        pieces = asyncio.run(_one_call(adapter, request))
    (body,) = server.requests
    assert body == adapter.request_body(request)
    parts = body["messages"][-1]["content"]
    assert [wav_samples(p) for p in parts if p["type"] == "input_audio"] == [
        ((1, 2, RATE), pcm(20) + pcm(21)),
        ((1, 2, RATE), pcm(22)),
    ]
    # 1.5 s at the stand-in's 25 tokens a second, reported as OpenAI does.
    assert pieces == ["B", Usage(50 + 200 + 38, 1, 38)]


def test_with_the_option_off_the_body_and_identity_are_as_before():
    """The body an images request always had, byte for byte on the wire."""
    request = ChatRequest((frame(3.0), frame(4.0)), "Question: ?", 5)
    before = {
        "model": "fake-vl",
        "messages": [
            {
                "role": "user",
                "content": [
                    text("Frame at 3s:"),
                    image_part(3.0),
                    text("Frame at 4s:"),
                    image_part(4.0),
                    text("Question: ?"),
                ],
            }
        ],
        "max_tokens": 5,
        "temperature": 0.0,
        "seed": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with FakeOpenAIServer(lambda body, i: Reply(["B"])) as server:
        adapter = adapter_for(base_url=server.base_url)
        pieces = asyncio.run(_one_call(adapter, request))
    expected = httpx.Request("POST", server.base_url, json=before).content
    assert server.raw == [expected]
    assert list(json.loads(expected)) == list(adapter.request_body(request))  # key order too
    assert pieces == ["B", Usage(250, 1, None)]
    assert adapter.consumes_audio is False
    assert adapter.conditions.settings == {}
    assert "sound" not in adapter.conditions.history
    recorded = config_settings(adapter.config)
    assert not [key for key in recorded if key.startswith("audio")]


# --------------------------------------------------------------------------- the config


def test_audio_declares_its_settings_and_wording():
    adapter = adapter_for(audio=True)
    assert adapter.consumes_audio is True
    assert adapter.conditions.settings == {
        "audio_parts": "input_audio_wav_spans_between_frames",
        "audio_label": AUDIO_LABEL,
        "qa_prompt": AUDIO_QA_PROMPT,
        "open_qa_prompt": AUDIO_OPEN_QA_PROMPT,
        "proactive_prompt": AUDIO_PROACTIVE_PROMPT,
    }
    assert adapter.conditions.history.endswith(
        "; sound: the chunks received since the window's first frame, contiguous ones "
        "merged into one WAV span per stretch between frames"
    )
    assert config_settings(adapter.config)["audio"] is True
    unlabelled = adapter_for(audio=True, audio_label=None, qa_prompt="{question} {options}")
    assert unlabelled.conditions.settings["audio_label"] == "null"
    assert "qa_prompt" not in unlabelled.conditions.settings  # set: the option records it


def test_audio_is_refused_where_it_cannot_go():
    with pytest.raises(ValueError, match="audio needs input_mode: images"):
        OpenAIAdapterConfig(model="m", input_mode="video", audio=True)
    with pytest.raises(ValueError, match="unknown placeholder"):
        OpenAIAdapterConfig(model="m", audio=True, audio_label="{t}")

    class Silent(VideoChatAdapter):
        name = "silent"

    with pytest.raises(AdapterConfigError, match="audio: the 'silent' adapter cannot send"):
        Silent(VideoChatConfig(model="m", audio=True), "in-process")


# --------------------------------------------------------------------------- a session


def jpeg(grey: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (grey, grey, grey)).save(out, format="JPEG", quality=95)
    return out.getvalue()


def frame_message(index: int, t: float) -> bytes:
    data = jpeg(index * 20)
    header = FrameHeader(
        index=index, frame_id=f"v:{index}", t=t, width=8, height=6, nbytes=len(data)
    )
    return encode_frame(header, data)


def audio_message(k: int, payload: bytes, silent: bool = False) -> bytes:
    header = AudioHeader(
        index=k,
        start_t=k * CHUNK_S,
        t=(k + 1) * CHUNK_S,
        sample_rate=RATE,
        samples=len(payload) // 2,
        silent=silent,
        nbytes=len(payload),
    )
    return encode_frame(header, payload)


async def _stream_then_ask(url: str, sound: bool = True) -> tuple[dict, list[dict]]:
    """Frames at 0..3 s and (with `sound`) chunks 0..6 (0..3.5 s) in stream order (a chunk
    once video time reached its end), chunk 6 silent; then a question at 3.6 s. Returns the
    hello and every message after the session start."""
    conditions = CONDITIONS.model_copy(update={"audio": AudioConditions() if sound else None})
    start = SessionStart(
        protocol=PROTOCOL_VERSION,
        run_id="r",
        session_id="s",
        record_ids=["q"],
        conditions=conditions,
    )
    silence = bytes(len(pcm(6)))
    async with ws_connect(url, additional_headers={FEATURES_HEADER: AUDIO_FEATURE}) as ws:
        hello = json.loads(await ws.recv())
        await ws.send(start.model_dump_json())
        for k in range(7):
            if k % 2 == 0:  # the frame at k / 2 s follows the chunk that ends there
                await ws.send(frame_message(k // 2, k / 2))
            if sound:
                await ws.send(audio_message(k, silence if k == 6 else pcm(k), silent=k == 6))
        question = Question(task_id="q", t=3.6, text="Which?", options=["A. one", "B. two"])
        await ws.send(question.model_dump_json())
        said = []
        while not said or said[-1]["type"] != "response_final":
            said.append(json.loads(await ws.recv()))
        await ws.send(SessionEnd().model_dump_json())
    return hello, said


def _hearing_session(sound: bool) -> tuple[dict, list[dict], list[dict]]:
    """The adapter (audio on, the newest 2 frames at a question) in its own process over the
    real protocol, the stand-in over HTTP: the hello, what the adapter said, the bodies."""
    with (
        FakeOpenAIServer(lambda body, i: Reply(["B"])) as server,
        AdapterProcess(
            "openai",
            options={
                "base_url": server.base_url,
                "model": "fake-vl",
                "audio": True,
                "qa_max_frames": 2,
            },
        ) as served,
    ):
        hello, said = asyncio.run(_stream_then_ask(served.url, sound))
    return hello, said, server.requests


def test_a_session_submits_the_windows_sound_and_reports_its_seconds():
    """The window (the newest 2 frames, 2 s and 3 s) takes the sound from 2 s on."""
    hello, said, requests = _hearing_session(sound=True)
    assert hello["audio"] is True
    assert hello["conditions"]["settings"]["audio"] is True
    acks = [m for m in said if m["type"] in ("frame_ack", "audio_ack")]
    assert [(m["type"], m["index"]) for m in acks if m["type"] == "audio_ack"] == [
        ("audio_ack", k) for k in range(7)
    ]
    (body,) = requests
    parts = body["messages"][-1]["content"]
    assert [p.get("text") for p in parts if p["type"] == "text"][:4] == [
        "Frame at 2s:",
        "Audio from 2s to 3s:",
        "Frame at 3s:",
        "Audio from 3s to 3.5s:",
    ]
    assert [p["type"] for p in parts] == TWO_FRAMES_EACH_WITH_SOUND_AFTER
    assert parts[-1]["text"].startswith("The images above are frames of a live video stream")
    assert wav_samples(parts[3]) == ((1, 2, RATE), pcm(4) + pcm(5))
    # The silent chunk goes as what the Core sent: zeros.
    assert wav_samples(parts[7]) == ((1, 2, RATE), bytes(len(pcm(6))))
    (call,) = [m for m in said if m["type"] == "workload"]
    assert (call["images"], call["audio_seconds"], call["audio_tokens"]) == (2, 1.5, 38)
    assert call["input_tokens"] == 50 + 200 + 38


def test_a_session_without_sound_sends_and_reports_none():
    """The run streams video alone: no audio parts, and a workload without audio counts."""
    hello, said, requests = _hearing_session(sound=False)
    assert hello["audio"] is True
    (body,) = requests
    assert [p["type"] for p in body["messages"][-1]["content"]] == [
        *("text", "image_url", "text", "image_url"),
        "text",
    ]
    (call,) = [m for m in said if m["type"] == "workload"]
    assert call["images"] == 2
    assert "audio_seconds" not in call and "audio_tokens" not in call  # as before audio


# --------------------------------------------------------------------------- a full run


@pytest.fixture(scope="module")
def sound_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/sound_fixtures.py's videos: a 440 Hz tone over 1-2 s, and one without sound."""
    root = tmp_path_factory.mktemp("sound")
    write_sound_video(root / "tone.mp4", seconds=4, tone=(1.0, 2.0))
    write_sound_video(root / "mute.mp4", seconds=4, tone=None)
    records = [
        QARecord(
            record_id=name,
            source_id=name,
            source_benchmark="test",
            task_type="sound",
            video_path=f"{name}.mp4",
            question="What did you hear?",
            options=("A. a tone", "B. nothing"),
            answer="A",
            question_time_s=t,
            evidence_anchor_s=t,
            needs_audio=True,
        )
        for name, t in (("tone", 3.2), ("mute", 2.0))
    ]
    benchmark = Benchmark(name="sound", version="1", video_root=".", records=records)
    path = root / "benchmark.json"
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path


def test_a_core_run_with_sound_reaches_the_server_and_the_scores(sound_benchmark, tmp_path):
    """The Core decodes the videos' sound and streams it (1 fps frames, 0.5 s chunks); the
    adapter submits the newest 2 frames with the sound since the first of them; the scorer
    and the timeline read the run back from the store."""
    options = {"audio": True, "qa_max_frames": 2}
    with FakeOpenAIServer(lambda body, i: Reply(["A"])) as server:
        summary, _, events = run_against(
            server.base_url, tmp_path, sound_benchmark, options, modalities=["video", "audio"]
        )
    assert (summary.finished, summary.failed) == (2, 0)
    bodies = {}
    for body in server.requests:
        frame_times = [p["text"] for p in body["messages"][-1]["content"] if p["type"] == "text"]
        bodies["tone" if "Frame at 3s:" in frame_times else "mute"] = body
    # tone, asked at 3.2 s: frames 2 s and 3 s; chunks 4 and 5 (2-3 s) merged between them.
    parts = bodies["tone"]["messages"][-1]["content"]
    assert [p["type"] for p in parts] == [
        "text", "image_url", "text", "input_audio", "text", "image_url", "text",
    ]  # fmt: skip
    assert [p["text"] for p in parts if p["type"] == "text"][:3] == [
        "Frame at 2s:",
        "Audio from 2s to 3s:",
        "Frame at 3s:",
    ]
    tone = decode_audio(sound_benchmark.parent / "tone.mp4", RATE)
    expected = b"".join(tone.chunk(k, CHUNK_S)[0] for k in (4, 5))
    assert wav_samples(parts[3]) == ((1, 2, RATE), expected)
    # mute, asked at 2 s: frames 1 s and 2 s, the zeros of chunks 2 and 3 between them.
    parts = bodies["mute"]["messages"][-1]["content"]
    assert [p.get("text") for p in parts][:3] == ["Frame at 1s:", None, "Audio from 1s to 2s:"]
    assert wav_samples(parts[3]) == ((1, 2, RATE), bytes(2 * RATE))
    for session in ("tone", "mute"):
        (call,) = workloads(events[session])
        assert (call["images"], call["audio_seconds"], call["audio_tokens"]) == (2, 1.0, 25)

    with Store(f"sqlite:///{tmp_path / 's.db'}", read_only=True) as store:
        workload = score_run(store, summary.run_id).overall["workload"]
        timeline = record_timeline(store_source(store, summary.run_id), "tone")
    # Chunks sent: tone 6 (0-3 s), mute 4 (0-2 s, silent).
    assert {name: workload[name].value for name in AUDIO_METRICS} == {
        "audio_streamed_s": 5.0,
        "audio_chunks": 10,
        "silent_audio_chunks": 4,
        "audio_submitted_s": 2.0,
        "audio_tokens": 50,
    }
    assert [(a.start_t, a.t, a.silent) for a in timeline.audio] == [
        (k * CHUNK_S, (k + 1) * CHUNK_S, False) for k in range(6)
    ]
