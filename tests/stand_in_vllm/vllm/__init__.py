"""A stand-in `vllm`: the names the `vllm` adapter imports, scripted by environment variables.

STAND_IN_VLLM_LOAD_S      seconds `AsyncLLMEngine.from_engine_args` blocks (loading weights)
STAND_IN_VLLM_LOAD_ERROR  make the load fail with this message (after the delay)
STAND_IN_VLLM_SCRIPT      comma-separated outcome of each `generate` call, in call order, then
                          `ok`: ok | generate (EngineGenerateError) | dead (EngineDeadError, and
                          every later call too) | rejected (ValueError) | invalid
                          (VLLMValidationError) | busy (queue full, 503) | hang (no output)
STAND_IN_VLLM_REPLY       the text each call generates (default `A`)
STAND_IN_VLLM_LOG         a file that gets one JSON line per engine built, per call (its
                          prompt text and image count), per request abandoned (`closed`: its
                          generator was cancelled or closed before the end) and per `abort`,
                          each with `time.monotonic_ns()`
STAND_IN_VLLM_DEAD_FILE   once this file exists the engine is dead: `check_health` raises
                          EngineDeadError, as vLLM's does once its engine core process is gone

Like vLLM's AsyncLLM, the engine starts its output handler on the running event loop when it
is built inside one, else at the first request; a request on another loop than the handler's
fails, as it would with the real engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from vllm.exceptions import VLLMValidationError
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError, QueueOverflowError

__version__ = "0.0.0+stand-in"


def _log(entry: dict[str, Any]) -> None:
    path = os.environ.get("STAND_IN_VLLM_LOG")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(entry, default=str) + "\n")


@dataclass
class EngineArgs:
    """A subset of vLLM's EngineArgs fields, with their real names."""

    model: str = "facebook/opt-125m"
    tokenizer: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    download_dir: str | None = None
    load_format: str = "auto"
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    seed: int | None = 0
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_prefix_caching: bool | None = None
    gpu_memory_utilization: float = 0.9
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    quantization: str | None = None
    limit_mm_per_prompt: dict[str, int] = field(default_factory=dict)
    mm_processor_kwargs: dict[str, Any] | None = None
    mm_processor_cache_gb: float = 4
    disable_log_stats: bool = False
    served_model_name: str | list[str] | None = None
    hf_overrides: dict[str, Any] | None = None
    enable_chunked_prefill: bool | None = None
    swap_space: float = 4
    cpu_offload_gb: float = 0
    allowed_local_media_path: str = ""
    generation_config: str = "auto"

    def __post_init__(self) -> None:
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1:
            raise ValueError(
                f"tensor_parallel_size must be a positive int, got {self.tensor_parallel_size!r}"
            )


@dataclass
class AsyncEngineArgs(EngineArgs):
    enable_log_requests: bool = False


class SamplingParams:
    # vLLM's keywords and defaults for what the adapter may set; a call logs them all.
    def __init__(
        self,
        max_tokens: int | None = 16,
        temperature: float = 1.0,
        seed: int | None = None,
        top_p: float = 1.0,
        top_k: int = 0,
        repetition_penalty: float = 1.0,
        stop: str | list[str] | None = None,
    ):
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.top_p = top_p
        self.top_k = top_k
        self.repetition_penalty = repetition_penalty
        self.stop = stop


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]


@dataclass
class RequestOutput:
    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool


_calls = itertools.count(1)


def _outcome(call: int) -> str:
    script = [s.strip() for s in os.environ.get("STAND_IN_VLLM_SCRIPT", "").split(",") if s.strip()]
    return script[call - 1] if call <= len(script) else "ok"


