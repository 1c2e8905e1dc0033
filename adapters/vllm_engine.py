"""The `vllm` adapter: the same non-native streaming as `openai`, on an in-process vLLM engine.

For a GPU host that should not run a separate `vllm serve`: the weights load into this
process, prefix caching is on (with `proactive_window: append` a decision's prompt starts
with the whole last one's images, whose KV it reuses), and calls skip HTTP. vLLM is an
optional extra (`pip install 'streameval[vllm]'`) imported only when this adapter is
constructed. The prompt is built with the model's Hugging Face chat template, so models
whose processor has one that accepts image parts work here (Qwen2/2.5/3-VL,
InternVL-3.5-HF, LLaVA-OneVision); for the others, serve them with `vllm serve` and use the
`openai` adapter.

Start-up: the constructor only checks the options and builds vLLM's `AsyncEngineArgs` from
them (a conflict or an unknown `engine_args` key is one error line, before the server
listens). The engine itself loads in `start`, in a daemon thread, while the server already
answers `/healthz` with `loading` and refuses sessions as not ready. vLLM's `AsyncLLM` starts
its background output handler on the running event loop when it is built inside one, and
otherwise on the first request; built in the thread, it has no loop there, so the handler
starts on the serving loop at the first `generate` (the engine core itself is a separate
process either way).

Errors of a call (`ModelCallError`, which the chat adapter retries, records and reports as a
protocol `error`): `EngineGenerateError` (one request failed) is retried; `EngineDeadError`
(the engine process is gone) is fatal and makes the adapter `failed`, so new sessions are
refused with the reason; a rejected prompt (`ValueError`, vLLM's validation errors) is fatal
for the call, except vLLM's queue-full / rate-limit refusals (HTTP 503/429), which are
retried; no output for `output_timeout_s` aborts the request and is retried.

A call the session abandons (the Core gave up, the connection dropped: the SDK cancels the
hook) aborts its engine request at once: `engine.abort(request_id)` and the close of
vLLM's output generator (which aborts too), so the request stops taking a batch slot and
KV cache the moment nobody waits for it. Readiness follows the engine: every
`health_interval_s` the adapter awaits `engine.check_health()`, and an engine found dead
there (or by a call) makes the adapter `failed`: `/healthz` answers 503 and new sessions
are refused with the reason.

Code from the model's repository (`trust_remote_code`) runs only when the option says so,
for the engine and the processor alike; the models that need it say so in their presets.

`input_mode: video` (see video_chat.py) submits each window as ONE video:
`multi_modal_data={"video": (frames, metadata)}` with the frames as a T x H x W x 3 array and
the metadata declaring their fps (and, with `video_server_kwargs`, `mm_processor_kwargs`
`fps` and `do_sample_frames: false`, as the openai adapter sends them); the engine's
`limit_mm_per_prompt` then allows one video.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import inspect
import io
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field

from streameval.adapters.chat_prompts import ChatRequest, hf_messages
from streameval.adapters.config import AdapterConfigError
from streameval.adapters.errors import AdapterSetupError
from streameval.adapters.sdk import load_in_thread
from streameval.adapters.settings import NOT_IDENTITY
from streameval.adapters.video_chat import ModelCallError, Usage, VideoChatAdapter, VideoChatConfig

log = logging.getLogger("streameval.adapter.vllm")

# The adapter's own options that are vLLM engine arguments of the same name.
ENGINE_OPTIONS = (
    "model",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "max_model_len",
    "dtype",
    "enable_prefix_caching",
    "trust_remote_code",
)
# vLLM's error classes, matched by name along the exception's class hierarchy so every vLLM
# version (V1 `vllm.v1.engine.exceptions`, the V0 `AsyncEngineDeadError`) maps the same.
DEAD_ERRORS = frozenset({"EngineDeadError", "AsyncEngineDeadError"})
GENERATE_ERRORS = frozenset({"EngineGenerateError"})
REJECTED_ERRORS = frozenset({"VLLMValidationError", "VLLMClientError"})
# HTTP statuses of vLLM's "graceful" refusals (queue full, rate limited): worth retrying.
BUSY_STATUSES = frozenset({429, 503})


class VLLMStartError(AdapterSetupError):
    """The engine could not be built (out of memory, a model vLLM cannot load, ...)."""


class VLLMEngineConfig(VideoChatConfig):
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs the model is split over")
    # The memory share, timeouts and health checks say how the engine is run, not what the
    # model is shown or answers: not part of the adapter's identity.
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        description="share of each GPU's memory vLLM may take",
        json_schema_extra=NOT_IDENTITY,
    )
    max_model_len: int | None = Field(
        None, ge=1, description="context length; default: the model's"
    )
    dtype: str = Field("auto", description="weights' dtype; auto: the checkpoint's")
    enable_prefix_caching: bool = Field(
        True,
        description="reuse the cache of prompt heads earlier calls had (with proactive_window: "
        "append, a decision's images but the new ones)",
    )
    trust_remote_code: bool = Field(
        False,
        description="run code from the model's repository (engine and processor); only for "
        "a model that needs it and a repository you trust",
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="any further vLLM AsyncEngineArgs field; not one of the options above",
    )
    output_timeout_s: float = Field(
        300.0,
        gt=0,
        description="a call with no new output for this long is aborted, retried",
        json_schema_extra=NOT_IDENTITY,
    )
    health_interval_s: float = Field(
        5.0,
        gt=0,
        description="how often the engine's health is checked (readiness)",
        json_schema_extra=NOT_IDENTITY,
    )


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def describe_error(exc: BaseException) -> str:
    """`Type: message`, followed by the cause vLLM wrapped (EngineGenerateError has none of
    its own)."""
    own = _first_line(str(getattr(exc, "message", None) or exc))
    text = f"{type(exc).__name__}: {own}" if own else type(exc).__name__
    cause = exc.__cause__
    if cause is not None:
        text += f" (caused by {describe_error(cause)})"
    return text


def engine_arg_fields(args_class: type) -> set[str]:
    """The keyword arguments vLLM's AsyncEngineArgs accepts (a dataclass)."""
    if dataclasses.is_dataclass(args_class):
        return {field.name for field in dataclasses.fields(args_class) if field.init}
    parameters = inspect.signature(args_class).parameters.values()
    return {
        p.name for p in parameters if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD
    }


