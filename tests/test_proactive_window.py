"""Proactive window layouts of the chat adapters (`proactive_window`: sliding or append) and
the prefix each call shares with the previous one (`prefix_shared_images`, the scorer's
`prefix_share`).

The window logic and the shared-prefix count are tested on their own; the layouts then run
the synthetic benchmark's proactive tasks through the real Core against the OpenAI-compatible
stand-in server (tests/openai_stand_in.py), and against the stand-in vLLM engine.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from streameval.adapters.chat_prompts import (
    ChatRequest,
    PromptImage,
    VideoInput,
    openai_messages,
    shared_images,
)
from streameval.adapters.config import AdapterConfigError, validate_config
from streameval.adapters.openai_adapter import OpenAIAdapterConfig
from streameval.adapters.proactive_window import next_window
from streameval.adapters.sdk import Session
from streameval.adapters.settings import config_settings
from streameval.adapters.vllm_engine import VLLMEngineConfig, merge_engine_args
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.protocol import PREFIX_SHARE_FEATURE, RESUME_FEATURE, Workload
from streameval.scorer.report import score_run
from tests.openai_stand_in import FakeOpenAIServer, Reply, images, labels
from tests.test_core_run import events_by_session, execute, run_config
from tests.test_openai_adapter import adapter, of_kind, workloads
from tests.test_protocol import CONDITIONS
from tests.vllm_stand_in import log_entries


def frame(t: float) -> PromptImage:
    return PromptImage(f"f{t:g}", t, 64, 48, b"jpeg")


def stream(count: int) -> list[PromptImage]:
    return [frame(float(t)) for t in range(count)]


def times(window: list[PromptImage]) -> list[float]:
    return [image.t for image in window]


# --------------------------------------------------------------------------- the windows


def test_a_sliding_window_is_the_newest_frames_at_every_decision():
    received = stream(10)
    assert times(next_window("sliding", received[3:7], received, 4, 16)) == [6, 7, 8, 9]
    assert times(next_window("sliding", [], received[:2], 4, 16)) == [0, 1]


def test_an_append_window_grows_by_the_frames_since_and_restarts_past_its_bound():
    """One frame per decision, windows of 2 growing to at most 5: 2, 3, 4, 5, then 2 again."""
    received: list[PromptImage] = []
    window: list[PromptImage] = []
    shown = []
    for t in range(12):
        received.append(frame(float(t)))
        window = next_window("append", window, received, 2, 5)
        shown.append(times(window))
    assert shown[:6] == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4], [4, 5]]
    assert [len(window) for window in shown] == [1, 2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4]
    # Several frames since the last decision are appended together, or restart the window.
    assert times(next_window("append", stream(3), stream(5), 2, 5)) == [0, 1, 2, 3, 4]
    assert times(next_window("append", stream(3), stream(6), 2, 5)) == [4, 5]


def test_an_append_window_whose_last_frame_is_no_longer_kept_restarts():
    received = [frame(float(t)) for t in range(10, 15)]  # frames 0..9 forgotten
    assert times(next_window("append", stream(3), received, 2, 5)) == [13, 14]
    # A frame delivered twice (same time) is appended once.
    again = [*stream(3), frame(2.0), frame(3.0)]
    assert times(next_window("append", stream(3), again, 2, 5)) == [0, 1, 2, 3]


# --------------------------------------------------------------------------- the shared prefix


def request(window: list[PromptImage], prompt: str = "now", **kwargs) -> ChatRequest:
    return ChatRequest(images=tuple(window), prompt=prompt, max_tokens=8, **kwargs)


def test_the_shared_prefix_counts_the_images_at_the_same_place_after_the_same_text():
    frames = stream(6)
    first = request(frames[:3], "at 2s")
    assert shared_images(None, first) == 0
    assert shared_images(first, request(frames[:5], "at 4s")) == 3  # the prompt comes after
    assert shared_images(first, request(frames[1:4])) == 0  # slid by one: nothing shared
    assert shared_images(first, request(frames[:2])) == 2
    assert shared_images(first, request(frames[:5], system="Be brief.")) == 0
    # A label naming the image's place in the window is the same text at the same place.
    indexed = {"frame_label": "Image {index}:"}
    assert shared_images(request(frames[:3], **indexed), request(frames[:4], **indexed)) == 3
    assert shared_images(request(frames[:3]), request(frames[:4], **indexed)) == 0
    # A video is one part: shared whole, or not at all.
    video = VideoInput(fps=1.0, label="clip")
    clip = request(frames[:3], video=video)
    assert shared_images(clip, request(frames[:3], "later", video=video)) == 3
    assert shared_images(clip, request(frames[:4], video=video)) == 0
    assert shared_images(first, clip) == 0


def test_each_appended_request_starts_with_the_last_ones_image_parts():
    received: list[PromptImage] = []
    window: list[PromptImage] = []
    calls = []
    for t in range(8):
        received.append(frame(float(t)))
        window = next_window("append", window, received, 2, 5)
        calls.append(request(window, f"{t} s; earlier: ...", system="Watch."))
    for before, after in zip(calls, calls[1:], strict=False):
        head = openai_messages(before)
        head[-1]["content"] = head[-1]["content"][:-1]  # its image parts, without the prompt
        messages = openai_messages(after)
        starts = messages[:-1] == head[:-1]
        starts &= messages[-1]["content"][: len(head[-1]["content"])] == head[-1]["content"]
        shared = shared_images(before, after)
        assert starts == (len(after.images) > len(before.images))
        assert shared == (len(before.images) if starts else 0)


# --------------------------------------------------------------------------- the options


def openai_config(**options) -> OpenAIAdapterConfig:
    return validate_config("openai", OpenAIAdapterConfig, {"model": "m", **options})


def test_the_sliding_default_keeps_the_settings_and_history_of_earlier_runs():
    config = openai_config()
    assert config.settings() == {}
    assert not {"proactive_window", "reanchor_frames"} & set(config_settings(config))
    assert config.history_summary() == (
        "QA: recent 16 received frames; proactive: a decision every 1s over the newest 4 "
        "frames; frames arriving during a call: buffer"
    )
    assert config.most_images_per_call() == 16


def test_append_declares_its_layout_and_bound():
    config = openai_config(proactive_window="append", reanchor_frames=24)
    assert config.settings() == {"proactive_window": "append", "reanchor_frames": 24}
    assert config.history_summary() == (
        "QA: recent 16 received frames; proactive: a decision every 1s over a window that "
        "starts with the newest 4 frames, grows by appending the frames received since, and "
        "restarts from the newest 4 once it would exceed 24; frames arriving during a call: "
        "buffer"
    )
    assert config.most_images_per_call() == 24
    # At its default the bound is declared all the same: the settings name what runs.
    assert openai_config(proactive_window="append").settings()["reanchor_frames"] == 16


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"proactive_window": "append", "reanchor_frames": 4},
            "openai config: reanchor_frames: must exceed proactive_window_frames (4): an append "
            "window starts with that many frames and grows up to reanchor_frames (got 4)",
        ),
        (
            {"proactive_window": "append", "input_mode": "video"},
            "openai config: proactive_window: append needs input_mode: images (a video part is "
            "one item, so a grown video shares no prefix with the last one) (got 'append')",
        ),
        (
            {"proactive_window": "growing"},
            "openai config: proactive_window: Input should be 'sliding' or 'append' "
            "(got 'growing')",
        ),
    ],
)
def test_a_bad_layout_is_one_line(options, message):
    with pytest.raises(AdapterConfigError) as raised:
        openai_config(**options)
    assert str(raised.value) == message


def test_the_vllm_image_limit_allows_the_largest_append_window():
    config = VLLMEngineConfig(model="m", proactive_window="append", reanchor_frames=20)
    assert merge_engine_args(config, None)["limit_mm_per_prompt"] == {"image": 20}
    sliding = VLLMEngineConfig(model="m", reanchor_frames=20)  # unused while sliding
    assert merge_engine_args(sliding, None)["limit_mm_per_prompt"] == {"image": 16}


def test_the_shared_prefix_goes_only_to_a_core_that_reads_it():
    """An older Core refuses unknown fields: the SDK leaves the field out unless the Core
    announced `prefix_share` (FEATURES_HEADER)."""
    sent: list[dict] = []

    async def send(text: str) -> None:
        sent.append(json.loads(text))

    for features in (frozenset({RESUME_FEATURE}), frozenset({PREFIX_SHARE_FEATURE})):
        session = Session("run", "s", ["r"], CONDITIONS, send, core_features=features)
        asyncio.run(session.workload(frame_ids=["f0"], images=1, prefix_shared_images=1))
    assert [m.get("prefix_shared_images") for m in sent] == [None, 1]
    assert "prefix_shared_images" not in sent[0]
    assert "prefix_shared_images" not in Workload(kind="model_call").model_dump_json()


# --------------------------------------------------------------------------- served runs


def waiting_model(body: dict, index: int) -> Reply:
    """Responds at every 10th second, so earlier responses join later prompts; else WAIT."""
    newest = labels(body)[-1]
    return Reply(["Now", "."]) if newest % 10 == 0 else Reply(["WA", "IT"])


@pytest.fixture(scope="module")
def synthetic_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """The synthetic benchmark's proactive tasks once per layout, one session at a time so
    the server sees each session's calls in order."""
    root = tmp_path_factory.mktemp("layouts")
    runs = {}
    for layout in ("sliding", "append"):
        with (
            FakeOpenAIServer(waiting_model) as server,
            adapter(server.base_url, proactive_window=layout) as process,
            Store(f"sqlite:///{root / layout}.db") as store,
        ):
            config = RunConfig(
                benchmark="synthetic",
                tasks=["proactive"],
                endpoints=[EndpointConfig(url=process.url, concurrency=1)],
                cache_dir=str(root / "cache"),
            )
            summary = execute(config, store)
            scores = score_run(store, summary.run_id, "trace-paper-v1")
            events = events_by_session(store, summary.run_id)
            runs[layout] = (summary, scores.overall["workload"], events, server.requests)
    return runs


def test_append_windows_share_most_of_each_prompt_and_sliding_ones_almost_none(synthetic_runs):
    shares = {}
    for layout, (summary, workload, _, _) in synthetic_runs.items():
        assert (summary.finished, summary.failed) == (4, 0)
        shares[layout] = (
            workload["prefix_shared_images"].value,
            workload["following_images"].value,
            workload["submitted_images"].value,
            workload["prefix_share"].value,
        )
    # Sliding: 4 images a call, one new; only the two sessions that start with 3 frames
    # received share them once (3 + 3 of 520 images).
    assert shares["sliding"] == (6, 520, 534, 6 / 520)
    # Append: windows of 4 growing to 16, each restart sharing nothing.
    assert shares["append"] == (1094, 1248, 1262, 1094 / 1248)
    assert shares["append"][3] >= 0.8 > 0.05 > shares["sliding"][3]


def test_each_appended_call_starts_with_the_previous_calls_images(synthetic_runs):
    *_, requests = synthetic_runs["append"]
    restarts = 0
    for before, after in zip(requests, requests[1:], strict=False):
        count = len(images(before))
        parts = before["messages"][-1]["content"][: 2 * count]  # label, image, label, ...
        if len(images(after)) > count:
            assert after["messages"][-1]["content"][: 2 * count] == parts
            assert after["messages"][:-1] == before["messages"][:-1]
        else:  # restarted from the newest 4 (or a new session's first call)
            assert len(images(after)) in (3, 4)
            restarts += 1
    assert restarts == 11 and max(len(images(body)) for body in requests) == 16
    # The prompt, with the time and the earlier responses, comes after the images.
    reminded = [
        b for b in requests if "Your earlier responses" in b["messages"][-1]["content"][-1]["text"]
    ]
    assert reminded and all(
        b["messages"][-1]["content"][-2]["type"] == "image_url" for b in reminded
    )