class AsyncLLM:
    def __init__(self, args: AsyncEngineArgs) -> None:
        self.args = args
        self.errored = False
        self.output_handler: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            asyncio.get_running_loop()
            self._run_output_handler()
        except RuntimeError:
            pass

    @classmethod
    def from_engine_args(
        cls, engine_args: AsyncEngineArgs, start_engine_loop: bool = True, **kw
    ) -> AsyncLLM:
        time.sleep(float(os.environ.get("STAND_IN_VLLM_LOAD_S", "0")))
        failure = os.environ.get("STAND_IN_VLLM_LOAD_ERROR")
        if failure:
            raise RuntimeError(failure)
        try:
            asyncio.get_running_loop()
            in_loop = True
        except RuntimeError:
            in_loop = False
        _log(
            {
                "event": "built",
                "args": dataclasses.asdict(engine_args),
                "thread": threading.current_thread().name,
                "in_loop": in_loop,
            }
        )
        return cls(engine_args)

    def _run_output_handler(self) -> None:
        loop = asyncio.get_running_loop()
        if self.output_handler is not None:
            if loop is not self._loop:
                raise RuntimeError("the output handler runs on another event loop")
            return
        self._loop = loop
        self._requests: asyncio.Queue = asyncio.Queue()
        self.output_handler = loop.create_task(self._handle_outputs())

    async def _handle_outputs(self) -> None:
        while True:
            queue, pieces = await self._requests.get()
            for piece in pieces:
                await asyncio.sleep(0.001)
                queue.put_nowait(piece)

    async def generate(self, prompt: Any, sampling_params: SamplingParams, request_id: str, **kw):
        call = next(_calls)
        outcome = "dead" if self.errored else _outcome(call)
        data = prompt.get("multi_modal_data") or {}
        images = list(data.get("image") or [])
        video = data.get("video")
        entry = {"event": "call", "call": call, "outcome": outcome, "images": len(images)}
        entry["prompt"] = prompt["prompt"]
        entry["sampling"] = vars(sampling_params)
        entry.update(request_id=request_id, ns=time.monotonic_ns())
        if video is not None:
            frames, metadata = video
            entry["video"] = {"shape": list(frames.shape), "metadata": metadata}
            entry["mm_processor_kwargs"] = prompt.get("mm_processor_kwargs")
            if self.args.limit_mm_per_prompt.get("video", 0) < 1:
                raise ValueError("At most 0 video(s) may be provided in one prompt.")
        _log(entry)
        if outcome == "dead":
            self.errored = True
            raise EngineDeadError()
        if outcome == "rejected":
            raise ValueError(
                "The decoder prompt (length 99999) is longer than the maximum model length of 4096."
            )
        if outcome == "invalid":
            raise VLLMValidationError("temperature must be non-negative")
        if outcome == "busy":
            raise QueueOverflowError()
        limit = self.args.limit_mm_per_prompt.get("image", 1)
        if len(images) > limit:
            raise ValueError(f"At most {limit} image(s) may be provided in one prompt.")
        self._run_output_handler()
        if outcome == "generate":
            try:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            except RuntimeError as cause:
                raise EngineGenerateError() from cause
        try:
            async for output in self._outputs(prompt, request_id, outcome):
                yield output
        except (asyncio.CancelledError, GeneratorExit):
            # As vLLM's generate: a cancelled or closed generator aborts its request.
            _log({"event": "closed", "request_id": request_id, "ns": time.monotonic_ns()})
            raise

    async def _outputs(self, prompt: Any, request_id: str, outcome: str):
        if outcome == "hang":
            await asyncio.sleep(3600)
        text = os.environ.get("STAND_IN_VLLM_REPLY", "A")
        prompt_ids = list(range(len(prompt["prompt"])))
        queue: asyncio.Queue = asyncio.Queue()
        pieces = [text[: i + 1] for i in range(len(text))] or [""]
        self._requests.put_nowait((queue, pieces))
        for i in range(len(pieces)):
            so_far = await queue.get()
            yield RequestOutput(
                request_id,
                prompt["prompt"],
                prompt_ids,
                [CompletionOutput(0, so_far, list(range(len(so_far))))],
                finished=i == len(pieces) - 1,
            )

    async def abort(self, request_id: str) -> None:
        _log({"event": "abort", "request_id": request_id, "ns": time.monotonic_ns()})

    async def check_health(self) -> None:
        dead_file = os.environ.get("STAND_IN_VLLM_DEAD_FILE")
        if self.errored or (dead_file and os.path.exists(dead_file)):
            self.errored = True
            raise EngineDeadError()

    def shutdown(self) -> None:
        if self.output_handler is not None:
            self.output_handler.cancel()


AsyncLLMEngine = AsyncLLM

__all__ = ["AsyncEngineArgs", "AsyncLLMEngine", "EngineArgs", "SamplingParams", "__version__"]
