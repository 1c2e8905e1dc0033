"""The `openai` adapter: non-native streaming over any OpenAI-compatible chat endpoint.

vLLM (`vllm serve`), SGLang, LMDeploy and hosted APIs all speak `POST /chat/completions` with
server-sent events. Frames travel as `image_url` parts holding `data:image/jpeg;base64,` URLs;
`stream_options.include_usage` asks for the closing usage chunk (empty `choices`, a `usage`
block) that gives exact prompt and completion token counts. History, prompts, proactive
decisions and retries are `VideoChatAdapter`'s; this module only speaks HTTP.

With `input_mode: video` the window goes as one `video_url` part whose URL is vLLM's
frames-as-video form, `data:video/jpeg;base64,<frame 1>,<frame 2>,...`, after a text label
with the window's span; the request also tells the server the frames' rate (see
`video_kwargs`), from which vLLM derives the frames' times (Qwen2.5-VL's temporal positions,
Qwen3-VL's timestamps) instead of assuming a default.

With `audio: true` the window's sound goes as `input_audio` parts (`{"data": <base64 WAV>,
"format": "wav"}`, OpenAI's chat content part, which vLLM's server turns into a
`data:audio/wav;base64,` item: vllm/entrypoints/chat_utils.py, `parse_input_audio`) in time
order among the images; the server's `usage.prompt_tokens_details.audio_tokens` (OpenAI's
usage, openai-python types/completion_usage.py), when it sends one, is the call's audio
tokens.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import Field

from streameval.adapters.chat_prompts import ChatRequest, openai_messages
from streameval.adapters.settings import NOT_IDENTITY
from streameval.adapters.video_chat import ModelCallError, Usage, VideoChatAdapter, VideoChatConfig
from streameval.protocol import INFO_SERVER_METRICS

# Worth retrying: the server is overloaded, restarting or timed out on its side.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class OpenAIAdapterConfig(VideoChatConfig):
    # Where and how the server is reached is not the adapter's identity (NOT_IDENTITY).
    base_url: str = Field(
        "http://127.0.0.1:8000/v1",
        description="ends before /chat/completions",
        json_schema_extra=NOT_IDENTITY,
    )
    api_key_env: str | None = Field(
        "OPENAI_API_KEY",
        description="environment variable holding the key (unset: no key)",
        json_schema_extra=NOT_IDENTITY,
    )
    deployment: Literal["local-service", "remote-api"] = Field(
        "local-service", description="remote-api for a hosted model (recorded with results)"
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, description="longest wait for a connection", json_schema_extra=NOT_IDENTITY
    )
    read_timeout_s: float = Field(
        60.0,
        gt=0,
        description="longest wait for the next bytes (covers prefill of all images)",
        json_schema_extra=NOT_IDENTITY,
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="merged into every request, e.g. {top_k: 1}"
    )


class OpenAIAdapter(VideoChatAdapter):
    name = "openai"
    version = "1"
    Config = OpenAIAdapterConfig
    input_modes = frozenset({"images", "video"})
    audio_input = True

    def __init__(self, config: OpenAIAdapterConfig) -> None:
        super().__init__(config, config.deployment)
        self.config: OpenAIAdapterConfig = config
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        # Created on first use, inside the serving event loop that will drive it.
        self._client: httpx.AsyncClient | None = None

    def info(self) -> dict[str, Any]:
        """/info, with the server's Prometheus endpoint (vLLM serves it at its root)."""
        parts = urlsplit(self.config.base_url)
        metrics = urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))
        return {**super().info(), INFO_SERVER_METRICS: metrics}

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            config = self.config
            timeout = httpx.Timeout(
                connect=config.connect_timeout_s,
                read=config.read_timeout_s,
                write=config.read_timeout_s,
                pool=config.read_timeout_s,
            )
            self._client = httpx.AsyncClient(timeout=timeout, headers=self._headers())
        return self._client

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.config.api_key_env) if self.config.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def request_body(self, request: ChatRequest) -> dict[str, Any]:
        config = self.config
        body: dict[str, Any] = {
            "model": config.model,
            "messages": openai_messages(request),
            "max_tokens": request.max_tokens,
            **config.sampling(),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if config.mm_processor_kwargs:
            body["mm_processor_kwargs"] = config.mm_processor_kwargs
        if request.video is not None and config.video_server_kwargs:
            body.update(video_kwargs(request, config.mm_processor_kwargs))
        return {**body, **config.extra_body}

    async def stream_completion(self, request: ChatRequest) -> AsyncIterator[str | Usage]:
        try:
            async with self.client().stream(
                "POST", self.url, json=self.request_body(request)
            ) as response:
                if response.status_code >= 400:
                    raise await _http_error(self.url, response)
                async for piece in read_chat_stream(response.aiter_lines()):
                    yield piece
        except httpx.TimeoutException as exc:
            raise ModelCallError(
                f"{self._timeout_kind(exc)} from {self.url}",
                retryable=True,
                reached_model=not isinstance(exc, httpx.ConnectTimeout),
            ) from None
        except httpx.TransportError as exc:
            raise ModelCallError(
                f"{type(exc).__name__} talking to {self.url}: {exc}",
                retryable=True,
                reached_model=not isinstance(exc, httpx.ConnectError),
            ) from None

    def _timeout_kind(self, exc: httpx.TimeoutException) -> str:
        if isinstance(exc, httpx.ConnectTimeout):
            return f"no connection within {self.config.connect_timeout_s:g}s"
        if isinstance(exc, httpx.ReadTimeout):
            return f"no data for {self.config.read_timeout_s:g}s (read timeout)"
        return type(exc).__name__


def video_kwargs(request: ChatRequest, mm_processor_kwargs: dict[str, Any]) -> dict[str, Any]:
    """vLLM's per-request fields that describe a `video/jpeg` video's frames.

    - `media_io_kwargs.video.fps`: the video loader's metadata for frames sent as JPEGs
      (`fps`, with `frames_indices` 0..n-1 and `total_num_frames` n); Qwen3-VL's timestamps
      are frame index / fps, and (transformers 5) Qwen2.5-VL's time step per temporal patch
      is 2 / fps. `num_frames` n: loaders that cut a JPEG sequence at `num_frames` (default
      32) keep every frame sent.
    - `mm_processor_kwargs.fps`: where processors of transformers 4 read Qwen2.5-VL's rate
      (`second_per_grid_ts` = 2 / fps; default 2.0); `do_sample_frames: false` keeps the
      processor from resampling frames the adapter already chose (Qwen3-VL's video processor
      samples by default).
    The configured `mm_processor_kwargs` are kept; these two keys override theirs."""
    assert request.video is not None
    fps = request.video.fps
    return {
        "mm_processor_kwargs": {**mm_processor_kwargs, "fps": fps, "do_sample_frames": False},
        "media_io_kwargs": {"video": {"fps": fps, "num_frames": len(request.images)}},
    }


async def read_chat_stream(lines: AsyncIterator[str]) -> AsyncIterator[str | Usage]:
    """Content pieces of a chat-completion SSE stream, then its usage (if it sent one)."""
    usage: Usage | None = None
    async for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, comments, `event:` lines
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise ModelCallError(f"malformed stream chunk {data[:200]!r}", retryable=True) from None
        if chunk.get("error"):
            raise ModelCallError(f"error in stream: {_error_text(chunk)}", retryable=True)
        for choice in chunk.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                yield content
        if chunk.get("usage"):
            counts = chunk["usage"]
            details = counts.get("prompt_tokens_details") or {}
            usage = Usage(
                counts.get("prompt_tokens"),
                counts.get("completion_tokens"),
                details.get("audio_tokens"),
            )
    if usage is not None:
        yield usage


async def _http_error(url: str, response: httpx.Response) -> ModelCallError:
    body = (await response.aread()).decode("utf-8", "replace")
    try:
        detail = _error_text(json.loads(body))
    except (json.JSONDecodeError, AttributeError):
        detail = body.strip()
    return ModelCallError(
        f"HTTP {response.status_code} from {url}: {detail[:500]}",
        retryable=response.status_code in RETRY_STATUSES,
    )


def _error_text(payload: dict) -> str:
    error = payload.get("error", payload)
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
