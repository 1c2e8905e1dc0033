"""The videollm-online adapter on a tiny random checkpoint in the released layout: loading
(the LoRA merged, the connector read), and real runs through the Core where every frame's
speak-or-stay-silent decision is recorded at the step after it.

The tiny tokenizer is byte-level (one token per byte, one per special marker), so every
token count below is exact. Its text is random: the tests assert structure and counts.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

from tests.model_stack import require_model_stack

# No hub access, here and in the adapter processes (set before huggingface_hub reads it).
os.environ["HF_HUB_OFFLINE"] = "1"
require_model_stack()
pytestmark = pytest.mark.models  # .ci/run runs these in its model-stack venv

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

from streameval.adapters.config import AdapterConfigError  # noqa: E402
from streameval.adapters.errors import ModelLoadError  # noqa: E402
from streameval.adapters.registry import load_adapter  # noqa: E402
from streameval.adapters.sdk import Responder  # noqa: E402
from streameval.adapters.videollm_online.adapter import SYSTEM_PROMPT  # noqa: E402
from streameval.adapters.videollm_online.stream import LiveStream  # noqa: E402
from streameval.core.launch.adapter_process import AdapterProcess  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import EventKind  # noqa: E402
from streameval.protocol import Question  # noqa: E402
from tests.recording import Wire  # noqa: E402
from tests.test_cli import streameval  # noqa: E402
from tests.test_transformers_adapter import (  # noqa: E402
    assert_one_decision_per_step,
    jpeg_frame,
    new_session,
    run_core,
    workloads,
)
from tests.timeline_fixtures import PROACTIVE  # noqa: E402
from tests.tiny_videollm_online import (  # noqa: E402
    ALPHA,
    RANK,
    TinyVideoLLMOnline,
    adapted_modules,
    build_tiny_videollm_online,
)

FRAME_TOKENS = 10  # CLS + 3x3 pooled patches
# Fed with the first frame: <|begin_of_text|>, the system prompt, "\n" and "\n[".
FIRST_FRAME = 1 + len(SYSTEM_PROMPT.encode()) + 3 + FRAME_TOKENS
AFTER_SILENCE = 1 + FRAME_TOKENS  # the "," the model chose, then the frame


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> TinyVideoLLMOnline:
    return build_tiny_videollm_online(tmp_path_factory.mktemp("videollm-online"))


@pytest.fixture(scope="module")
def quiet(tmp_path_factory) -> TinyVideoLLMOnline:
    """A checkpoint whose interval token has probability about 0.92 after every frame."""
    return build_tiny_videollm_online(tmp_path_factory.mktemp("quiet"), interval_logit=8.0)


def loaded(tiny: TinyVideoLLMOnline, **options):
    """The adapter built and started (its weights read), in this process."""
    options = {"model": str(tiny.checkpoint), "vision": str(tiny.vision), **options}
    adapter = load_adapter("videollm-online", options)
    asyncio.run(adapter.start())
    return adapter


def test_the_checkpoint_loads_its_lora_merged_and_its_connector(tiny):
    adapter = loaded(tiny)
    base = dict(LlamaForCausalLM.from_pretrained(tiny.llm).named_modules())
    merged = dict(adapter.model.llm.named_modules())
    saved = load_file(str(tiny.checkpoint / "adapter_model.safetensors"))
    for name in adapted_modules():
        key = f"base_model.model.{name}"
        delta = saved[f"{key}.lora_B.weight"] @ saved[f"{key}.lora_A.weight"] * (ALPHA / RANK)
        assert torch.allclose(merged[name].weight, base[name].weight + delta, atol=1e-6)
    connector = adapter.model.connector.state_dict()
    for name, tensor in connector.items():
        assert torch.equal(tensor, saved[f"base_model.model.connector.{name}"])
    # The base LLM is the one adapter_config.json names; a frame is 10 LLM embeddings.
    assert adapter.model.encode_frame(torch.zeros(48, 64, 3, dtype=torch.uint8).numpy()).shape == (
        FRAME_TOKENS,
        32,
    )
    settings = adapter.conditions.settings
    assert (settings["frame_tokens"], settings["interval_threshold"]) == (FRAME_TOKENS, 0.725)
    assert adapter.conditions.state == "native" and adapter.conditions.initiation == "polled"


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("/nonexistent/checkpoint", "directory '/nonexistent/checkpoint' does not exist"),
        ("llm", "no adapter_config.json"),
        ("nobody/videollm", "'nobody/videollm' is neither a directory nor in the local cache"),
    ],
)
def test_a_bad_checkpoint_is_one_clear_error(tiny, model, message):
    path = str(tiny.llm) if model == "llm" else model
    with pytest.raises(AdapterConfigError, match=f"videollm-online config: model: .*{message}"):
        load_adapter("videollm-online", {"model": path, "vision": str(tiny.vision)})


def test_weights_that_do_not_fit_fail_the_load_with_the_reason(tiny, tmp_path):
    """Read by `start`: the server then reports `failed: REASON` on /healthz."""
    shutil.copytree(tiny.checkpoint, tmp_path / "checkpoint")
    weights = tmp_path / "checkpoint" / "adapter_model.safetensors"
    save_file({k: v for k, v in load_file(str(weights)).items() if "connector" not in k}, weights)
    adapter = load_adapter(
        "videollm-online", {"model": str(tmp_path / "checkpoint"), "vision": str(tiny.vision)}
    )
    with pytest.raises(ModelLoadError, match="the adapter holds no connector weights"):
        asyncio.run(adapter.start())


# ------------------------------------------------------------------ real runs


def serve(tiny: TinyVideoLLMOnline, **options) -> AdapterProcess:
    """`streameval adapter serve videollm-online -A model=<checkpoint> ...` as its own process;
    the default encoder id resolves in the checkpoint's Hugging Face cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", str(tiny.hub))
        process = AdapterProcess(
            "videollm-online", options={"model": str(tiny.checkpoint), **options}
        )
        return process.start()