def merge_engine_args(config: VLLMEngineConfig, known: set[str] | None) -> dict[str, Any]:
    """The AsyncEngineArgs keywords: the adapter's options, then `engine_args`.

    One `AdapterConfigError` line for a key given both ways, for a key vLLM does not know
    (when `known` is given), and for an image limit below what a call submits."""
    images = config.most_images_per_call()
    merged: dict[str, Any] = {name: getattr(config, name) for name in ENGINE_OPTIONS}
    merged["limit_mm_per_prompt"] = {"image": images}
    if config.input_mode == "video":
        merged["limit_mm_per_prompt"]["video"] = 1
    extra = dict(config.engine_args)
    for key in sorted(extra):
        if key in ENGINE_OPTIONS:
            raise AdapterConfigError(
                f"engine_args.{key} conflicts with the option {key}; give it once"
            )
        if known is not None and key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise AdapterConfigError(
                f"engine_args.{key} is not a vLLM engine argument (an AsyncEngineArgs field){hint}"
            )
    limits = extra.pop("limit_mm_per_prompt", None)
    if limits is not None:
        if not isinstance(limits, dict):
            raise AdapterConfigError("engine_args.limit_mm_per_prompt must be a mapping")
        given = limits.get("image", images)
        if not isinstance(given, int) or given < images:
            raise AdapterConfigError(
                f"engine_args.limit_mm_per_prompt.image={given} is below the {images} images "
                "a call submits (max of qa_max_frames and proactive_window_frames, or "
                "reanchor_frames with proactive_window: append)"
            )
        merged["limit_mm_per_prompt"] = {**merged["limit_mm_per_prompt"], **limits}
    merged.update(extra)
    return merged


