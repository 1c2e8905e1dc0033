"""The `openai` adapter's video input mode (`input_mode: video`).

The history window goes as ONE `video_url` part holding vLLM's frames-as-video data URL
(`data:video/jpeg;base64,<frame>,<frame>,...`) after a label with the window's time span,
and the request carries the frames' rate (`media_io_kwargs.video.fps`,
`mm_processor_kwargs.fps`). The stand-in server of tests/test_openai_adapter.py (real SSE)
records every request; these tests check the request shape, that every frame in a video is
a real JPEG of the frame its time names, in time order, and that the workload records count
each of those frames as a submitted image, as in images mode.
"""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import pytest
from PIL import Image

from streameval.adapters.chat_prompts import (
    VIDEO_OPEN_QA_PROMPT,
    VIDEO_PROACTIVE_PROMPT,
    VIDEO_QA_PROMPT,
    ChatRequest,
    PromptImage,
    VideoInput,
    hf_messages,
    openai_messages,
    video_data_url,
    video_fps,
    video_label,
)
from streameval.adapters.config import AdapterConfigError
from streameval.adapters.openai_adapter import OpenAIAdapter, OpenAIAdapterConfig
from streameval.adapters.video_chat import VideoChatAdapter, VideoChatConfig
from streameval.events import EventKind
from tests.test_openai_adapter import (
    FakeOpenAIServer,
    Reply,
    errors,
    expected_grey,
    of_kind,
    run_against,
    workloads,
)

VIDEO_PREFIX = "data:video/jpeg;base64,"
SPAN = re.compile(r"^Video from ([\d.]+)s to ([\d.]+)s:$")


# --------------------------------------------------------------------------- helpers


def jpeg(grey: int, size: tuple[int, int] = (8, 6)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (grey, grey, grey)).save(out, format="JPEG", quality=95)
    return out.getvalue()


def frames_at(*times: float) -> tuple[PromptImage, ...]:
    return tuple(PromptImage(f"f{t:g}", t, 8, 6, jpeg(int(t * 10) % 256)) for t in times)


def content(body: dict) -> list[dict]:
    return body["messages"][-1]["content"]


def video_parts(body: dict) -> list[dict]:
    return [p for p in content(body) if p["type"] == "video_url"]


def span(body: dict) -> tuple[float, float]:
    """The window's label: the text part right before the video."""
    parts = content(body)
    index = next(i for i, p in enumerate(parts) if p["type"] == "video_url")
    match = SPAN.match(parts[index - 1]["text"])
    assert match, parts[index - 1]
    return float(match.group(1)), float(match.group(2))


def decoded_frames(body: dict) -> list[tuple[tuple[int, int], float]]:
    """Each comma-separated part of the one video's data URL as a JPEG: (size, mean grey)."""
    (part,) = video_parts(body)
    url = part["video_url"]["url"]
    assert url.startswith(VIDEO_PREFIX)
    out = []
    for encoded in url[len(VIDEO_PREFIX) :].split(","):
        with Image.open(io.BytesIO(base64.b64decode(encoded, validate=True))) as image:
            assert image.format == "JPEG"
            out.append((image.size, float(np.asarray(image.convert("L")).mean())))
    return out


def prompt_of(body: dict) -> str:
    return content(body)[-1]["text"]


def video_oracle(body: dict, index: int) -> Reply:
    """Reads the window's span: answers questions, responds when the video ends at 8 s."""
    if "Question:" in prompt_of(body):
        return Reply(["B", ".", " two"])
    if span(body)[1] == 8.0:
        return Reply(["The", " count", " is", " 2."])
    return Reply(["WAIT"])


def adapter_for(**options) -> OpenAIAdapter:
    return OpenAIAdapter(OpenAIAdapterConfig(model="fake-vl", **options))


# --------------------------------------------------------------------------- unit: the body


