"""The `videollm-online` adapter: VideoLLM-online deciding at every frame whether to speak.

Each delivered frame is encoded (SigLIP, CLS + 3x3 pooled patches, the connector) and run
on top of the session's KV cache (a `state_commit`); the same forward pass gives the
probability of the frame interval token `,`, which is the model's decision: silent when it
is the argmax and at least `interval_threshold` (the release's
frame_token_interval_threshold), else it speaks. The decision
is reported at the Core's next `step` (polled initiation: under the `realstream` profile a
step follows every frame, so every frame's decision is recorded): a `silent`, or the
Assistant turn generated greedily and streamed token by token (a `model_call`). A question
is a user turn answered at once; an instruction is a user turn answered at the next step,
as the release's demo answers every query, then the frames decide again. stream.py lays
out the format.

Options: `VideoLLMOnlineConfig` (`streameval adapter serve videollm-online -A
model=/models/videollm-online-8b-v1plus -A llm=/models/Meta-Llama-3-8B-Instruct -A
vision=/models/siglip-large-patch16-384`). Torch and transformers are imported by the
constructor only, which checks the options, folders and tokenizer; `start` reads the weights
while the server already answers /healthz.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from streameval.adapters import chat_prompts as prompts
from streameval.adapters.config import AdapterConfig, AdapterConfigError
from streameval.adapters.errors import ModelLoadError
from streameval.adapters.hf.text import IncrementalText
from streameval.adapters.sdk import (
    Adapter,
    Frame,
    Responder,
    ResponseStream,
    Session,
    load_in_thread,
)
from streameval.adapters.videollm_online.stream import ASSISTANT, LiveStream, user_turn
from streameval.protocol import AdapterConditions, AdapterError, Instruction, Question, Step

if TYPE_CHECKING:
    from streameval.adapters.videollm_online.model import LiveModel

# models/arguments_live.py, LiveTrainingArguments.system_prompt.
SYSTEM_PROMPT = (
    "A multimodal AI assistant is helping users with some activities. Below is their "
    "conversation, interleaved with the list of video frames received by the assistant."
)


class VideoLLMOnlineConfig(AdapterConfig):
    """Defaults are VideoLLM-online-8B-v1+'s (models/arguments_live.py LiveOnePlus...,
    demo/inference.py)."""

    model: str = Field(description="the checkpoint: a directory with the PEFT LoRA adapter")
    llm: str | None = Field(
        None,
        description="the base LLM (a directory, or an id in the local Hugging Face cache); "
        "default: adapter_config.json's base_model_name_or_path",
    )
    vision: str = Field(
        "google/siglip-large-patch16-384",
        description="the SigLIP frame encoder (a directory, or an id in the local cache)",
    )
    model_name: str = Field("", description="declared model name; default: the last path part")
    model_version: str = Field("", description="a revision or date, recorded with results")
    frame_cls: bool = Field(True, description="a frame's tokens start with SigLIP's CLS")
    frame_pooled: int = Field(
        3, ge=0, description="the patch grid average-pooled to NxN tokens (0: none)"
    )
    frame_interval: str = Field(",", min_length=1, description="the frame interval token")
    interval_threshold: float = Field(
        0.725,
        ge=0,
        le=1,
        description="speak when the interval token's probability is below it (or not the "
        "argmax); the demo's 0.725",
    )
    frame_fps: float = Field(
        2, gt=0, description="the frame rate the model was trained at (run the Core at it)"
    )
    system_prompt: str = Field(SYSTEM_PROMPT, description="the system turn")
    qa_prompt: str = Field(
        "{question}\n{options}", description="a multiple-choice user turn ({question}, {options})"
    )
    open_qa_prompt: str = Field("{question}", description="a question without options")
    max_tokens: int = Field(
        100, ge=1, description="answer length limit (the demo's 100-token output buffer)"
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: bfloat16 on a GPU (the release's), float32 on a CPU"
    )
    device: str = Field("auto", description="'auto' = cuda when available, else cpu")
    context_tokens: int | None = Field(
        None, ge=1, description="the cache bound; default: the LLM's maximum positions"
    )
    reserve_tokens: int = Field(
        256, ge=0, description="kept free for turns: frames fill the cache to context - reserve"
    )
    cache_policy: Literal["evict-oldest", "fail"] = Field(
        "evict-oldest",
        description="when a frame would pass context - reserve: evict-oldest = remove the "
        "oldest frames and step answers from the cache (the first frame, user turns and the "
        "answers to questions stay); fail = drop the new frame",
    )

    @field_validator("qa_prompt", "open_qa_prompt")
    @classmethod
    def _known_placeholders(cls, template: str, info) -> str:
        return prompts.check_template(info.field_name, template)


class VideoLLMOnlineAdapter(Adapter):
    name = "videollm-online"
    version = "1"
    Config = VideoLLMOnlineConfig

    def __init__(self, config: VideoLLMOnlineConfig) -> None:
        from streameval.adapters.videollm_online.model import FrameLayout, LiveSources

        self.config = config
        self.layout = FrameLayout(config.frame_cls, config.frame_pooled)
        if self.layout.tokens == 0:
            raise AdapterConfigError(
                "videollm-online config: frame_cls false and frame_pooled 0 leave a frame no tokens"
            )
        # What can be wrong with the options is found here, in one line; the weights are
        # read by `start`, while the server already answers /healthz.
        try:
            self.sources = LiveSources.resolve(config.model, config.llm, config.vision)
            self.interval_id = self.sources.single_token(config.frame_interval)
        except ModelLoadError as exc:
            raise AdapterConfigError(f"videollm-online config: model: {exc}") from None
        self.model: LiveModel | None = None
        self.context_tokens = config.context_tokens or self.sources.max_context
        self.frame_limit = self.context_tokens - config.reserve_tokens
        if self.frame_limit < 1:
            raise AdapterConfigError(
                f"videollm-online config: reserve_tokens {config.reserve_tokens} leaves no "
                f"room in a context of {self.context_tokens} tokens"
            )
        resolution = self.sources.resolution
        self.conditions = AdapterConditions(
            state="native",
            initiation="polled",
            boundary="model+adapter",
            deployment="in-process",
            model_name=config.model_name or Path(config.model).name,
            model_version=config.model_version,
            history=self._history(self.layout.tokens),
            settings={
                "frame_tokens": self.layout.tokens,
                "frame_resolution": resolution,
                "context_tokens": self.context_tokens,
                "cache_max_tokens": self.frame_limit,
            },
        )

    async def start(self) -> None:
        from streameval.adapters.videollm_online.model import LiveModel

        config = self.config

        def load() -> LiveModel:
            return LiveModel.load(self.sources, self.layout, config.dtype, config.device)

        self.model = await load_in_thread(load, "videollm-online-load")

    def _history(self, frame_tokens: int) -> str:
        config = self.config
        return (
            f"every delivered frame as {frame_tokens} tokens (SigLIP at "
            f"{self.sources.resolution}x{self.sources.resolution}) in one KV cache with every "
            f"turn, as the model's own stream format; a decision per frame (speak when the "
            f"interval token {config.frame_interval!r} is below "
            f"{config.interval_threshold} or not the argmax); trained at "
            f"{config.frame_fps:g} fps; the cache bounded at {self.frame_limit} tokens before "
            f"a frame ({self._bound()})"
        )

    def _bound(self) -> str:
        if self.config.cache_policy == "fail":
            return "cache_policy=fail: frames past it are dropped"
        return (
            "cache_policy=evict-oldest: the oldest frames and step answers are evicted in "
            "place, kept keys keep their positions; the first frame, user turns and the "
            "answers to questions stay"
        )

    def gpu_identity(self) -> str | None:
        from streameval.adapters.hf.model import device_identity

        return None if self.model is None else device_identity(self.model.device)

    # ------------------------------------------------------------------ hooks

    async def on_session_start(self, session: Session) -> None:
        session.state["stream"] = LiveStream(
            self.model, self.config.system_prompt, self.interval_id
        )

    async def on_frame(self, session: Session, frame: Frame) -> None:
        stream: LiveStream = session.state["stream"]
        incoming = len(stream.frame_prefix()) + self.layout.tokens
        # An eviction is its own record: the commit's interval starts after it.
        started = await self._make_room(session, incoming, self.frame_limit) or time.monotonic_ns()
        if stream.length + incoming > self.frame_limit:
            await session.workload(kind="drop", frame_ids=[frame.frame_id], images=1)
            session.state["speak"] = False  # nothing new to decide on
            return
        threshold = self.config.interval_threshold
        embeds = await asyncio.to_thread(self.model.encode_frame, frame.rgb())
        decision = await asyncio.to_thread(stream.add_frame, embeds, threshold, frame.frame_id)
        session.state["speak"] = decision.speak
        await session.workload(
            kind="state_commit",
            frame_ids=[frame.frame_id],
            images=1,
            pixels=self.sources.resolution**2,
            input_tokens=decision.tokens,
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )

    async def _make_room(self, session: Session, incoming: int, limit: int) -> int | None:
        """Under evict-oldest, evict until `incoming` more tokens fit in `limit`; each
        eviction is an `evict` workload record. When it ended; None when there was none."""
        if self.config.cache_policy == "fail":
            return None
        stream: LiveStream = session.state["stream"]
        started = time.monotonic_ns()
        evicted = await asyncio.to_thread(stream.evict, incoming, limit)
        if evicted is None:
            return None
        ended = time.monotonic_ns()
        await session.workload(
            kind="evict",
            frame_ids=evicted,
            images=len(evicted),
            started_ns=started,
            ended_ns=ended,
        )
        return ended

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        # A frame's decision (or an instruction's due answer) is reported once, at the step
        # after it; a step with nothing new since the last decision is silent.
        if not session.state.pop("speak", False):
            await respond.silent(step.step)
            return
        await self._answer(session, respond, ASSISTANT, step.step)

    async def on_question(self, session: Session, question: Question, respond: Responder):
        session.state.pop("speak", None)  # the frame list closes for the user's turn
        config = self.config
        text = prompts.qa_prompt(
            config.qa_prompt, config.open_qa_prompt, question.t, question.text, question.options
        )
        await self._answer(session, respond, user_turn(text) + ASSISTANT, None)

    async def on_instruction(self, session: Session, instruction: Instruction, respond: Responder):
        # The release's demo answers every user turn at once: the next step speaks.
        session.state["speak"] = True
        stream: LiveStream = session.state["stream"]
        incoming = len(stream.turn_prefix(user_turn(instruction.text)))
        started = await self._make_room(session, incoming, self.frame_limit) or time.monotonic_ns()
        tokens = await asyncio.to_thread(stream.add_user, instruction.text)
        await session.workload(
            kind="state_commit",
            images=0,
            input_tokens=tokens,
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )

    async def on_session_end(self, session: Session) -> None:
        session.state.pop("stream", None)  # frees the cache

    # ------------------------------------------------------------------ generation

    async def _answer(
        self, session: Session, respond: Responder, turn: str, step: int | None
    ) -> None:
        """Generate the Assistant turn greedily from the cache, streaming one delta per token;
        at a step, a turn ended before its first token is a silent decision."""
        stream: LiveStream = session.state["stream"]
        prompt = len(stream.turn_prefix(turn))
        await self._make_room(session, prompt + self.config.max_tokens + 2, self.context_tokens)
        room = self.context_tokens - stream.length - prompt - 2
        limit = min(self.config.max_tokens, room)
        if limit < 1:
            full = f"the context of {self.context_tokens} tokens is full"
            await session.send(
                AdapterError(code="context_full", message=full, fatal=True).model_dump_json()
            )
            return
        started = time.monotonic_ns()
        text = IncrementalText(self.model.detokenize)
        kind = "pinned" if step is None else "reply"
        token, fed = await asyncio.to_thread(stream.open_turn, turn, kind)
        response: ResponseStream | None = None  # opened by the first generated token
        generated, last = 0, None
        while token != self.model.eos_id:
            generated += 1
            response = response or respond.stream()
            await response.token(text.push(token))
            if generated == limit:
                last = token
                break
            token = await asyncio.to_thread(stream.feed, token)
        stream.close_turn(last)
        if response is None and step is not None:
            await respond.silent(step)  # the model ended the turn at once: nothing said
        else:
            await (response or respond.stream()).finish(output_tokens=generated)
        await session.workload(
            kind="model_call",
            images=0,
            input_tokens=fed,
            output_tokens=generated,
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )
