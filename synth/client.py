"""Chat calls of `streameval synth` to the served model, each one recorded.

The model is reached through the `openai` adapter's own backend
(`OpenAIAdapter.stream_completion`): the same request body (frames as `image_url` data URLs,
each after its "Frame at {t}s:" label), the same SSE reading (`read_chat_stream`) and the
same error classification as a benchmark run, so the model sees synthesis prompts exactly
as it sees evaluation prompts. Calls run at temperature 0 with the run's seed.

A call is retried, a bounded number of times, when the server fails in a way worth
retrying (overloaded, timed out, connection lost; with a doubling back-off) and when the
reply does not parse (at once, with the reason added to the prompt). Every attempt is one
line of `calls.jsonl`: stage, video, prompt, the images sent (their JPEG paths), the raw
reply, and its parse result or error. A call that still fails raises `CallFailed`, whose
message is the one error line naming the video, the stage and the cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from streameval.adapters.chat_prompts import ChatRequest, PromptImage
from streameval.adapters.openai_adapter import OpenAIAdapter, OpenAIAdapterConfig
from streameval.adapters.video_chat import ModelCallError, Usage
from streameval.synth.prompts import ReplyError, retry_prompt

Stage = Literal["category", "questions", "relevance", "response"]
T = TypeVar("T")


@dataclass(frozen=True)
class ModelSettings:
    base_url: str  # ends before /chat/completions, e.g. http://127.0.0.1:8000/v1
    model: str
    seed: int = 0
    retries: int = 2  # further attempts after a failed one
    retry_backoff_s: float = 1.0  # first wait after a server failure, doubled each time
    read_timeout_s: float = 120.0


@dataclass(frozen=True)
class Call:
    """One question to the model. `images` are in time order; each one's `frame_id` is the
    path of its JPEG, which is what the record names."""

    stage: Stage
    video: str
    images: tuple[PromptImage, ...]
    prompt: str
    reply_format: str  # the prompt's closing instruction, repeated when a reply is retried
    max_tokens: int
    segment: int | None = None
    question: int | None = None


class CallRecord(BaseModel):
    """One attempt of a call: a line of calls.jsonl."""

    model_config = ConfigDict(extra="forbid")

    stage: Stage
    video: str
    segment: int | None
    question: int | None
    attempt: int
    prompt: str
    images: list[str]
    reply: str | None  # None: no reply came (the error says why)
    parsed: Any = None
    error: str | None = None


class CallFailed(Exception):
    """A call that failed after its retries; the message is one line."""

    def __init__(self, call: Call, cause: str) -> None:
        super().__init__(f"video {call.video}: stage {call.stage}: {cause}")
        self.stage = call.stage


class ModelClient:
    """Sends calls to the served model and appends each attempt to `calls_path`."""

    def __init__(self, settings: ModelSettings, calls_path: Path) -> None:
        config = OpenAIAdapterConfig(
            base_url=settings.base_url,
            model=settings.model,
            temperature=0.0,
            seed=settings.seed,
            read_timeout_s=settings.read_timeout_s,
        )
        self.backend = OpenAIAdapter(config)
        self.settings = settings
        self.calls_path = calls_path

    async def ask(self, call: Call, parse: Callable[[str], T]) -> T:
        """The parsed reply; CallFailed once the call has failed `1 + retries` times, or at
        once for a request the server refuses."""
        attempts = 1 + self.settings.retries
        prompt = call.prompt
        for attempt in range(1, attempts + 1):
            try:
                reply = await self._complete(call, prompt)
            except ModelCallError as error:
                self._record(call, attempt, prompt, None, error=str(error))
                if not error.retryable:
                    raise CallFailed(call, f"the server refused the request: {error}") from None
                if attempt == attempts:
                    raise CallFailed(call, f"failed {attempts} times, giving up: {error}") from None
                await asyncio.sleep(self.settings.retry_backoff_s * 2 ** (attempt - 1))
                continue
            try:
                parsed = parse(reply)
            except ReplyError as error:
                self._record(call, attempt, prompt, reply, error=f"unparseable reply: {error}")
                if attempt == attempts:
                    cause = f"no usable reply in {attempts} attempts, the last: {error}"
                    raise CallFailed(call, cause) from None
                prompt = retry_prompt(call.prompt, error, call.reply_format)
                continue
            self._record(call, attempt, prompt, reply, parsed=parsed)
            return parsed
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def aclose(self) -> None:
        await self.backend.client().aclose()

    async def _complete(self, call: Call, prompt: str) -> str:
        request = ChatRequest(images=call.images, prompt=prompt, max_tokens=call.max_tokens)
        pieces = [
            piece
            async for piece in self.backend.stream_completion(request)
            if not isinstance(piece, Usage)
        ]
        return "".join(pieces)

    def _record(
        self,
        call: Call,
        attempt: int,
        prompt: str,
        reply: str | None,
        *,
        parsed: Any = None,
        error: str | None = None,
    ) -> None:
        record = CallRecord(
            stage=call.stage,
            video=call.video,
            segment=call.segment,
            question=call.question,
            attempt=attempt,
            prompt=prompt,
            images=[image.frame_id for image in call.images],
            reply=reply,
            parsed=parsed,
            error=error,
        )
        with self.calls_path.open("a", encoding="utf-8") as calls:
            calls.write(record.model_dump_json() + "\n")
