"""The `transformers` adapter: a Hugging Face VideoLLM that keeps its own streaming state.

Native streaming: every session owns a KV cache, bounded by `cache_max_tokens` under an
evicting `cache_policy` (adapters/hf/stream.py: the oldest frame blocks go, each eviction an
`evict` workload record). Each delivered frame is run on top of it as it arrives (a
`state_commit` per frame; in `input_mode: video` per chunk of frames), a question or a
decision step is appended and generation continues from the cache, and the answer (or the
wait word) stays in context. At every `step` of a proactive task the model itself decides:
its text is held back while it could still be the wait word, then either a `silent`
decision or a streamed answer goes out (polled initiation; under the `realstream` profile
this is RealStreamEval's frame-level multi-turn protocol).

A model that hears (Qwen2.5-Omni's thinker) takes the stream's sound too (`consumes_audio`):
delivered audio chunks are buffered and their span goes into the cache as one audio block
after `audio_label` (a `state_commit` with its seconds and audio tokens) before the next
frame, text or decision, and whenever the buffer fills the audio encoder's window (2 s for
the released model: the encoder attends within it, so a longer block would be cut there
anyway). The model so hears everything delivered before it sees the next frame or
decides, in stream order, with as few block markers as that order allows. Questions left at
their default wording then name the sound, as the chat adapters' do. Decoding is greedy
unless the options ask for sampling or a repetition penalty (adapters/hf/decoding.py).

Options: `TransformersAdapterConfig` (`streameval adapter serve transformers -A
model=/models/Qwen2-VL-7B-Instruct -A visual_tokens=128`). Torch and transformers are
imported by the constructor only, so reading the options never loads a model stack. Model
calls run in worker threads, so the event loop keeps serving other sessions and heartbeats
while the model computes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from streameval.adapters import chat_prompts as prompts
from streameval.adapters.config import AdapterConfig, AdapterConfigError
from streameval.adapters.errors import ModelLoadError
from streameval.adapters.hf.chat import (
    AFTER_ANSWER,
    ASSISTANT_TURN,
    INSTRUCTION_PROMPT,
    STANDBY_PROMPT,
    ChatFormat,
)
from streameval.adapters.hf.text import IncrementalText
from streameval.adapters.sdk import (
    Adapter,
    AudioChunk,
    Frame,
    Responder,
    ResponseStream,
    Session,
)
from streameval.adapters.settings import RECORDED_IF_CHANGED
from streameval.protocol import (
    AdapterConditions,
    AdapterError,
    Instruction,
    Question,
    Step,
)

if TYPE_CHECKING:
    from streameval.adapters.hf.decoding import Decoding, TokenChooser
    from streameval.adapters.hf.model import EncodedAudio, EncodedFrame, Media
    from streameval.adapters.hf.stream import StreamState

# Sample values for the placeholders of this adapter's own templates (checked at load).
_OWN_PLACEHOLDERS = {
    "instruction_prompt": {"t": 1.0, "instruction": "i", "wait": "w"},
    "standby_prompt": {"wait": "w"},
}


class TransformersAdapterConfig(AdapterConfig):
    """How the model is loaded and prompted. Visual tokens per frame: the EvoStreaming paper
    evaluates at 128 (its training setting) and 768 (full resolution)."""

    model: str = Field(description="a local model directory (or a Hugging Face id)")
    model_name: str = Field("", description="declared model name; default: the last path part")
    model_version: str = Field("", description="a revision or date, recorded with results")
    visual_tokens: int = Field(768, ge=4, description="cap on visual tokens per frame")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weights' dtype; auto: the checkpoint's"
    )
    device: str = Field("auto", description="'auto' = cuda when available, else cpu")
    random_weights: bool = Field(
        False,
        description="build the model from the directory's config.json with random weights, "
        "reading no weights (speed checks of a full-size model; its answers are noise)",
    )
    attn_implementation: str | None = Field(None, description="eager, sdpa, flash_attention_2")
    max_tokens_qa: int = Field(32, ge=1, description="answer length limit")
    max_tokens_proactive: int = Field(64, ge=1, description="decision length limit")
    # Decoding, added after runs were recorded: the defaults are the greedy decoding of those
    # runs, left out of the settings at their default (RECORDED_IF_CHANGED).
    temperature: float = Field(
        0.0,
        ge=0,
        description="sampling temperature; 0 = greedy",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="sampling: keep the smallest set of tokens with this probability mass",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    top_k: int | None = Field(
        None,
        ge=1,
        description="sampling: keep the k likeliest tokens (null: all)",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    repetition_penalty: float = Field(
        1.0,
        gt=0,
        description="Hugging Face's repetition penalty over the token ids in the session's "
        "cache and the reply so far; 1 = none",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    seed: int = Field(
        0,
        description="sampling: seed of each session's generator (a rerun draws the same)",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    context_tokens: int | None = Field(
        None, ge=1, description="context budget; default: the model's maximum"
    )
    reserve_tokens: int = Field(
        1024,
        ge=0,
        description="kept free for questions and answers: the default cache_max_tokens is "
        "context_tokens - reserve_tokens",
    )
    cache_policy: Literal["evict-oldest", "reprefill", "fail"] = Field(
        "evict-oldest",
        description="when a frame would pass cache_max_tokens: evict-oldest = remove the "
        "oldest frame blocks (and the decisions that followed them) from the cache in place; "
        "reprefill = remove them and recompute the cache from what is kept; fail = drop the "
        "new frame (a decision with no room left is then a fatal context_full)",
    )
    cache_max_tokens: int | None = Field(
        None, ge=1, description="bound on the cache before a frame; default: context - reserve"
    )
    evict_frames: int = Field(
        1, ge=1, description="frame blocks evicted at least per eviction (more when needed)"
    )
    frame_label: str | None = Field(
        prompts.FRAME_LABEL,
        description="text before each frame ({t}, {index}: its position among the committed "
        "frames); null for none",
    )
    system_prompt: str | None = Field(None, description="a system turn")
    qa_prompt: str = Field(
        prompts.QA_PROMPT, description="multiple-choice question ({t}, {question}, {options})"
    )
    open_qa_prompt: str = Field(
        prompts.OPEN_QA_PROMPT, description="question without options ({t}, {question})"
    )
    instruction_prompt: str = Field(
        INSTRUCTION_PROMPT, description="a proactive instruction ({t}, {instruction}, {wait})"
    )
    standby_prompt: str = Field(
        STANDBY_PROMPT, description="the first decision before any question or task ({wait})"
    )
    wait_word: str = Field("<silent>", min_length=1, description="what the model says to wait")
    stop_words: list[str] = Field(
        default_factory=list,
        description="texts that end a reply once generated (matched on the reply's text; "
        "the word stays in the reply and in context), besides the end-of-turn tokens",
    )
    input_mode: Literal["images", "video"] = Field(
        "images",
        description="images: each frame is an image block; video: chunks of chunk_frames "
        "frames are video blocks (the model's video path)",
    )
    chunk_frames: int = Field(
        2, ge=1, description="video mode: frames per chunk, a multiple of temporal_patch_size"
    )
    first_chunk_frames: int | None = Field(
        None,
        ge=1,
        description="video mode: frames in a session's first chunk (LiveCC: 6, three "
        "seconds at 2 fps); default chunk_frames",
    )
    decide_at: Literal["step", "chunk"] = Field(
        "step",
        description="video mode (its default: chunk): step = the model decides at every step "
        "(pending frames are committed first, in whole temporal patches); chunk = once per "
        "committed chunk, at the first step after it; other steps are silent decisions "
        "without a model call (how chunk-trained streaming models run)",
    )
    chunk_label: str | None = Field(
        "Time={start:.1f}-{end:.1f}s",
        description="video mode: text before a chunk ({start}, {end}: its span in seconds)",
    )
    # Added with sound (issue 37); only a model that hears reads it.
    audio_label: str | None = Field(
        prompts.AUDIO_LABEL,
        description="a model that hears: text before each audio block ({start}, {end}: its "
        "span in video seconds), as the chat adapters label a sound span; null for none",
        json_schema_extra=RECORDED_IF_CHANGED,
    )

    @model_validator(mode="before")
    @classmethod
    def _decide_at_follows_the_mode(cls, values: object) -> object:
        """Unset, `decide_at` is `chunk` in video mode (decisions follow the chunks, no
        frame is padded for a step) and `step` in images mode, as the settings record."""
        if isinstance(values, dict) and "decide_at" not in values:
            video = values.get("input_mode") == "video"
            return {**values, "decide_at": "chunk" if video else "step"}
        return values

    @field_validator("stop_words")
    @classmethod
    def _no_empty_stop_word(cls, words: list[str]) -> list[str]:
        return prompts.check_stop_words(words)

    @field_validator("chunk_label", "audio_label")
    @classmethod
    def _span_placeholders(cls, template: str | None) -> str | None:
        if template is not None:
            try:
                template.format(start=0.0, end=1.0)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"bad template ({exc!r}); it may use {{start}}, {{end}}") from None
        return template

    @field_validator("qa_prompt", "open_qa_prompt", "frame_label")
    @classmethod
    def _known_placeholders(cls, template: str | None, info) -> str | None:
        return None if template is None else prompts.check_template(info.field_name, template)

    @field_validator("instruction_prompt", "standby_prompt")
    @classmethod
    def _own_placeholders(cls, template: str, info) -> str:
        fields = _OWN_PLACEHOLDERS[info.field_name]
        try:
            template.format(**fields)
        except (KeyError, IndexError, ValueError) as exc:
            allowed = ", ".join("{" + name + "}" for name in fields)
            raise ValueError(f"bad template ({exc!r}); it may use {allowed}") from None
        return template

    def chat_format(self, sound: bool = False) -> ChatFormat:
        """`sound`: a session the model hears; questions left at their default wording
        name the sound, as the chat adapters' do (adapters/chat_prompts.py)."""
        named = self.model_fields_set
        sounding = sound and "qa_prompt" not in named
        sounding_open = sound and "open_qa_prompt" not in named
        return ChatFormat(
            system_prompt=self.system_prompt,
            frame_label=self.frame_label,
            qa_prompt=prompts.AUDIO_QA_PROMPT if sounding else self.qa_prompt,
            open_qa_prompt=prompts.AUDIO_OPEN_QA_PROMPT if sounding_open else self.open_qa_prompt,
            instruction_prompt=self.instruction_prompt,
            standby_prompt=self.standby_prompt,
            wait_word=self.wait_word,
        )

    def decoding(self) -> Decoding:
        from streameval.adapters.hf.decoding import Decoding

        return Decoding(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            repetition_penalty=self.repetition_penalty,
            seed=self.seed,
        )


