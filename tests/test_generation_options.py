"""Generation options (issue 36): temperature, top_p, top_k, repetition_penalty, stop and the
length limits reach the `openai` request body, are declared in every preset's hello, and,
left unset, change neither the request nor the adapter's identity (runs recorded before
the options existed still resume and compare as the same adapter).

The `vllm` adapter's SamplingParams and the `transformers` adapter's sampling are tested
with their stacks (tests/test_vllm_engine.py, tests/test_transformers_decoding.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streameval.adapters.chat_prompts import ChatRequest
from streameval.adapters.config import (
    PRESET_DIR,
    AdapterConfigError,
    preset_names,
    read_config_file,
)
from streameval.adapters.openai_adapter import OpenAIAdapter, OpenAIAdapterConfig
from streameval.adapters.registry import build_adapter, preset_adapters
from streameval.adapters.settings import config_settings
from streameval.adapters.transformers_adapter import TransformersAdapterConfig

# The options added with this change, recorded only when set away from their default.
NEW_CHAT_OPTIONS = {"top_p", "top_k", "repetition_penalty", "stop"}
NEW_NATIVE_OPTIONS = {"temperature", "top_p", "top_k", "repetition_penalty", "seed"}
# What a preset's decoding is made of (the chat adapters' names; the native adapter has
# `stop_words` for `stop`).
DECODING = (
    "temperature",
    "seed",
    "top_p",
    "top_k",
    "repetition_penalty",
    "stop",
    "stop_words",
    "max_tokens_qa",
    "max_tokens_proactive",
)


def body(**options) -> dict:
    adapter = OpenAIAdapter(OpenAIAdapterConfig(model="m", **options))
    return adapter.request_body(ChatRequest(images=(), prompt="p", max_tokens=5))


def test_the_request_body_carries_every_set_sampling_option() -> None:
    sent = body(
        temperature=0.7, seed=3, top_p=0.8, top_k=20, repetition_penalty=1.05, stop=["\n", "END"]
    )
    assert {key: sent[key] for key in ("max_tokens", "temperature", "seed")} == {
        "max_tokens": 5,
        "temperature": 0.7,
        "seed": 3,
    }
    assert (sent["top_p"], sent["top_k"], sent["repetition_penalty"]) == (0.8, 20, 1.05)
    assert sent["stop"] == ["\n", "END"]


def test_unset_options_send_what_was_sent_before_they_existed() -> None:
    sent = body()
    assert set(sent) == {"model", "messages", "max_tokens", "temperature", "seed", "stream",
                         "stream_options"}  # fmt: skip
    assert (sent["temperature"], sent["seed"]) == (0.0, 0)
    assert "seed" not in body(seed=None)


def test_extra_body_still_wins_over_an_option() -> None:
    assert body(top_k=20, extra_body={"top_k": 1})["top_k"] == 1


def test_unset_options_leave_the_adapter_identity_as_it_was() -> None:
    chat = config_settings(OpenAIAdapterConfig(model="m"))
    assert NEW_CHAT_OPTIONS.isdisjoint(chat)
    assert (chat["temperature"], chat["seed"]) == (0.0, 0)  # recorded before, as before
    native = config_settings(TransformersAdapterConfig(model="m"))
    assert NEW_NATIVE_OPTIONS.isdisjoint(native)
    assert native["decide_at"] == "step"  # images mode: as recorded before


def test_set_options_are_part_of_the_identity() -> None:
    chat = config_settings(OpenAIAdapterConfig(model="m", top_k=1, stop=["\n"]))
    assert (chat["top_k"], chat["stop"]) == (1, '["\\n"]')
    native = config_settings(
        TransformersAdapterConfig(model="m", temperature=0.7, repetition_penalty=1.15, seed=4)
    )
    assert (native["temperature"], native["repetition_penalty"], native["seed"]) == (0.7, 1.15, 4)


def test_in_video_mode_decisions_follow_the_chunk_unless_asked_otherwise() -> None:
    video = TransformersAdapterConfig(model="m", input_mode="video")
    assert video.decide_at == "chunk"
    asked = TransformersAdapterConfig(model="m", input_mode="video", decide_at="step")
    assert asked.decide_at == "step"


@pytest.mark.parametrize("option", ["stop", "top_p", "top_k", "repetition_penalty"])
def test_a_bad_value_is_one_line_naming_the_option(option: str) -> None:
    bad = {"stop": [""], "top_p": 1.5, "top_k": 0, "repetition_penalty": 0}[option]
    with pytest.raises(AdapterConfigError, match=f"^openai config: {option}"):
        build_adapter("openai", None, ["model=m", f"{option}={bad!r}"])


@pytest.mark.parametrize("preset", [p for p in preset_names() if "openai" in preset_adapters(p)])
def test_every_chat_preset_declares_its_decoding_in_its_hello(preset: str) -> None:
    """The hello of the preset served by `openai` (its settings are the `vllm` adapter's
    too): every decoding option the file sets, with the file's value; greedy otherwise."""
    settings = build_adapter("openai", preset).conditions.settings
    written = read_config_file(preset)
    for option in DECODING:
        if option in written:
            assert settings[option] == written[option], option
    assert settings["temperature"] == written.get("temperature", 0.0)
    assert (settings["max_tokens_qa"], settings["max_tokens_proactive"]) == (
        written["max_tokens_qa"],
        written["max_tokens_proactive"],
    )
    # Greedy presets say why: their published decoding could not be verified.
    text = (PRESET_DIR / f"{preset}.yaml").read_text()
    if not NEW_CHAT_OPTIONS.intersection(written):
        assert "UNVERIFIED" in text


def test_the_livecc_preset_decodes_as_livecc_s_commentary_evaluation() -> None:
    """showlab/livecc: evaluation/livesports3kcc/distributed_generate_livecc.py defaults
    --repetition_penalty to 1.15 and asks for at most 32 new tokens (max_new_tokens=32)."""
    written = read_config_file("livecc-7b")
    assert (written["repetition_penalty"], written["max_tokens_proactive"]) == (1.15, 32)
    assert "temperature" not in written  # greedy: generate without do_sample
    assert preset_adapters("livecc-7b") == ["transformers"]
    text = Path(PRESET_DIR / "livecc-7b.yaml").read_text()
    for cited in (
        "evaluation/livesports3kcc/distributed_generate_livecc.py",
        "demo/infer.py",
        "evaluation/distributed_mcq_predictor.py",
    ):
        assert cited in text