def test_the_workload_records_and_the_hello_say_what_each_layout_did(synthetic_runs):
    for layout, (_, _, events, _) in synthetic_runs.items():
        for session_events in events.values():
            calls = workloads(session_events)
            assert calls[0]["prefix_shared_images"] == 0
            for before, after in zip(calls, calls[1:], strict=False):
                grew = after["frame_ids"][: len(before["frame_ids"])] == before["frame_ids"]
                expected = len(before["frame_ids"]) if grew else 0
                assert after["prefix_shared_images"] == expected
            hello = of_kind(session_events, EventKind.ADAPTER_HELLO)[0].payload.conditions
            declared = {k: hello.settings.get(k) for k in ("proactive_window", "reanchor_frames")}
            if layout == "append":
                assert declared == {"proactive_window": "append", "reanchor_frames": 16}
                assert "grows by appending" in hello.history
            else:
                assert declared == {"proactive_window": None, "reanchor_frames": None}


def test_the_vllm_adapter_appends_within_its_image_limit(stand_in, benchmark_path, tmp_path):
    """The stand-in engine refuses a prompt over `limit_mm_per_prompt`; windows of 2 grow to
    6 images, above the 4 of a question, and each prompt starts with the last one's text up
    to its last image."""
    log = stand_in()
    options = {"model": "m", "qa_max_frames": 4, "proactive_window_frames": 2}
    options |= {"proactive_window": "append", "reanchor_frames": 6}
    with (
        AdapterProcess("tests.vllm_stand_in:StandInVLLMAdapter", options=options) as process,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(benchmark_path, tmp_path, process.url, tasks=["proactive"])
        summary = execute(config, store)
    assert (summary.finished, summary.failed) == (1, 0)
    calls = log_entries(log, "call")
    assert [call["images"] for call in calls] == [2, 3, 4, 5, 6, 2, 3, 4, 5, 6, 2, 3, 4, 5]
    for before, after in zip(calls, calls[1:], strict=False):
        head = before["prompt"][: before["prompt"].rindex("<image>") + len("<image>")]
        assert after["prompt"].startswith(head) == (after["images"] > before["images"])