def test_video_request_body_is_one_video_part_with_its_rate():
    adapter = adapter_for(input_mode="video", mm_processor_kwargs={"max_pixels": 100352})
    images = frames_at(12.0, 12.5, 13.0)
    request = ChatRequest(
        images=images,
        prompt="Question: ?",
        max_tokens=7,
        system="sys",
        video=VideoInput(fps=2.0, label="Video from 12s to 13s:"),
    )
    body = adapter.request_body(request)
    url = VIDEO_PREFIX + ",".join(base64.b64encode(i.jpeg).decode() for i in images)
    assert body == {
        "model": "fake-vl",
        "messages": [
            {"role": "system", "content": "sys"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Video from 12s to 13s:"},
                    {"type": "video_url", "video_url": {"url": url}},
                    {"type": "text", "text": "Question: ?"},
                ],
            },
        ],
        "max_tokens": 7,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": 0,
        # The configured processor options stay; the rate and no-resampling are added.
        "mm_processor_kwargs": {"max_pixels": 100352, "fps": 2.0, "do_sample_frames": False},
        "media_io_kwargs": {"video": {"fps": 2.0, "num_frames": 3}},
    }
    assert video_data_url(images) == url
    assert [grey for _, grey in decoded_frames(body)] == pytest.approx([120, 125, 130], abs=2)


def test_video_server_kwargs_can_be_left_out_and_extra_body_still_wins():
    request = ChatRequest(frames_at(1.0, 2.0), "p", 4, video=VideoInput(fps=1.0))
    plain = adapter_for(input_mode="video", video_server_kwargs=False).request_body(request)
    assert "media_io_kwargs" not in plain and "mm_processor_kwargs" not in plain
    # No label configured: the video is the first part.
    assert [p["type"] for p in content(plain)] == ["video_url", "text"]
    override = {"media_io_kwargs": {"video": {"fps": 4.0}}}
    body = adapter_for(input_mode="video", extra_body=override).request_body(request)
    assert body["media_io_kwargs"] == {"video": {"fps": 4.0}}


def test_images_mode_requests_are_unchanged():
    """The default mode sends what the adapter always sent: one image part per frame."""
    images = frames_at(3.0, 4.0)
    request = ChatRequest(images=images, prompt="Question: ?", max_tokens=5)
    adapter = adapter_for()
    assert adapter.config.input_mode == "images"
    body = adapter.request_body(request)
    parts = [{"type": "text", "text": "Frame at 3s:"}]
    parts.append({"type": "image_url", "image_url": {"url": images[0].data_url}})
    parts.append({"type": "text", "text": "Frame at 4s:"})
    parts.append({"type": "image_url", "image_url": {"url": images[1].data_url}})
    parts.append({"type": "text", "text": "Question: ?"})
    assert body == {
        "model": "fake-vl",
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": 5,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": 0,
    }
    # Nothing new is declared: the adapter's identity is the one it had before video mode.
    assert adapter.conditions.settings == {}
    assert "video" not in adapter.conditions.history


def test_hf_messages_in_video_mode_have_one_video_item():
    request = ChatRequest(frames_at(1.0, 1.5), "p", 4, video=VideoInput(2.0, "Video:"))
    assert hf_messages(request) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Video:"},
                {"type": "video"},
                {"type": "text", "text": "p"},
            ],
        }
    ]
    assert openai_messages(request)[0]["content"][1]["type"] == "video_url"


# --------------------------------------------------------------------------- unit: fps, label


@pytest.mark.parametrize(
    ("times", "fallback", "fps"),
    [
        ((12.0, 12.5, 13.0, 13.5), 1.0, 2.0),  # consecutive frames at the Core's 2 fps
        ((5.0, 6.0, 7.0), 2.0, 1.0),  # the frames' own times win over the session's fps
        ((0.0, 4.0, 9.0, 13.0, 17.0), 1.0, 4 / 17),  # uniform selection: the mean rate
        ((6.0,), 1.0, 1.0),  # one frame: the session's fps
        ((6.0,), 0.5, 0.5),
        ((6.0, 6.0), 2.0, 2.0),  # no span to measure
    ],
)
def test_the_declared_fps_comes_from_the_frame_times(times, fallback, fps):
    assert video_fps(frames_at(*times), fallback) == pytest.approx(fps, abs=1e-6)


