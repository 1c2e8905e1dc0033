"""A scripted OpenAI-compatible chat server on loopback, for tests of the clients that call
a served model (the `openai` adapter, `streameval synth`).

A real uvicorn server in a thread answers `POST /v1/chat/completions` like vLLM: server-sent
events, a role chunk, one chunk per content piece, a closing usage chunk with empty
`choices`, then `data: [DONE]`. `script(body, index)` decides each reply from the request
body and its position; every body received is kept in `requests` (parsed) and `raw` (its
bytes), in order. A request with `input_audio` WAV parts is charged `AUDIO_TOKENS_PER_S`
per second of sound, reported as OpenAI does (`usage.prompt_tokens_details.audio_tokens`).
A reply can also stall, fail with an HTTP error or drop the connection part-way. When a
client goes away before its reply ended, `disconnected` maps the request's position to the
moment (`time.monotonic_ns()`, the host's clock, as the Core records events) the server
saw it.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import threading
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

# The adapters' default frame label (adapters/chat_prompts.py FRAME_LABEL).
LABEL = re.compile(r"Frame at ([\d.]+)s:")
# Qwen2-Audio's rate: its Whisper encoder's 50 frames a second, pooled by 2.
AUDIO_TOKENS_PER_S = 25


@dataclass
class Reply:
    """How the stand-in answers one request."""

    pieces: list[str] = field(default_factory=list)
    status: int = 200
    error: str = "engine overloaded"
    first_piece_delay_s: float = 0.0
    stall_s: float = 0.0  # after the role chunk, before any content
    drop_after: int | None = None  # close the connection after this many pieces


def prompt_of(body: dict) -> str:
    """The text after the images: the prompt of the request's (last) user turn."""
    return body["messages"][-1]["content"][-1]["text"]


def labels(body: dict) -> list[float]:
    """The times of the frames sent, read from their labels."""
    parts = body["messages"][-1]["content"]
    return [
        float(m.group(1)) for p in parts if p["type"] == "text" for m in LABEL.finditer(p["text"])
    ]


def images(body: dict) -> list[str]:
    return [
        p["image_url"]["url"] for p in body["messages"][-1]["content"] if p["type"] == "image_url"
    ]


def audio_seconds(body: dict) -> float:
    """The seconds of sound in the request's `input_audio` WAV parts."""
    seconds = 0.0
    for part in body["messages"][-1]["content"]:
        if part["type"] == "input_audio":
            wav = base64.b64decode(part["input_audio"]["data"])
            with wave.open(io.BytesIO(wav)) as reader:
                seconds += reader.getnframes() / reader.getframerate()
    return seconds


def usage_for(body: dict, reply: Reply) -> dict:
    prompt = 50 + 100 * len(images(body))
    usage = {"prompt_tokens": prompt, "completion_tokens": len(reply.pieces), "total_tokens": 0}
    sound = audio_seconds(body)
    if sound:
        audio_tokens = round(sound * AUDIO_TOKENS_PER_S)
        usage["prompt_tokens"] += audio_tokens
        usage["prompt_tokens_details"] = {"audio_tokens": audio_tokens}
    return usage


def chunk(delta: dict | None, usage: dict | None = None) -> str:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "fake-vl",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n"


class FakeOpenAIServer:
    """A uvicorn server in a thread; `script(body, index)` decides each reply."""

    def __init__(self, script: Callable[[dict, int], Reply]) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.raw: list[bytes] = []
        self.disconnected: dict[int, int] = {}
        self.base_url = ""
        app = FastAPI()
        app.post("/v1/chat/completions")(self.complete)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="critical", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def complete(self, request: Request):
        raw = await request.body()
        body = json.loads(raw)
        index = len(self.requests)
        self.requests.append(body)
        self.raw.append(raw)
        reply = self.script(body, index)
        if reply.status != 200:
            return JSONResponse({"error": {"message": reply.error}}, status_code=reply.status)

        async def events() -> Iterator[str]:
            ended = False
            try:
                yield chunk({"role": "assistant", "content": ""})
                await asyncio.sleep(reply.stall_s or reply.first_piece_delay_s)
                for position, piece in enumerate(reply.pieces):
                    if reply.drop_after is not None and position == reply.drop_after:
                        ended = True  # the server's own doing
                        raise ConnectionAbortedError("the server dropped the connection")
                    yield chunk({"content": piece})
                yield chunk(None, usage_for(body, reply))
                yield "data: [DONE]\n\n"
                ended = True
            finally:
                # Starlette cancels the stream when the client disconnects (http.disconnect).
                if not ended:
                    self.disconnected[index] = time.monotonic_ns()

        return StreamingResponse(events(), media_type="text/event-stream")

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "fake OpenAI server did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)