def decisions(session) -> tuple[int, int, int]:
    """(steps, silent decisions, responses at steps) of a session's events."""
    steps = silent = spoken = 0
    at_step = False
    for event in session:
        if event.kind == EventKind.STEP_SENT:
            steps, at_step = steps + 1, True
        elif event.kind == EventKind.QUESTION_SENT:
            at_step = False
        elif event.kind == EventKind.SILENT:
            silent += 1
        elif event.kind == EventKind.RESPONSE_FINAL and at_step:
            spoken += 1
    return steps, silent, spoken


def check_every_frame_decided(events) -> None:
    """Every frame committed in order, a step after each (but the last of QA, where the
    question comes), and exactly one decision per step."""
    for session_id, session in events.items():
        frames = [e.payload.frame_id for e in session if e.kind == EventKind.FRAME_SENT]
        commits = [c["frame_ids"] for c in workloads(session, "state_commit") if c["images"]]
        assert commits == [[frame_id] for frame_id in frames]
        steps = [e.payload.step for e in session if e.kind == EventKind.STEP_SENT]
        assert steps == list(range(len(steps)))
        assert len(steps) == len(frames) - (session_id == "t:qa:1")
        assert_one_decision_per_step(session, steps)


def test_a_realstream_run_records_a_decision_at_every_frame(tiny, tmp_path):
    """The default threshold (0.725) over a random model: each frame decided at its step."""
    (tmp_path / "trace").mkdir()
    with serve(tiny, max_tokens=4) as process:
        events = run_core(process.url, "realstream", tmp_path)
        trace = run_core(process.url, "trace", tmp_path / "trace")
    check_every_frame_decided(events)
    # Under trace the steps start with the instruction: the frames before it are committed
    # (their decisions computed, not reported), every step is decided.
    for session in trace.values():
        frames = [e.payload.frame_id for e in session if e.kind == EventKind.FRAME_SENT]
        commits = [c["frame_ids"] for c in workloads(session, "state_commit") if c["images"]]
        assert commits == [[frame_id] for frame_id in frames]
        steps = [e.payload.step for e in session if e.kind == EventKind.STEP_SENT]
        assert_one_decision_per_step(session, steps)
    assert not any(e.kind == EventKind.STEP_SENT for e in trace["t:qa:1"])
    assert sum(e.kind == EventKind.STEP_SENT for e in trace["t:pro:1"]) == 14
    hello = next(e for e in events["t:qa:1"] if e.kind == EventKind.ADAPTER_HELLO)
    assert hello.payload.conditions.model_name == "checkpoint"
    assert hello.payload.conditions.settings["frame_tokens"] == FRAME_TOKENS
    qa, pro = events["t:qa:1"], events["t:pro:1"]
    # QA at 0.5 fps to the question at 17 s: 9 frames, 8 steps, then the answer.
    steps, silent, spoken = decisions(qa)
    assert (steps, silent + spoken) == (8, 8)
    final = [e.payload for e in qa if e.kind == EventKind.RESPONSE_FINAL][-1]
    assert 1 <= final.output_tokens <= 4
    calls = workloads(qa, "model_call")
    assert len(calls) == spoken + 1 and calls[-1]["output_tokens"] == final.output_tokens
    # Proactive: 9 frames from 0 s to 16 s, a decision after each.
    steps, silent, spoken = decisions(pro)
    assert (steps, silent + spoken) == (9, 9)
    assert len(workloads(pro, "model_call")) == spoken
    instruction = [c for c in workloads(pro, "state_commit") if c["images"] == 0]
    assert [c["input_tokens"] for c in instruction] == [
        len(f"]\nUser: {PROACTIVE.instruction}".encode())
    ]