def test_the_video_label_names_the_window():
    images = frames_at(12.0, 12.5, 19.5)
    template = "Video from {start:g}s to {end:g}s:"
    assert video_label(template, images, 2.0) == "Video from 12s to 19.5s:"
    custom = "{frames} frames at {fps:g} fps, {start:.1f}-{end:.1f}s"
    assert video_label(custom, images, 2.0) == "3 frames at 2 fps, 12.0-19.5s"
    assert video_label(None, images, 2.0) is None


# --------------------------------------------------------------------------- unit: config


def test_video_mode_config_declares_its_settings_and_wording():
    adapter = adapter_for(input_mode="video", qa_max_frames=8, image_max_pixels=100352)
    conditions = adapter.conditions
    assert conditions.settings == {
        "input_mode": "video",
        "video_encoding": "jpeg_frames",
        "video_fps_source": "frame_times",
        "video_frames_qa": 8,
        "video_frames_proactive": 4,
        "video_server_kwargs": True,
        "video_frame_max_pixels": 100352,
        # The wording in use, over the options' images defaults the SDK records.
        "qa_prompt": VIDEO_QA_PROMPT,
        "open_qa_prompt": VIDEO_OPEN_QA_PROMPT,
        "proactive_prompt": VIDEO_PROACTIVE_PROMPT,
    }
    assert conditions.history.endswith(
        "; input: each call's frames as one video (JPEG frames in time order), "
        "its fps from the frames' times"
    )
    qa, _, proactive = adapter.config.prompt_templates()
    assert (qa, proactive) == (VIDEO_QA_PROMPT, VIDEO_PROACTIVE_PROMPT)
    # A prompt the config sets is kept in video mode.
    custom = adapter_for(input_mode="video", qa_prompt="Q {question} at {t}: {options}")
    assert custom.config.prompt_templates()[0] == "Q {question} at {t}: {options}"


def test_bad_video_label_and_unsupported_backends_are_refused():
    with pytest.raises(ValueError, match="unknown placeholder"):
        OpenAIAdapterConfig(model="m", input_mode="video", video_label="{t}")

    class ImagesOnly(VideoChatAdapter):
        name = "images-only"

    with pytest.raises(AdapterConfigError, match="input_mode: 'video' is not supported"):
        ImagesOnly(VideoChatConfig(model="m", input_mode="video"), "in-process")
    assert ImagesOnly(VideoChatConfig(model="m"), "in-process").conditions.settings == {}


# --------------------------------------------------------------------------- full runs


