"""Non-native streaming over a chat VideoLLM: the adapter rebuilds history from frames.

The adapter keeps the legal frames it has received. At a question it submits a history
window of them as images in one chat request; for a proactive instruction it makes its own
decision every `proactive_interval_s` of video time over a window of the newest frames
(sliding, or growing by appending and restarted now and then: proactive_window.py), and the
model either responds or says WAIT (sent to the Core as an explicit silent decision). Every
image submitted is reported in a `model_call` workload record, with the images that earlier
calls of the session already submitted counted as replays, and those at the head of the
prompt that the session's previous call had there too as its shared prefix.

Under logical pacing the Core waits for every decision, so calls run inside the hooks.
Under wall-clock pacing nobody waits: a due decision runs as a background task while
frames keep arriving, and those frames are kept (`buffer`) or discarded and recorded as
`drop` workload (`drop`), as the config declares. A backend's transient failures are
retried a bounded number of times, each reported as a non-fatal `error`; the last one, a
refused request, or a stream that breaks after the answer began is a fatal `error`.

Sound (`audio`, a backend that lists it in `audio_input`): the adapter also consumes the
Core's audio chunks, keeps those of the frames it keeps, and submits the sound of a call's
window (from its first frame on) with its images, contiguous chunks merged into one span
per stretch between frames (chat_prompts.merge_audio); the call's workload reports the
seconds submitted.

Input modes (`input_mode`): "images" submits the window as separate images, each after its
time label; "video" submits it as ONE video (its frames in time order, declared at the rate
their times give, after a label with the window's time span), for backends whose server
takes videos as frames (vLLM's `video/jpeg`). A backend lists the modes it implements in
`input_modes`; the video mode and its parameters are declared in `conditions.settings`.

Subclasses provide `stream_completion` (a backend) and their `Config`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from streameval.adapters import chat_prompts as prompts
from streameval.adapters.config import AdapterConfig, AdapterConfigError
from streameval.adapters.proactive_window import Layout, next_window
from streameval.adapters.sdk import (
    Adapter,
    AudioChunk,
    Frame,
    Responder,
    ResponseStream,
    Session,
)
from streameval.adapters.settings import NOT_IDENTITY, RECORDED_IF_CHANGED
from streameval.protocol import (
    AdapterConditions,
    AdapterError,
    Instruction,
    Question,
    Step,
)

log = logging.getLogger("streameval.adapter.video_chat")
# Proactive prompts name this many of the model's earlier responses, so it need not repeat.
EARLIER_RESPONSES = 5


class VideoChatConfig(AdapterConfig):
    """Options shared by every chat-VideoLLM backend (the keys of adapters/presets/*.yaml)."""

    model: str = Field(description="the model as the backend names it, e.g. a Hugging Face id")
    model_version: str = Field("", description="a revision or date, recorded with results")
    qa_max_frames: int = Field(16, ge=1, description="images submitted at a question")
    qa_frame_selection: Literal["recent", "uniform"] = Field(
        "recent", description="the newest frames, or frames spread evenly over all received"
    )
    proactive_interval_s: float = Field(1.0, gt=0, description="video seconds between decisions")
    proactive_window_frames: int = Field(4, ge=1, description="images per proactive decision")
    frames_during_call: Literal["buffer", "drop"] = Field(
        "buffer", description="wall-clock pacing: keep or drop frames arriving during a call"
    )
    image_max_pixels: int | None = Field(
        None, ge=1, description="downscale submitted frames to at most this many pixels"
    )
    input_mode: Literal["images", "video"] = Field(
        "images",
        description="images: each frame its own image part; video: the window as one video",
    )
    video_server_kwargs: bool = Field(
        True,
        description="video mode: send the frames' fps to the server (vLLM media_io_kwargs and "
        "mm_processor_kwargs) with every video",
    )
    frame_label: str | None = Field(
        prompts.FRAME_LABEL,
        description="text before each image ({t}: video seconds, {index}); null for none",
    )
    video_label: str | None = Field(
        prompts.VIDEO_LABEL,
        description="video mode: text before the video ({start}, {end}, {frames}, {fps}); "
        "null for none",
    )
    system_prompt: str | None = Field(None, description="a system message")
    # Unset: the images wording, or in video mode the video wording (chat_prompts.VIDEO_*).
    qa_prompt: str = Field(
        prompts.QA_PROMPT, description="multiple-choice question ({t}, {question}, {options})"
    )
    open_qa_prompt: str = Field(
        prompts.OPEN_QA_PROMPT, description="question without options ({t}, {question})"
    )
    proactive_prompt: str = Field(
        prompts.PROACTIVE_PROMPT,
        description="proactive decision ({t}, {instruction}, {earlier}, {wait})",
    )
    wait_word: str = Field(
        "WAIT", min_length=1, description='the reply that means "nothing to say now"'
    )
    max_tokens_qa: int = Field(32, ge=1, description="answer length limit")
    max_tokens_proactive: int = Field(64, ge=1, description="proactive response length limit")
    temperature: float = Field(0.0, ge=0, description="sampling temperature")
    seed: int | None = Field(0, description="sampling seed (null: none sent)")
    # Added after runs were recorded: unset, nothing is sent and the backend's default holds,
    # as before (RECORDED_IF_CHANGED keeps those runs' identity).
    top_p: float | None = Field(
        None,
        gt=0,
        le=1,
        description="nucleus sampling: the smallest set of tokens with this probability mass "
        "(null: not sent)",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    top_k: int | None = Field(
        None,
        ge=1,
        description="sample among the k likeliest tokens (vLLM's extra sampling parameter; "
        "null: not sent)",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    repetition_penalty: float | None = Field(
        None,
        gt=0,
        description="penalty on tokens already in the prompt or the reply, as Hugging Face's "
        "(vLLM's extra sampling parameter; null: not sent)",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    stop: list[str] = Field(
        default_factory=list,
        description="texts that end a reply (the backend's `stop`; not part of the reply)",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    mm_processor_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="per-request multimodal processor options (vLLM)"
    )
    # How a failing backend is retried says how it is reached, not what the model does.
    max_retries: int = Field(
        2, ge=0, le=10, description="retries of a failed model call", json_schema_extra=NOT_IDENTITY
    )
    retry_backoff_s: float = Field(
        1.0,
        ge=0,
        description="first retry delay, doubled each time",
        json_schema_extra=NOT_IDENTITY,
    )
    # Proactive window layouts (adapters/proactive_window.py). Left out of the settings at
    # their defaults, the sliding layout every run made before them used; `settings()`
    # declares both in append mode.
    proactive_window: Layout = Field(
        "sliding",
        description="sliding: the newest proactive_window_frames at every decision; append: "
        "the last window plus the frames since, restarted at reanchor_frames (prefix caching)",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    reanchor_frames: int = Field(
        16,
        ge=2,
        validate_default=True,
        description="append: the most images a decision shows; a window that would grow "
        "past it restarts from the newest proactive_window_frames",
        json_schema_extra=RECORDED_IF_CHANGED,
    )

    # Added with the Core's audio (issue 37): off, requests and identity are as before.
    audio: bool = Field(
        False,
        description="consume the stream's sound and submit it with the frames (input_audio "
        "WAV parts in time order among the images; backends that list it)",
        json_schema_extra=RECORDED_IF_CHANGED,
    )
    audio_label: str | None = Field(
        prompts.AUDIO_LABEL,
        description="audio: text before each sound span ({start}, {end}: video seconds); "
        "null for none",
        json_schema_extra=RECORDED_IF_CHANGED,
    )

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, words: list[str]) -> list[str]:
        return prompts.check_stop_words(words)

    def sampling(self) -> dict[str, Any]:
        """The sampling options that are set, by their name in vLLM's `SamplingParams` and
        in the OpenAI-compatible body (vLLM's server takes `top_k` and `repetition_penalty`
        there as extra sampling parameters); unset ones are left to the backend."""
        chosen: dict[str, Any] = {"temperature": self.temperature}
        for name in ("seed", "top_p", "top_k", "repetition_penalty"):
            if getattr(self, name) is not None:
                chosen[name] = getattr(self, name)
        if self.stop:
            chosen["stop"] = list(self.stop)
        return chosen

    @field_validator(
        "qa_prompt",
        "open_qa_prompt",
        "proactive_prompt",
        "frame_label",
        "video_label",
        "audio_label",
    )
    @classmethod
    def _known_placeholders(cls, template: str | None, info) -> str | None:
        return None if template is None else prompts.check_template(info.field_name, template)

    @field_validator("proactive_window")
    @classmethod
    def _append_needs_images(cls, layout: str, info) -> str:
        if layout == "append" and info.data.get("input_mode") == "video":
            # A grown video is a new multimodal item: nothing of the last one is a prefix.
            raise ValueError(
                "append needs input_mode: images (a video part is one item, so a grown "
                "video shares no prefix with the last one)"
            )
        return layout

    @field_validator("audio")
    @classmethod
    def _audio_needs_images(cls, audio: bool, info) -> bool:
        if audio and info.data.get("input_mode") == "video":
            # A video part is one item: its sound could not sit between its frames.
            raise ValueError("audio needs input_mode: images (sound goes between the images)")
        return audio

    @field_validator("reanchor_frames")
    @classmethod
    def _reanchor_above_window(cls, reanchor: int, info) -> int:
        start = info.data.get("proactive_window_frames")
        if info.data.get("proactive_window") == "append" and start and reanchor <= start:
            raise ValueError(
                f"must exceed proactive_window_frames ({start}): an append window starts "
                "with that many frames and grows up to reanchor_frames"
            )
        return reanchor

    def prompt_templates(self) -> tuple[str, str, str]:
        """(qa, open qa, proactive): as configured; in video mode the video wording, with
        audio the wording that names the sound, for any that the config leaves at its
        default."""
        chosen = [self.qa_prompt, self.open_qa_prompt, self.proactive_prompt]
        wording: tuple[str, str, str] | None = None
        if self.input_mode == "video":
            wording = (
                prompts.VIDEO_QA_PROMPT,
                prompts.VIDEO_OPEN_QA_PROMPT,
                prompts.VIDEO_PROACTIVE_PROMPT,
            )
        elif self.audio:
            wording = (
                prompts.AUDIO_QA_PROMPT,
                prompts.AUDIO_OPEN_QA_PROMPT,
                prompts.AUDIO_PROACTIVE_PROMPT,
            )
        if wording is not None:
            names = ("qa_prompt", "open_qa_prompt", "proactive_prompt")
            for i, name in enumerate(names):
                if name not in self.model_fields_set:
                    chosen[i] = wording[i]
        return chosen[0], chosen[1], chosen[2]

    def most_images_per_call(self) -> int:
        """The most images one call submits: a question's, or the largest proactive window."""
        proactive = self.proactive_window_frames
        if self.proactive_window == "append":
            proactive = self.reanchor_frames
        return max(self.qa_max_frames, proactive)

    def history_summary(self) -> str:
        """The history rules, declared in the hello so every result carries them."""
        if self.proactive_window == "append":
            window = (
                f"a window that starts with the newest {self.proactive_window_frames} frames, "
                f"grows by appending the frames received since, and restarts from the newest "
                f"{self.proactive_window_frames} once it would exceed {self.reanchor_frames}"
            )
        else:
            window = f"the newest {self.proactive_window_frames} frames"
        summary = (
            f"QA: {self.qa_frame_selection} {self.qa_max_frames} received frames; proactive: "
            f"a decision every {self.proactive_interval_s:g}s over {window}; frames arriving "
            f"during a call: {self.frames_during_call}"
        )
        if self.input_mode == "video":
            summary += (
                "; input: each call's frames as one video (JPEG frames in time order), "
                "its fps from the frames' times"
            )
        if self.audio:
            summary += (
                "; sound: the chunks received since the window's first frame, contiguous "
                "ones merged into one WAV span per stretch between frames"
            )
        return summary

    def settings(self) -> dict[str, str | int | float | bool]:
        """Execution settings declared in the hello (`AdapterConditions.settings`).

        Images mode with sliding proactive windows declares none: its requests are those of
        adapters that predate these settings, and so is its identity. Append windows declare
        the layout and its bound; video mode the mode and its parameters; audio how the
        sound goes and its label."""
        declared: dict[str, str | int | float | bool] = {}
        if self.proactive_window == "append":
            declared["proactive_window"] = "append"
            declared["reanchor_frames"] = self.reanchor_frames
        if self.audio:
            declared["audio_parts"] = "input_audio_wav_spans_between_frames"
            # Recorded as the SDK renders a null option (adapters/settings.py).
            declared["audio_label"] = "null" if self.audio_label is None else self.audio_label
        if self.input_mode == "video":
            declared |= self._video_settings()
        # A prompt left unset is the video or audio wording here, not the option's default:
        # the settings the SDK records from the options must name the one in use.
        names = ("qa_prompt", "open_qa_prompt", "proactive_prompt")
        for name, used in zip(names, self.prompt_templates(), strict=True):
            if used != getattr(self, name):
                declared[name] = used
        return declared

    def _video_settings(self) -> dict[str, str | int | float | bool]:
        declared: dict[str, str | int | float | bool] = {
            "input_mode": "video",
            "video_encoding": "jpeg_frames",
            "video_fps_source": "frame_times",
            "video_frames_qa": self.qa_max_frames,
            "video_frames_proactive": self.proactive_window_frames,
            "video_server_kwargs": self.video_server_kwargs,
        }
        if self.image_max_pixels is not None:
            declared["video_frame_max_pixels"] = self.image_max_pixels
        return declared


@dataclass(frozen=True)
class Usage:
    """Token counts a backend reported for one call (None: not reported)."""

    input_tokens: int | None
    output_tokens: int | None
    audio_tokens: int | None = None  # of the input tokens, those of the sound


class ModelCallError(Exception):
    """A call that failed. `retryable`: worth trying again; `reached_model`: the request
    (with its images) got to the model, so the images count as submitted."""

    def __init__(self, message: str, *, retryable: bool, reached_model: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.reached_model = reached_model


class _CallAbandoned(Exception):
    """The call failed for good; a fatal error has been sent to the Core."""


@dataclass
class _StreamState:
    """One session: the received frames and what the adapter has done with them."""

    frames: list[prompts.PromptImage] = field(default_factory=list)
    audio: list[prompts.PromptAudio] = field(default_factory=list)  # one per chunk received
    submitted: set[str] = field(default_factory=set)  # frame ids sent in an earlier call
    instruction: Instruction | None = None
    last_decision_t: float | None = None
    earlier: list[tuple[float, str]] = field(default_factory=list)
    background: asyncio.Task | None = None
    window: list[prompts.PromptImage] = field(default_factory=list)  # the last decision's
    last_request: prompts.ChatRequest | None = None  # the last call that reached the model

    @property
    def busy(self) -> bool:
        return self.background is not None and not self.background.done()


# --------------------------------------------------------------------------- reply sinks


class _Answer:
    """Forwards the model's text the moment it arrives: the first piece is the onset."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.stream: ResponseStream | None = None
        self.text = ""

    @property
    def committed(self) -> bool:
        """Text has reached the Core: a retry can no longer take it back."""
        return self.stream is not None

    async def add(self, piece: str) -> None:
        self.text += piece
        await self._forward(piece)

    async def _forward(self, piece: str) -> None:
        if not piece:
            return
        if self.stream is None:
            self.stream = self.respond.stream()
        await self.stream.token(piece)

    def restart(self) -> None:
        self.text = ""

    async def finish(self, usage: Usage | None) -> str | None:
        """Close the episode; the text it delivered (None: it was a silent decision)."""
        if self.stream is None:
            self.stream = self.respond.stream()
        await self.stream.finish(
            output_tokens=usage.output_tokens if usage else None,
            input_tokens=usage.input_tokens if usage else None,
        )
        return self.text


class _Decision(_Answer):
    """A proactive reply: held back while it could still be the wait word."""

    def __init__(self, respond: Responder, wait: str, step: int | None) -> None:
        super().__init__(respond)
        self.wait = wait
        self.step = step

    async def add(self, piece: str) -> None:
        self.text += piece
        if self.stream is not None:
            await self._forward(piece)
        elif not prompts.may_still_be_wait(self.text, self.wait):
            await self._forward(self.text)

    async def finish(self, usage: Usage | None) -> str | None:
        if self.stream is None and prompts.is_silence(self.text, self.wait):
            await self.respond.silent(self.step)
            return None
        if self.stream is None:
            await self._forward(self.text)
        return await super().finish(usage)


# --------------------------------------------------------------------------- the adapter


class VideoChatAdapter(Adapter):
    """Base of the chat-VideoLLM adapters; a subclass supplies the backend."""

    Config: ClassVar[type[VideoChatConfig]] = VideoChatConfig
    # The `input_mode`s this backend can send; a config asking for another is refused.
    input_modes: ClassVar[frozenset[str]] = frozenset({"images"})
    # Whether this backend can send sound (`audio: true`); a config asking for it is refused.
    audio_input: ClassVar[bool] = False

    def __init__(self, config: VideoChatConfig, deployment: str) -> None:
        if config.input_mode not in self.input_modes:
            raise AdapterConfigError(
                f"input_mode: {config.input_mode!r} is not supported by the {self.name!r} "
                f"adapter (supported: {', '.join(sorted(self.input_modes))})"
            )
        if config.audio and not self.audio_input:
            raise AdapterConfigError(f"audio: the {self.name!r} adapter cannot send sound")
        self.config = config
        self.consumes_audio = config.audio
        self.conditions = AdapterConditions(
            state="non-native",
            initiation="autonomous",
            boundary="model+adapter",
            deployment=deployment,
            model_name=config.model,
            model_version=config.model_version,
            history=config.history_summary(),
            settings=config.settings(),
        )

    def stream_completion(self, request: prompts.ChatRequest) -> AsyncGenerator[str | Usage, None]:
        """Text pieces as the model produces them, then at most one `Usage` (an async
        generator: it is closed when the call ends or is cancelled, and must then free
        what the call holds).

        Raises `ModelCallError` on failure."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks

    async def on_session_start(self, session: Session) -> None:
        session.state["stream"] = _StreamState()

    async def on_frame(self, session: Session, frame: Frame) -> None:
        state = _state(session)
        if state.busy and self.config.frames_during_call == "drop":
            await session.workload(kind="drop", frame_ids=[frame.frame_id], images=1)
        else:
            image = prompts.prepare_image(
                frame.frame_id,
                frame.t,
                frame.width,
                frame.height,
                frame.data,
                self.config.image_max_pixels,
            )
            state.frames.append(image)
            self._forget_unneeded(state)
        if session.conditions.pacing == "wall_clock":
            self._start_due_decision(session, frame.t)

    async def on_audio(self, session: Session, chunk: AudioChunk) -> None:
        state = _state(session)
        state.audio.append(
            prompts.PromptAudio(chunk.start_t, chunk.t, chunk.sample_rate, chunk.pcm)
        )
        self._forget_unneeded(state)

    async def on_question(self, session: Session, question: Question, respond: Responder):
        config = self.config
        images = _select(_state(session).frames, config.qa_max_frames, config.qa_frame_selection)
        qa_template, open_template, _ = config.prompt_templates()
        prompt = prompts.qa_prompt(
            qa_template, open_template, question.t, question.text, question.options
        )
        answer = _Answer(respond)
        with contextlib.suppress(_CallAbandoned):
            usage = await self._call(session, images, prompt, config.max_tokens_qa, answer)
            await answer.finish(usage)

    async def on_instruction(self, session: Session, instruction: Instruction, respond: Responder):
        state = _state(session)
        state.instruction = instruction
        state.last_decision_t = None
        state.window = []
        if session.conditions.pacing == "wall_clock":
            self._start_due_decision(session, instruction.t)

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        if not self._decision_due(_state(session), step.t):
            await respond.silent(step.step)
            return
        try:
            await self._decide(session, step.t, respond, step.step)
        except _CallAbandoned:
            # The fatal error ends the session; no silent decision should follow it.
            respond.decided = True

    async def on_session_end(self, session: Session) -> None:
        task = _state(session).background
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ proactive

    def _decision_due(self, state: _StreamState, t: float) -> bool:
        if state.instruction is None:
            return False
        last = state.last_decision_t
        # A small epsilon: frame times are multiples of 1/fps, not exact in binary.
        return last is None or t - last >= self.config.proactive_interval_s - 1e-6

    def _start_due_decision(self, session: Session, t: float) -> None:
        state = _state(session)
        if state.busy or not self._decision_due(state, t) or session.responder is None:
            return
        state.background = session.start_task(self._decide_unattended(session, t))

    async def _decide_unattended(self, session: Session, t: float) -> None:
        """A self-initiated decision under wall-clock pacing, off the hook that started it."""
        assert session.responder is not None
        try:
            await self._decide(session, t, session.responder, None)
        except _CallAbandoned:
            pass
        except Exception as exc:  # never let a background task die unnoticed
            log.exception("proactive decision failed")
            await _send_error(session, "adapter_bug", f"proactive decision failed: {exc!r}", True)

    async def _decide(
        self, session: Session, t: float, respond: Responder, step: int | None
    ) -> None:
        state = _state(session)
        assert state.instruction is not None
        state.last_decision_t = t
        config = self.config
        images = next_window(
            config.proactive_window,
            state.window,
            state.frames,
            config.proactive_window_frames,
            config.reanchor_frames,
        )
        state.window = images
        prompt = prompts.proactive_prompt(
            config.prompt_templates()[2],
            t,
            state.instruction.text,
            state.earlier[-EARLIER_RESPONSES:],
            config.wait_word,
        )
        decision = _Decision(respond, config.wait_word, step)
        usage = await self._call(session, images, prompt, config.max_tokens_proactive, decision)
        said = await decision.finish(usage)
        if said is not None:
            state.earlier.append((t, said.strip()))

    def _forget_unneeded(self, state: _StreamState) -> None:
        # "uniform" selection spreads over everything received, so it keeps every frame.
        config = self.config
        if config.qa_frame_selection == "recent":
            keep = max(config.qa_max_frames, config.proactive_window_frames)
            if config.proactive_window == "append":
                keep = max(keep, config.reanchor_frames)
            del state.frames[:-keep]
        if state.frames:
            # A window's sound starts at its first frame: none starts before the oldest kept.
            oldest = state.frames[0].t
            while state.audio and state.audio[0].t <= oldest:
                state.audio.pop(0)

    # ------------------------------------------------------------------ model calls

    async def _call(
        self,
        session: Session,
        images: Sequence[prompts.PromptImage],
        prompt: str,
        max_tokens: int,
        sink: _Answer,
    ) -> Usage | None:
        """One model call with bounded retries; its text goes to `sink` as it streams."""
        config = self.config
        request = prompts.ChatRequest(
            images=tuple(images),
            prompt=prompt,
            max_tokens=max_tokens,
            system=config.system_prompt,
            frame_label=config.frame_label,
            video=self._video_input(session, images),
            audio=self._window_audio(_state(session), images),
            audio_label=config.audio_label,
        )
        attempts = 1 + config.max_retries
        attempt = 1
        while True:
            started = time.monotonic_ns()
            usage: Usage | None = None
            try:
                # Closed however the call ends: a cancelled hook (the session was abandoned)
                # closes the backend's stream at once (the HTTP response, the engine request)
                # rather than whenever the generator happens to be collected.
                async with contextlib.aclosing(self.stream_completion(request)) as stream:
                    async for piece in stream:
                        if isinstance(piece, Usage):
                            usage = piece
                        else:
                            await sink.add(piece)
            except ModelCallError as error:
                if error.reached_model:
                    await self._record_call(session, request, started, None)
                await self._after_failure(session, error, attempt, attempts, sink.committed)
                sink.restart()
                attempt += 1
                continue
            await self._record_call(session, request, started, usage)
            return usage

    def _window_audio(
        self, state: _StreamState, images: Sequence[prompts.PromptImage]
    ) -> tuple[prompts.PromptAudio, ...]:
        """The sound received since the window's first frame (all of it before any frame),
        merged into spans between the frames."""
        if not self.config.audio:
            return ()
        start = images[0].t if images else float("-inf")
        clips = [clip for clip in state.audio if clip.t > start]
        return prompts.merge_audio(clips, [image.t for image in images])

    def _video_input(
        self, session: Session, images: Sequence[prompts.PromptImage]
    ) -> prompts.VideoInput | None:
        """Video mode: the window's declared fps and label; None in images mode."""
        if self.config.input_mode != "video":
            return None
        fps = prompts.video_fps(images, session.conditions.fps)
        return prompts.VideoInput(
            fps=fps, label=prompts.video_label(self.config.video_label, images, fps)
        )

    async def _after_failure(
        self, session: Session, error: ModelCallError, attempt: int, attempts: int, committed: bool
    ) -> None:
        """Report a failed attempt; raise `_CallAbandoned` unless it is worth another try."""
        if committed:
            message = f"the model's stream broke after the answer began: {error}"
            await _send_error(session, "model_stream_broken", message, True)
            raise _CallAbandoned
        if not error.retryable:
            await _send_error(session, "model_call_refused", str(error), True)
            raise _CallAbandoned
        if attempt == attempts:
            message = f"model call failed {attempts} times, giving up: {error}"
            await _send_error(session, "model_call_failed", message, True)
            raise _CallAbandoned
        delay = self.config.retry_backoff_s * 2 ** (attempt - 1)
        message = f"model call attempt {attempt}/{attempts} failed: {error}; retrying in {delay:g}s"
        await _send_error(session, "model_call_retry", message, False)
        await asyncio.sleep(delay)

    async def _record_call(
        self,
        session: Session,
        request: prompts.ChatRequest,
        started_ns: int,
        usage: Usage | None,
    ) -> None:
        state = _state(session)
        images = request.images
        frame_ids = [image.frame_id for image in images]
        replayed = sum(1 for frame_id in frame_ids if frame_id in state.submitted)
        state.submitted.update(frame_ids)
        shared = prompts.shared_images(state.last_request, request)
        state.last_request = request
        sound: dict[str, Any] = {}
        if session.conditions.audio is not None:
            # Only in a session that streams sound (to an adapter that takes it): other
            # records stay as they were.
            sound = {
                "audio_seconds": request.audio_seconds,
                "audio_tokens": usage.audio_tokens if usage else None,
            }
        await session.workload(
            kind="model_call",
            frame_ids=frame_ids,
            images=len(frame_ids),
            pixels=sum(image.pixels for image in images),
            replayed_frames=replayed,
            prefix_shared_images=shared,
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            started_ns=started_ns,
            ended_ns=time.monotonic_ns(),
            **sound,
        )


def _state(session: Session) -> _StreamState:
    return session.state["stream"]


def _select(
    frames: Sequence[prompts.PromptImage], count: int, selection: str
) -> list[prompts.PromptImage]:
    """The newest `count` frames, or `count` spread evenly from the first to the newest."""
    if len(frames) <= count:
        return list(frames)
    if selection == "recent":
        return list(frames[-count:])
    if count == 1:
        return [frames[-1]]
    last = len(frames) - 1
    return [frames[round(i * last / (count - 1))] for i in range(count)]


async def _send_error(session: Session, code: str, message: str, fatal: bool) -> None:
    error = AdapterError(code=code, message=message[:10_000], fatal=fatal)
    await session.send(error.model_dump_json())