def test_the_synthetic_benchmark_runs_to_the_end_with_a_decision_per_frame(tiny, tmp_path):
    """The Done-when: `streameval adapter serve videollm-online -A model=<checkpoint>` serves
    the whole synthetic benchmark (QA and proactive) through `streameval run` under the
    frame-level protocol, and every step gets its decision."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    with serve(tiny, max_tokens=4) as process:
        ran = streameval(
            "run", "--adapter-url", process.url, "--benchmark", "synthetic",
            "--profile", "realstream", "--cache-dir", str(tmp_path / "cache"),
            "--store", store, "--json",
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert (summary["sessions"], summary["finished"], summary["failed"]) == (20, 20, 0)
    events: dict[str, list] = {}
    with Store(store) as opened:
        for event in opened.iter_events(summary["run_id"]):
            events.setdefault(event.session_id, []).append(event)
    proactive = {
        session_id
        for session_id, session in events.items()
        if any(e.kind == EventKind.INSTRUCTION_SENT for e in session)
    }
    assert (len(proactive), len(events)) == (4, 20)
    for session_id, session in events.items():
        frames = [e.payload.frame_id for e in session if e.kind == EventKind.FRAME_SENT]
        commits = [c["frame_ids"] for c in workloads(session, "state_commit") if c["images"]]
        assert commits == [[frame_id] for frame_id in frames]
        steps = [e.payload.step for e in session if e.kind == EventKind.STEP_SENT]
        assert_one_decision_per_step(session, steps)
        if session_id in proactive:
            assert len(steps) == len(frames)  # a decision after every frame
            continue
        # QA: a decision after every frame but the last, where the question comes; answered.
        assert len(steps) == len(frames) - 1
        kinds = [e.kind for e in session]
        assert EventKind.RESPONSE_FINAL in kinds[kinds.index(EventKind.QUESTION_SENT) :]


@pytest.mark.parametrize(("threshold", "speaks"), [(0.0, False), (1.0, True)])
def test_the_threshold_decides_between_silence_and_speech(quiet, tmp_path, threshold, speaks):
    """The interval token is the argmax after every frame (p about 0.92): at threshold 0
    the model stays silent at every frame; at threshold 1 no probability reaches it and it
    speaks at every frame. Either way the instruction (a user turn, at 4 s, before that
    frame's step) is answered at its step, as the release's demo answers every query."""
    limit = 2
    with serve(quiet, max_tokens=limit, interval_threshold=threshold) as process:
        events = run_core(process.url, "realstream", tmp_path)
    check_every_frame_decided(events)
    qa, pro = events["t:qa:1"], events["t:pro:1"]
    assert decisions(qa) == ((8, 0, 8) if speaks else (8, 8, 0))
    assert decisions(pro) == ((9, 0, 9) if speaks else (9, 8, 1))
    assert len(workloads(qa, "model_call")) == (8 if speaks else 0) + 1  # and the question
    assert len(workloads(pro, "model_call")) == (9 if speaks else 1)
    if speaks:
        return
    # The context, read off the tokens each commit fed: the first frame carries the system
    # prompt; a frame after a silent one the "," the model chose; the instruction closes
    # the frame list; the frame after its answer carries the answer's end (its last token
    # too when the limit cut it), <|eot_id|> and "\n[".
    (answer,) = workloads(pro, "model_call")
    cut = answer["output_tokens"] == limit
    after_answer = (2 if cut else 1) + 2 + FRAME_TOKENS
    instruction = len(f"]\nUser: {PROACTIVE.instruction}".encode())
    tokens = [c["input_tokens"] for c in workloads(pro, "state_commit")]
    assert (
        tokens
        == [FIRST_FRAME, AFTER_SILENCE, AFTER_SILENCE, instruction, after_answer]
        + [AFTER_SILENCE] * 5
    )


# ------------------------------------------------------------------ in process


def test_appending_frame_by_frame_equals_one_pass_over_the_conversation(tiny):
    """The cache after two frames and a user turn, fed one input at a time, is the cache of
    the whole conversation in one forward pass: the format's tokens, the frames' embeddings."""
    adapter = loaded(tiny)
    model = adapter.model
    stream = LiveStream(model, "sys", adapter.interval_id)
    frames = [model.encode_frame(jpeg_frame(index).rgb()) for index in range(2)]
    for index, embeds in enumerate(frames):
        stream.add_frame(embeds, threshold=0.0, frame_id=f"f{index}")
    stream.add_user("hi")
    embed = model.llm.get_input_embeddings()

    def text(value: str) -> torch.Tensor:
        return embed(torch.tensor(model.tokenize(value)))

    whole = torch.cat(
        [text("<|begin_of_text|>sys\n\n["), frames[0], text(","), frames[1], text("]\nUser: hi")]
    )
    assert stream.length == whole.shape[0] == 1 + 6 + 10 + 1 + 10 + 10
    fresh = model.new_cache()
    with torch.no_grad():
        model.llm(inputs_embeds=whole[None], use_cache=True, **{model._cache_keyword: fresh})
    probe = model.tokenize("x")
    assert torch.allclose(model.append(stream.cache, probe), model.append(fresh, probe), atol=1e-5)


def frames_into(adapter, count: int, question: Question | None = None):
    """A session of `count` frames (then `question`) and no decisions: its wire, its stream."""
    wire = Wire()
    session = new_session(wire)

    async def go() -> None:
        await adapter.on_session_start(session)
        for index in range(count):
            await adapter.on_frame(session, jpeg_frame(index))
        if question is not None:
            await adapter.on_question(session, question, Responder(wire.send, question.task_id))

    asyncio.run(go())
    return wire, session.state["stream"]


def test_frames_past_the_bound_are_dropped_and_a_turn_without_room_is_fatal(tiny):
    reserve = 5
    bounded = loaded(tiny, context_tokens=FIRST_FRAME + AFTER_SILENCE + reserve,
                     reserve_tokens=reserve, cache_policy="fail")  # fmt: skip
    assert bounded.conditions.settings["cache_max_tokens"] == FIRST_FRAME + AFTER_SILENCE
    question = Question(task_id="q", t=4.0, text="Which?", options=["A. one", "B. two"])
    wire, _ = frames_into(bounded, 3, question)
    records = [(m["kind"], m["frame_ids"], m["input_tokens"]) for m in wire.of("workload")]
    assert records == [
        ("state_commit", ["f0"], FIRST_FRAME),
        ("state_commit", ["f1"], AFTER_SILENCE),
        ("drop", ["f2"], None),
    ]
    # "]\nUser: Which?\nA. one\nB. two\nAssistant:" does not leave one answer token.
    assert wire.of("error") == [
        {
            "type": "error",
            "code": "context_full",
            "message": f"the context of {bounded.context_tokens} tokens is full",
            "fatal": True,
        }
    ]


def test_a_full_cache_evicts_the_oldest_frames_and_stops_attending_to_them(tiny):
    """Room for the first frame and two more: each later frame evicts the oldest but the
    first. What the model computes next is what a cache of every frame gives with each
    evicted frame masked out from its eviction on, each kept token at the position it was
    fed at: eviction is no longer attending, nothing else."""
    reserve = 5
    bounded = loaded(tiny, context_tokens=FIRST_FRAME + 2 * AFTER_SILENCE + reserve,
                     reserve_tokens=reserve)  # fmt: skip
    assert bounded.conditions.settings["cache_policy"] == "evict-oldest"
    wire, stream = frames_into(bounded, 5)
    records = [(m["kind"], m["frame_ids"]) for m in wire.of("workload")]
    assert records == [
        ("state_commit", ["f0"]),
        ("state_commit", ["f1"]),
        ("state_commit", ["f2"]),
        ("evict", ["f1"]),
        ("state_commit", ["f3"]),
        ("evict", ["f2"]),
        ("state_commit", ["f4"]),
    ]
    assert stream.length == FIRST_FRAME + 2 * AFTER_SILENCE
    assert stream.position == FIRST_FRAME + 4 * AFTER_SILENCE

    # The reference: every frame kept in a cache, each input masked from the frames
    # evicted before it was fed (f1 from f3 on, f2 from f4 on).
    model = bounded.model
    embed = model.llm.get_input_embeddings()
    opening = model.tokenize(f"<|begin_of_text|>{SYSTEM_PROMPT}\n\n[")
    f1 = range(FIRST_FRAME, FIRST_FRAME + AFTER_SILENCE)
    f2 = range(FIRST_FRAME + AFTER_SILENCE, FIRST_FRAME + 2 * AFTER_SILENCE)
    whole = model.new_cache()

    def feed(inputs: torch.Tensor, hidden: list[range]) -> torch.Tensor:
        past = whole.get_seq_length()
        mask = torch.ones(1, past + inputs.shape[0], dtype=torch.long)
        for slots in hidden:
            mask[0, list(slots)] = 0
        with torch.no_grad():
            return model.llm(
                inputs_embeds=inputs[None],
                attention_mask=mask,
                use_cache=True,
                **{model._cache_keyword: whole},
            ).logits[0, -1]

    for index, hidden in enumerate([[], [], [], [f1], [f1, f2]]):
        prefix = opening if index == 0 else [bounded.interval_id]
        frame = model.encode_frame(jpeg_frame(index).rgb())
        feed(torch.cat([embed(torch.tensor(prefix)), frame]), hidden)
    probe = model.tokenize("x")
    reference = feed(embed(torch.tensor(probe)), [f1, f2])
    evicted = model.append(stream.cache, probe, start=stream.position)
    assert torch.allclose(evicted, reference, atol=1e-5)