def video_input(images: list, fps: float) -> tuple[Any, dict[str, Any]]:
    """A window as vLLM's in-process video: (frames as a T x H x W x 3 uint8 array, metadata
    with the declared fps and every frame kept), the shape of `multi_modal_data["video"]`
    that carries metadata. Frames of another size are resized to the first's."""
    import numpy as np

    size = images[0].size
    frames = np.stack([np.asarray(i if i.size == size else i.resize(size)) for i in images])
    metadata = {
        "fps": fps,
        "total_num_frames": len(images),
        "frames_indices": list(range(len(images))),
        "duration": len(images) / fps if fps else 0.0,
        "video_backend": "streameval",
        "do_sample_frames": False,
    }
    return frames, metadata


def chat_template_source(model: str, trust_remote_code: bool = False):
    """What renders the model's chat template: its processor, or its tokenizer when the
    processor cannot be loaded here (both render the same template). The repository's own
    code runs only with `trust_remote_code`, as for the engine."""
    from transformers import AutoProcessor, AutoTokenizer

    try:
        source = AutoProcessor.from_pretrained(model, trust_remote_code=trust_remote_code)
    except Exception as exc:  # e.g. a video processor that needs torchvision
        log.info("no processor for %s (%s); the chat template comes from its tokenizer", model, exc)
        source = None
    if getattr(source, "chat_template", None) is None:
        try:
            source = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
        except Exception as exc:
            raise VLLMStartError(
                f"cannot load the processor or tokenizer of {model}: {describe_error(exc)}"
            ) from exc
    if getattr(source, "chat_template", None) is None:
        raise VLLMStartError(
            f"{model} has no chat template (neither its processor nor its tokenizer); serve "
            "it with `vllm serve --chat-template` and the openai adapter"
        )
    return source