def test_a_video_mode_run_sends_one_video_per_call_and_counts_every_frame(benchmark_path, tmp_path):
    """Core at 2 fps: consecutive frames 0.5 s apart, so every video declares fps 2."""
    options = {
        "input_mode": "video",
        "qa_max_frames": 8,
        "proactive_interval_s": 2,
        "proactive_window_frames": 3,
    }
    with FakeOpenAIServer(video_oracle) as server:
        summary, _, events = run_against(
            server.base_url, tmp_path, benchmark_path, options, fps=2.0
        )
    assert (summary.finished, summary.failed) == (3, 0)
    assert server.requests
    qa_bodies, pro_bodies = [], []
    for body in server.requests:
        (qa_bodies if "Question:" in prompt_of(body) else pro_bodies).append(body)
        parts = content(body)
        # Exactly one video, no images; its label right before it, the prompt last.
        assert [p["type"] for p in parts] == ["text", "video_url", "text"]
        frames = decoded_frames(body)
        start, end = span(body)
        count = len(frames)
        assert body["media_io_kwargs"] == {"video": {"fps": 2.0, "num_frames": count}}
        assert body["mm_processor_kwargs"] == {"fps": 2.0, "do_sample_frames": False}
        # The frames are the window's, in time order: frame i is at start + i / fps.
        assert end == pytest.approx(start + (count - 1) / 2.0)
        for i, (size, grey) in enumerate(frames):
            assert size == (64, 48)
            assert abs(grey - expected_grey(start + i / 2.0)) <= 2, (i, start, grey)

    # QA at 17 s: the newest 8 frames (13.5..17 s), in video wording.
    hello = of_kind(events["t:qa:1"], EventKind.ADAPTER_HELLO)[0].payload.conditions
    assert hello.settings["input_mode"] == "video"
    assert hello.settings["video_frames_qa"] == 8
    assert "one video" in hello.history
    spans = sorted(span(body) for body in qa_bodies)
    assert spans == [(2.5, 6.0), (13.5, 17.0)]
    assert prompt_of(qa_bodies[0]).startswith("The video above is the latest part")
    for session in ("t:qa:1", "t:qa:2"):
        qa = events[session]
        (call,) = workloads(qa)
        assert (call["images"], call["replayed_frames"], call["pixels"]) == (8, 0, 8 * 64 * 48)
        assert len(call["frame_ids"]) == 8
        assert of_kind(qa, EventKind.RESPONSE_FINAL)[0].payload.text == "B. two"
        assert errors(qa) == []

    # Proactive: a decision every 2 s from 4 s over the newest 3 frames (t - 1 .. t).
    pro = events["t:pro:1"]
    decided_at = [4, 6, 8, 10, 12, 14, 16]
    assert [span(body) for body in pro_bodies] == [(t - 1.0, float(t)) for t in decided_at]
    finals = of_kind(pro, EventKind.RESPONSE_FINAL)
    assert [f.payload.text for f in finals] == ["The count is 2."]
    calls = workloads(pro)
    # Every frame in a video is a submitted image, counted once per call.
    assert [c["images"] for c in calls] == [len(decoded_frames(b)) for b in pro_bodies]
    assert [c["images"] for c in calls] == [3] * 7
    assert [c["replayed_frames"] for c in calls] == [0] * 7  # 2 s apart at 2 fps: no overlap
    sent_t = {e.payload.frame_id: e.video_t for e in of_kind(pro, EventKind.FRAME_SENT)}
    for call, body in zip(calls, pro_bodies, strict=True):
        start, end = span(body)
        assert [sent_t[i] for i in call["frame_ids"]] == [start, start + 0.5, end]
    assert errors(pro) == []


def test_one_frame_windows_go_as_one_frame_videos(benchmark_path, tmp_path):
    """Core at 1 fps. A 1-frame window declares the session's fps (no span to measure) and
    goes as a 1-frame video: the server's Qwen processors pad a video to an even count by
    repeating its last frame, so the adapter sends each frame once."""
    options = {
        "input_mode": "video",
        "proactive_interval_s": 1,
        "proactive_window_frames": 1,
    }
    with FakeOpenAIServer(lambda body, i: Reply(["WAIT"])) as server:
        summary, _, events = run_against(
            server.base_url, tmp_path, benchmark_path, options, tasks=["proactive"]
        )
    assert (summary.finished, summary.failed) == (1, 0)
    assert len(server.requests) == 14  # a decision at every frame from 4 s to 17 s
    for body, t in zip(server.requests, range(4, 18), strict=True):
        assert span(body) == (float(t), float(t))
        ((size, grey),) = decoded_frames(body)
        assert abs(grey - expected_grey(t)) <= 2
        assert body["media_io_kwargs"] == {"video": {"fps": 1.0, "num_frames": 1}}
        assert body["mm_processor_kwargs"]["fps"] == 1.0
    calls = workloads(events["t:pro:1"])
    assert [(c["images"], c["replayed_frames"]) for c in calls] == [(1, 0)] * 14
    assert len(of_kind(events["t:pro:1"], EventKind.SILENT)) == 14
