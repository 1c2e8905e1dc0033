"""The `vllm` adapter: the same non-native streaming as `openai`, on an in-process vLLM engine.

For a GPU host that should not run a separate `vllm serve`: the weights load into this
process, prefix caching is on (the sliding windows of proactive decisions share their
prompt heads), and calls skip HTTP. vLLM is an optional extra (`pip install
'streameval[vllm]'`) imported only when this adapter is constructed. The prompt is built with
the model's Hugging Face chat template, so models whose processor has one that accepts image
parts work here (Qwen2/2.5/3-VL, InternVL-3.5-HF, LLaVA-OneVision); for the others, serve
them with `vllm serve` and use the `openai` adapter. Not exercised by the test suite (it
needs a GPU and weights).
"""

from __future__ import annotations

import asyncio
import io
import itertools
from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field

from streameval.adapters.chat_prompts import ChatRequest, hf_messages
from streameval.adapters.video_chat import ModelCallError, Usage, VideoChatAdapter, VideoChatConfig


class VLLMEngineConfig(VideoChatConfig):
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    dtype: str = "auto"
    enable_prefix_caching: bool = True
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="any further vLLM AsyncEngineArgs field"
    )


class VLLMEngineAdapter(VideoChatAdapter):
    name = "vllm"
    version = "1"
    Config = VLLMEngineConfig

    def __init__(self, config: VLLMEngineConfig) -> None:
        super().__init__(config, "in-process")
        self.config: VLLMEngineConfig = config
        import vllm  # the optional extra; a missing one is reported by the registry
        from transformers import AutoProcessor

        self._vllm = vllm
        self._processor = AutoProcessor.from_pretrained(config.model, trust_remote_code=True)
        self._engine = None
        self._engine_lock = asyncio.Lock()
        self._request_ids = itertools.count()

    async def _engine_ready(self):
        # The engine starts its background loop on the serving event loop, so it is built
        # on first use rather than in the constructor.
        async with self._engine_lock:
            if self._engine is None:
                config = self.config
                args = self._vllm.AsyncEngineArgs(
                    model=config.model,
                    tensor_parallel_size=config.tensor_parallel_size,
                    gpu_memory_utilization=config.gpu_memory_utilization,
                    max_model_len=config.max_model_len,
                    dtype=config.dtype,
                    enable_prefix_caching=config.enable_prefix_caching,
                    limit_mm_per_prompt={
                        "image": max(config.qa_max_frames, config.proactive_window_frames)
                    },
                    trust_remote_code=True,
                    **config.engine_args,
                )
                self._engine = self._vllm.AsyncLLMEngine.from_engine_args(args)
        return self._engine

    async def stream_completion(self, request: ChatRequest) -> AsyncIterator[str | Usage]:
        from PIL import Image

        engine = await self._engine_ready()
        text = self._processor.apply_chat_template(
            hf_messages(request), add_generation_prompt=True, tokenize=False
        )
        prompt: dict[str, Any] = {
            "prompt": text,
            "multi_modal_data": {
                "image": [Image.open(io.BytesIO(image.jpeg)) for image in request.images]
            },
        }
        if self.config.mm_processor_kwargs:
            prompt["mm_processor_kwargs"] = self.config.mm_processor_kwargs
        sampling = self._vllm.SamplingParams(
            max_tokens=request.max_tokens,
            temperature=self.config.temperature,
            seed=self.config.seed,
        )
        produced = ""
        final = None
        try:
            async for output in engine.generate(prompt, sampling, f"se-{next(self._request_ids)}"):
                final = output
                text_so_far = output.outputs[0].text
                if len(text_so_far) > len(produced):
                    yield text_so_far[len(produced) :]
                    produced = text_so_far
        except (ValueError, RuntimeError) as exc:  # a rejected prompt or a dead engine
            raise ModelCallError(f"vLLM engine: {exc}", retryable=False) from None
        if final is not None:
            yield Usage(len(final.prompt_token_ids or ()), len(final.outputs[0].token_ids))