class TransformersAdapter(Adapter):
    name = "transformers"
    version = "1"
    Config = TransformersAdapterConfig

    def __init__(self, config: TransformersAdapterConfig) -> None:
        from streameval.adapters.hf.model import VisionLanguageModel

        self.config = config
        try:
            self.vlm = VisionLanguageModel.load(
                config.model,
                config.visual_tokens,
                config.dtype,
                config.device,
                config.attn_implementation,
                config.random_weights,
            )
        except ModelLoadError as exc:
            raise AdapterConfigError(f"transformers config: model: {exc}") from None
        self.chat = config.chat_format()
        self._chat_heard = config.chat_format(sound=True)  # sessions that stream sound
        self.decoding = config.decoding()
        self.context_tokens = config.context_tokens or self.vlm.max_context
        self.cache_max_tokens = config.cache_max_tokens or (
            self.context_tokens - config.reserve_tokens
        )
        if not 1 <= self.cache_max_tokens <= self.context_tokens:
            raise AdapterConfigError(
                f"transformers config: cache_max_tokens: {self.cache_max_tokens} is not "
                f"between 1 and the context of {self.context_tokens} tokens"
            )
        self._assistant_turn = self.vlm.tokenize(ASSISTANT_TURN)
        self._after_answer = self.vlm.tokenize(AFTER_ANSWER)
        # str.endswith with an empty tuple is always False: no stop words, no early stop.
        self._stop_words = tuple(config.stop_words)
        if config.input_mode == "video":
            self._check_video()
        elif config.first_chunk_frames is not None or config.decide_at != "step":
            raise AdapterConfigError(
                "transformers config: first_chunk_frames and decide_at apply to input_mode: "
                "video only"
            )
        self.consumes_audio = self.vlm.hears
        # The declared model is only known once configured, so conditions are per instance.
        self.conditions = AdapterConditions(
            state="native",
            initiation="polled",
            boundary="model+adapter",
            deployment="in-process",
            model_name=config.model_name or Path(config.model).name,
            model_version=config.model_version,
            history=self._history(),
            settings=self._settings(),
        )

    @property
    def _first_chunk(self) -> int:
        return self.config.first_chunk_frames or self.config.chunk_frames

    def _check_video(self) -> None:
        step = self.vlm.temporal_patch
        if self.vlm.video_token_id is None:
            raise AdapterConfigError(
                "transformers config: input_mode: video needs a model with a video token"
            )
        for option in ("chunk_frames", "first_chunk_frames"):
            frames = getattr(self.config, option)
            if frames is not None and frames % step:
                raise AdapterConfigError(
                    f"transformers config: {option}: {frames} is not a multiple of the "
                    f"model's temporal patch size {step}"
                )

    def _history(self) -> str:
        config = self.config
        frames = f"every delivered frame (at most {config.visual_tokens} visual tokens)"
        if config.input_mode == "video":
            first = (
                f" ({self._first_chunk} in the first)"
                if self._first_chunk != config.chunk_frames
                else ""
            )
            decide = (
                "; decisions only once a chunk is complete" if config.decide_at == "chunk" else ""
            )
            frames = (
                f"every delivered frame, in video chunks of {config.chunk_frames} frames{first} "
                f"(at most {config.visual_tokens} visual tokens per {self.vlm.temporal_patch} "
                f"frames{decide})"
            )
        if self.vlm.hears:
            frames += (
                ", the stream's sound in audio blocks of at most "
                f"{self.vlm.audio_window_s:g} s (each before the next frame, text or decision)"
            )
        bound = f"a KV cache of at most {self.cache_max_tokens} tokens before a frame"
        kept = (
            "; the preamble, instructions, questions and their answers always stay, the "
            "oldest frame blocks and the step decisions after them go"
        )
        if config.cache_policy == "evict-oldest":
            return (
                f"{frames} and every answer or wait word, in {bound}{kept} (cache_policy="
                f"evict-oldest: evicted in place, at least {config.evict_frames} frame(s) at "
                "a time; kept keys keep their positions until the model's maximum position, "
                "then gaps are closed)"
            )
        if config.cache_policy == "reprefill":
            return (
                f"{frames} and every answer or wait word, in {bound}{kept} (cache_policy="
                f"reprefill: at least {config.evict_frames} frame(s) at a time, then the cache "
                "is recomputed from what is kept)"
            )
        return (
            f"{frames} and every answer or wait word, in a persistent KV cache (cache_policy="
            f"fail: frames past {self.cache_max_tokens} tokens are dropped)"
        )

    def _settings(self) -> dict[str, str | int | float | bool]:
        config = self.config
        settings: dict[str, str | int | float | bool] = {
            "cache_policy": config.cache_policy,
            "cache_max_tokens": self.cache_max_tokens,
            "context_tokens": self.context_tokens,
            "visual_tokens": config.visual_tokens,
            "input_mode": config.input_mode,
        }
        if config.input_mode == "video":
            settings["chunk_frames"] = config.chunk_frames
            settings["first_chunk_frames"] = self._first_chunk
            settings["decide_at"] = config.decide_at
        if config.cache_policy != "fail":
            settings["evict_frames"] = config.evict_frames
        return settings

    def gpu_identity(self) -> str | None:
        from streameval.adapters.hf.model import device_identity

        return device_identity(self.vlm.device)

    def info(self) -> dict[str, Any]:
        # GET /info: the sessions' KV caches now, how a long stream is seen to stay flat.
        return {**super().info(), "memory": self.vlm.memory()}

    # ------------------------------------------------------------------ hooks

    async def on_session_start(self, session: Session) -> None:
        from streameval.adapters.hf.decoding import TokenChooser
        from streameval.adapters.hf.stream import StreamState

        reprefill = self.config.cache_policy == "reprefill"
        session.state["stream"] = StreamState(
            self.vlm, reprefill=reprefill, track_ids=self.decoding.penalised
        )
        session.state["chooser"] = TokenChooser(self.decoding, self.vlm.device)
        session.state["frames"] = 0
        session.state["audio"] = []  # chunks heard and not yet committed
        await self._commit_text(session, self.chat.preamble())
        await self._check_sample_rate(session)

    async def _check_sample_rate(self, session: Session) -> None:
        """The model's feature extractor takes one rate (16 kHz for Qwen2.5-Omni): a run
        streaming another is refused, fatally, once, and its chunks are not heard."""
        audio = session.conditions.audio
        if audio is None or not self.vlm.hears or audio.sample_rate == self.vlm.sample_rate:
            return
        session.state["audio"] = None
        message = (
            f"the model hears {self.vlm.sample_rate} Hz sound; this run streams "
            f"{audio.sample_rate} Hz (audio_sample_rate)"
        )
        error = AdapterError(code="unsupported", message=message, fatal=True)
        await session.send(error.model_dump_json())

    async def on_audio(self, session: Session, chunk: AudioChunk) -> None:
        # A video without sound sends zeros marked silent: there is nothing to hear, so
        # they cost the model no tokens. None: a sample rate the model does not take.
        if chunk.silent or session.state["audio"] is None:
            return
        buffered: list[AudioChunk] = session.state["audio"]
        buffered.append(chunk)
        if sum(c.duration_s for c in buffered) >= self.vlm.audio_window_s:
            await self._commit_audio(session)

    async def on_frame(self, session: Session, frame: Frame) -> None:
        if self.config.input_mode == "images":
            await self._commit_frames(session, [frame])
            return
        pending: list[Frame] = session.state.setdefault("pending", [])
        pending.append(frame)
        if len(pending) >= self._chunk_size(session):
            await self._flush_chunk(session)

    def _chunk_size(self, session: Session) -> int:
        """Frames in the chunk now filling: the first chunk may be longer (LiveCC's)."""
        first = session.state.get("frames", 0) == 0
        return self._first_chunk if first else self.config.chunk_frames

    async def _flush_chunk(self, session: Session, pad: bool = False) -> None:
        """Video mode: commit the buffered frames (a partial chunk too) as one video block,
        in whole temporal patches: an odd last frame waits for its partner rather than be
        committed alone and repeated. `pad` (a question, which must see every delivered
        frame): it goes too, repeated as the video processors repeat it."""
        pending: list[Frame] = session.state.get("pending", [])
        count = len(pending) if pad else len(pending) - len(pending) % self.vlm.temporal_patch
        if count:
            session.state["pending"] = pending[count:]
            await self._commit_frames(session, pending[:count])

    async def _commit_frames(self, session: Session, frames: list[Frame]) -> None:
        """One frame block: a frame (image mode) or a chunk of frames (video mode)."""
        await self._commit_audio(session)  # the sound up to the frame comes first
        started = time.monotonic_ns()
        fps = session.conditions.fps
        if self.config.input_mode == "images":
            (frame,) = frames
            encoded = await asyncio.to_thread(self._encode, frame)
            label = self.chat.label(frame.t, session.state["frames"])
        else:
            encoded = await asyncio.to_thread(self._encode_chunk, frames, fps)
            label = self._chunk_label(frames[0].t, frames[-1].t + (1 / fps if fps > 0 else 0))
        ids = self.vlm.tokenize(label) + encoded.token_ids
        record = {"frame_ids": [frame.frame_id for frame in frames], "images": len(frames)}
        pixels = {"pixels": encoded.pixels}
        if await self._commit_block(session, "frame", ids, encoded, started, record, pixels):
            session.state["frames"] += len(frames)
            session.state["new_chunk"] = True

    async def _commit_block(
        self,
        session: Session,
        kind: Literal["frame", "audio"],
        ids: list[int],
        media: Media,
        started: int,
        record: dict[str, Any],
        committed: dict[str, Any],
    ) -> bool:
        """A frame or audio block on top of the cache, room made first under an evicting
        policy. `record`: what its workload record says, a `drop` when it does not fit;
        `committed`: what the `state_commit` says besides. Whether it was committed."""
        stream: StreamState = session.state["stream"]
        # An eviction is its own record: the commit's interval starts after it.
        started = await self._make_room(session, len(ids), self.cache_max_tokens) or started
        if stream.length + len(ids) > self.cache_max_tokens:
            await session.workload(kind="drop", **record)
            return False
        before = stream.length
        stream.begin(kind, tuple(record.get("frame_ids", ())))
        await asyncio.to_thread(stream.append, ids, media)
        await session.workload(
            kind="state_commit",
            **record,
            **committed,
            input_tokens=stream.length - before,  # the block's tokens, read off the cache
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )
        return True

    async def _commit_audio(self, session: Session) -> None:
        """The buffered chunks' sound as one audio block. A span too short for an audio
        token (under 30 ms) stays buffered and joins the next block."""
        buffered: list[AudioChunk] | None = session.state.get("audio")
        if not buffered:
            return
        started = time.monotonic_ns()
        encoded = await asyncio.to_thread(self._encode_audio, buffered)
        if encoded is None:
            return
        session.state["audio"] = []
        label = self.config.audio_label
        span = {"start": buffered[0].start_t, "end": buffered[-1].t}
        ids = self.vlm.tokenize("" if label is None else label.format(**span))
        record = {"images": 0, "audio_seconds": encoded.seconds, "audio_tokens": encoded.tokens}
        ids += encoded.token_ids
        await self._commit_block(session, "audio", ids, encoded, started, record, {})

    def _chunk_label(self, start: float, end: float) -> str:
        label = self.config.chunk_label
        return "" if label is None else label.format(start=start, end=end)

    async def on_question(self, session: Session, question: Question, respond: Responder):
        heard = self.consumes_audio and session.conditions.audio is not None
        chat = self._chat_heard if heard else self.chat
        prompt = chat.question(question.t, question.text, question.options)
        await self._decide(session, respond, self.vlm.tokenize(prompt), None, "pinned")

    async def on_instruction(self, session: Session, instruction: Instruction, respond: Responder):
        await self._commit_text(session, self.chat.instruction(instruction.t, instruction.text))

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        if self.config.decide_at == "chunk" and not session.state.pop("new_chunk", False):
            await respond.silent(step.step)  # no whole chunk since the last decision
            return
        prompt, kind = self._assistant_turn, "turn"
        if session.task is None and not session.state.get("standby_told"):
            # The frame-level protocol: decisions before any task. Told once, remembered
            # (never evicted: it says how to pass).
            session.state["standby_told"] = True
            prompt, kind = self.vlm.tokenize(self.chat.first_standby_step()), "pinned"
        await self._decide(session, respond, prompt, step.step, kind)

    async def on_session_end(self, session: Session) -> None:
        session.state.pop("stream", None)  # frees the cache

    # ------------------------------------------------------------------ model work

    def _encode(self, frame: Frame) -> EncodedFrame:
        return self.vlm.encode_frame(frame.rgb())

    def _encode_chunk(self, frames: list[Frame], fps: float) -> EncodedFrame:
        return self.vlm.encode_chunk([f.rgb() for f in frames], [f.t for f in frames], fps)

    def _encode_audio(self, chunks: list[AudioChunk]) -> EncodedAudio | None:
        import numpy as np

        samples = np.concatenate([chunk.samples() for chunk in chunks])
        return self.vlm.encode_audio(samples, chunks[0].sample_rate)

    async def _make_room(self, session: Session, incoming: int, limit: int) -> int | None:
        """Under an evicting policy, evict the oldest frame blocks until `incoming` more
        tokens fit in `limit`; each eviction is an `evict` workload record. Returns when the
        eviction ended, None when there was none."""
        if self.config.cache_policy == "fail":
            return None
        stream: StreamState = session.state["stream"]
        started = time.monotonic_ns()
        eviction = await asyncio.to_thread(
            stream.make_room, incoming, limit, self.config.evict_frames
        )
        if eviction is None:
            return None
        ended = time.monotonic_ns()
        await session.workload(
            kind="evict",
            frame_ids=eviction.frame_ids,
            images=len(eviction.frame_ids),
            input_tokens=eviction.reprefilled,
            started_ns=started,
            ended_ns=ended,
        )
        return ended

    async def _commit_text(self, session: Session, text: str) -> None:
        await self._flush_chunk(session)
        await self._commit_audio(session)
        stream: StreamState = session.state["stream"]
        started = time.monotonic_ns()
        before = stream.length
        stream.begin("pinned")
        await asyncio.to_thread(stream.append, self.vlm.tokenize(text))
        await session.workload(
            kind="state_commit",
            images=0,
            input_tokens=stream.length - before,
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )

    async def _decide(
        self,
        session: Session,
        respond: Responder,
        prompt: list[int],
        step: int | None,
        kind: Literal["pinned", "turn"],
    ) -> None:
        """Append `prompt`, generate from the cache (greedy unless the decoding options say
        otherwise), keep the answer in context.

        `step` set: a proactive decision, which may come out as the wait word. `kind`: the
        cache segment the decision becomes (`turn`: evicted with the frame before it).
        """
        # The model sees every delivered frame; at a step, an odd last one waits (video mode).
        await self._flush_chunk(session, pad=step is None)
        await self._commit_audio(session)  # and hears everything delivered
        stream: StreamState = session.state["stream"]
        budget = self.config.max_tokens_qa if step is None else self.config.max_tokens_proactive
        need = len(prompt) + budget + len(self._after_answer)
        await self._make_room(session, need, self.context_tokens)
        free = self.context_tokens - stream.length - len(prompt) - len(self._after_answer)
        limit = min(budget, free)
        if limit < 1:
            full = f"the context of {self.context_tokens} tokens is full"
            await session.send(
                AdapterError(code="context_full", message=full, fatal=True).model_dump_json()
            )
            return
        started = time.monotonic_ns()
        before = stream.length
        text = IncrementalText(self.vlm.detokenize)
        speaker = _Speaker(respond, None if step is None else self.config.wait_word)
        stream.begin(kind)
        token = await asyncio.to_thread(_next_token, session, prompt)
        generated = 0
        unfed: list[int] = []
        while token not in self.vlm.stop_ids:
            generated += 1
            await speaker.add(text.push(token), text.text)
            if generated == limit or text.text.endswith(self._stop_words):
                unfed = [token]
                break
            token = await asyncio.to_thread(_next_token, session, [token])
        await speaker.finish(text.text, generated, step)
        # The answer (its last token too) and the turn change go into the cache, so the
        # model sees what it said, or that it waited, at the next decision.
        await asyncio.to_thread(stream.append, unfed + self._after_answer)
        await session.workload(
            kind="model_call",
            images=0,
            input_tokens=stream.length - before - generated,
            output_tokens=generated,
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )


def _next_token(session: Session, ids: list[int]) -> int:
    """Run `ids` on top of the session's cache and choose the token that follows."""
    stream: StreamState = session.state["stream"]
    chooser: TokenChooser = session.state["chooser"]
    return chooser.choose(stream.append(ids), stream.in_context())


class _Speaker:
    """Sends one delta per generated token. At a decision step (a wait word is set) pieces
    are held while the text could still be the wait word and sent in one burst once it
    cannot, so the response starts when the model has committed to speaking. The wait-word
    rules are the other chat adapters' (adapters/chat_prompts.py)."""

    def __init__(self, respond: Responder, wait_word: str | None) -> None:
        self._respond = respond
        self._wait = wait_word
        self._held: list[str] = []
        self._response: ResponseStream | None = None

    async def add(self, piece: str, text: str) -> None:
        """Take the next token's piece; `text` is everything generated so far."""
        self._held.append(piece)
        deciding = self._response is None and self._wait is not None
        if deciding and prompts.may_still_be_wait(text, self._wait):
            return
        await self._flush()

    async def finish(self, text: str, generated: int, step: int | None) -> None:
        deciding = self._response is None and self._wait is not None
        if deciding and prompts.is_silence(text, self._wait):
            await self._respond.silent(step)
            return
        await self._flush()  # text that stopped while it could still be the wait word
        await self._response.finish(output_tokens=generated)

    async def _flush(self) -> None:
        if self._response is None:
            self._response = self._respond.stream()
        for piece in self._held:
            await self._response.token(piece)
        self._held = []