class VLLMEngineAdapter(VideoChatAdapter):
    name = "vllm"
    version = "2"
    Config = VLLMEngineConfig
    input_modes = frozenset({"images", "video"})

    def __init__(self, config: VLLMEngineConfig) -> None:
        super().__init__(config, "in-process")
        self.config: VLLMEngineConfig = config
        import vllm  # the optional extra; a missing one is reported by the registry

        self._vllm = vllm
        known = engine_arg_fields(vllm.AsyncEngineArgs)
        self.engine_kwargs = merge_engine_args(config, known)
        try:
            self._engine_args = vllm.AsyncEngineArgs(**self.engine_kwargs)
        except (TypeError, ValueError) as exc:
            raise AdapterConfigError(f"engine_args: {_first_line(str(exc))}") from None
        self._processor = None
        self._engine = None
        self._starting = asyncio.Lock()
        self._request_ids = itertools.count()
        self._health: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ start-up

    async def start(self) -> None:
        """Load the processor and the engine in a thread (the server says `loading`)."""
        async with self._starting:
            if self._engine is None:
                self._processor, self._engine = await load_in_thread(self._load, "vllm-load")
                self._health = asyncio.create_task(self._watch_health(self._engine))

    def _load(self):
        template = chat_template_source(self.config.model, self.config.trust_remote_code)
        try:
            engine = self._vllm.AsyncLLMEngine.from_engine_args(self._engine_args)
        except Exception as exc:
            raise VLLMStartError(f"the vLLM engine did not start: {describe_error(exc)}") from exc
        return template, engine

    async def _watch_health(self, engine) -> None:
        """Poll `engine.check_health()` until the engine is found dead (the adapter then
        fails: /healthz 503, sessions refused) or the adapter stops."""
        interval = self.config.health_interval_s
        while self.readiness.state != "failed":
            await asyncio.sleep(interval)
            try:
                await asyncio.wait_for(engine.check_health(), interval)
            except TimeoutError:
                log.warning("the vLLM engine did not answer a health check in %gs", interval)
            except Exception as exc:
                if not _names(exc) & DEAD_ERRORS:
                    log.warning("the vLLM health check failed: %s", describe_error(exc))
                    continue
                self._engine_died(exc)

    def _engine_died(self, exc: BaseException) -> str:
        """Fail the adapter for good (once); the reason."""
        reason = f"the vLLM engine died ({describe_error(exc)})"
        if self.readiness.state != "failed":
            log.error("%s; the adapter takes no more sessions", reason)
            self.fail(reason)
        return reason

    # ------------------------------------------------------------------ calls

    async def stream_completion(self, request: ChatRequest) -> AsyncIterator[str | Usage]:
        readiness = self.readiness
        if readiness.state == "failed":
            raise ModelCallError(
                f"the vLLM engine is unusable: {readiness.reason}",
                retryable=False,
                reached_model=False,
            )
        if self._engine is None:  # used in-process, without a server to start it
            await self.start()
        engine = self._engine
        try:
            prompt = self._prompt(request)
        except Exception as exc:  # the processor refused the messages
            message = f"could not build the prompt: {describe_error(exc)}"
            raise ModelCallError(message, retryable=False, reached_model=False) from None
        sampling = self._vllm.SamplingParams(
            max_tokens=request.max_tokens, **self.config.sampling()
        )
        request_id = f"se-{next(self._request_ids)}"
        outputs = engine.generate(prompt, sampling, request_id)
        produced = ""
        final = None
        try:
            while True:
                try:
                    output = await asyncio.wait_for(anext(outputs), self.config.output_timeout_s)
                except StopAsyncIteration:
                    break
                final = output
                text_so_far = output.outputs[0].text
                if len(text_so_far) > len(produced):
                    yield text_so_far[len(produced) :]
                    produced = text_so_far
        except (asyncio.CancelledError, GeneratorExit):
            # Abandoned (the hook was cancelled, or the caller closed this stream): free
            # the engine's slot now. Closing vLLM's generator aborts too; this does not
            # depend on where it was suspended, and aborting twice is harmless.
            with contextlib.suppress(Exception):  # a dead engine has nothing to abort
                await engine.abort(request_id)
            raise
        except TimeoutError:
            raise ModelCallError(
                f"vLLM produced no output for {self.config.output_timeout_s:g}s; "
                "the request was aborted",
                retryable=True,
            ) from None
        except Exception as exc:
            raise self._call_error(exc) from None
        finally:
            await outputs.aclose()
        if final is not None:
            yield Usage(len(final.prompt_token_ids or ()), len(final.outputs[0].token_ids))

    def _prompt(self, request: ChatRequest) -> dict[str, Any]:
        from PIL import Image

        text = self._processor.apply_chat_template(
            hf_messages(request), add_generation_prompt=True, tokenize=False
        )
        images = [Image.open(io.BytesIO(image.jpeg)).convert("RGB") for image in request.images]
        kwargs = dict(self.config.mm_processor_kwargs)
        if request.video is None:
            data: dict[str, Any] = {"image": images}
        else:
            data = {"video": video_input(images, request.video.fps)}
            if self.config.video_server_kwargs:
                # As the openai adapter tells `vllm serve`: the frames' rate, and no
                # resampling of frames the adapter already chose.
                kwargs.update(fps=request.video.fps, do_sample_frames=False)
        prompt: dict[str, Any] = {"prompt": text, "multi_modal_data": data}
        if kwargs:
            prompt["mm_processor_kwargs"] = kwargs
        return prompt

    def _call_error(self, exc: Exception) -> ModelCallError:
        """A vLLM exception as the chat adapter's retry logic sees it."""
        names = _names(exc)
        text = describe_error(exc)
        if names & DEAD_ERRORS:
            reason = self._engine_died(exc)
            return ModelCallError(f"{reason}; the adapter takes no more sessions", retryable=False)
        if names & GENERATE_ERRORS:
            return ModelCallError(f"vLLM request failed: {text}", retryable=True)
        if getattr(exc, "http_status", None) in BUSY_STATUSES:
            return ModelCallError(f"vLLM is busy: {text}", retryable=True)
        if names & REJECTED_ERRORS or isinstance(exc, ValueError):
            return ModelCallError(f"vLLM rejected the prompt: {text}", retryable=False)
        return ModelCallError(f"vLLM engine error: {text}", retryable=False)
