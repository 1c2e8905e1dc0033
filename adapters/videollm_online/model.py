"""VideoLLM-online's network for inference: a Llama decoder, a SigLIP frame encoder and the
MLP connector between them (showlab/videollm-online, models/live_llama, vision_live.py).

A frame becomes `1 + p*p` embeddings (v1+: the encoder's pooled "CLS" output and its patch
grid average-pooled to 3x3), mapped by the connector (Linear, GELU, Linear) into the LLM's
embedding space, and run through the decoder on top of the session's cache like any tokens.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import (
    AutoTokenizer,
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
    SiglipVisionConfig,
    SiglipVisionModel,
)
from transformers.utils import logging as hf_logging

from streameval.adapters.errors import ModelLoadError
from streameval.adapters.hf.model import _cache_layers, resolve_device
from streameval.adapters.videollm_online.checkpoint import (
    base_model_of,
    local_directory,
    merge_lora,
    read_checkpoint,
)


@dataclass(frozen=True)
class FrameLayout:
    """Which vision outputs become a frame's tokens (the release: CLS and a 3x3 pool)."""

    cls_token: bool
    pooled: int  # side of the average-pooled patch grid; 0 for none

    @property
    def tokens(self) -> int:
        return int(self.cls_token) + self.pooled * self.pooled


@dataclass(frozen=True)
class LiveSources:
    """What a load reads, resolved to local folders and checked before any weight is read:
    the checkpoint, the base LLM and the encoder, with what the adapter declares from their
    configs."""

    checkpoint: Path
    llm: Path
    vision: Path
    tokenizer: PreTrainedTokenizerBase
    max_context: int
    resolution: int

    def single_token(self, token: str) -> int:
        ids = self.tokenizer(token, add_special_tokens=False).input_ids
        if len(ids) != 1:
            raise ModelLoadError(f"{token!r} is {len(ids)} tokens; the frame interval must be one")
        return ids[0]

    @classmethod
    def resolve(cls, checkpoint: str, llm: str | None, vision: str) -> LiveSources:
        folder = local_directory(checkpoint)
        base = llm or base_model_of(folder)
        if not base:
            raise ModelLoadError("no base LLM: set `llm` (adapter_config.json names none)")
        llm_folder, vision_folder = local_directory(base), local_directory(vision)
        try:
            tokenizer = AutoTokenizer.from_pretrained(llm_folder)
            llm_config = LlamaConfig.from_pretrained(llm_folder)
            vision_config = SiglipVisionConfig.from_pretrained(vision_folder)
        except (OSError, ValueError, KeyError) as exc:
            reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise ModelLoadError(f"cannot read the base model or encoder: {reason}") from None
        return cls(
            folder,
            llm_folder,
            vision_folder,
            tokenizer,
            int(llm_config.max_position_embeddings),
            int(vision_config.image_size),
        )


class LiveModel:
    def __init__(self, llm, tokenizer, vision, connector, layout: FrameLayout, device: str):
        self.llm, self.tokenizer, self.vision = llm, tokenizer, vision
        self.connector, self.layout, self.device = connector, layout, device
        self.resolution = int(vision.config.image_size)
        self.eos_id = int(tokenizer.eos_token_id)
        # transformers 5 renamed `past_key_values` to `cache`.
        forward = inspect.signature(llm.forward).parameters
        self._cache_keyword = "cache" if "cache" in forward else "past_key_values"

    @classmethod
    def load(cls, sources: LiveSources, layout: FrameLayout, dtype: str, device: str) -> LiveModel:
        """Read the weights: the base LLM with the LoRA merged, the encoder, the connector."""
        live = read_checkpoint(sources.checkpoint)
        device = resolve_device(device)
        torch_dtype = _dtype(dtype, device)
        hf_logging.disable_progress_bar()  # the adapter's output is its log, not a terminal
        try:
            model = LlamaForCausalLM.from_pretrained(sources.llm, dtype=torch_dtype)
            encoder = _vision_encoder(sources.vision, torch_dtype)
        except (OSError, ValueError, KeyError) as exc:
            reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise ModelLoadError(f"cannot load the base model or encoder: {reason}") from None
        merge_lora(model, live)
        connector = _connector(encoder.config.hidden_size, model.config.hidden_size)
        try:
            connector.load_state_dict(live.connector)
        except RuntimeError as exc:
            reason = str(exc).splitlines()[0]
            raise ModelLoadError(f"the connector does not fit the models: {reason}") from None
        connector.to(torch_dtype)
        parts = (model, encoder, connector)
        model, encoder, connector = (part.to(device).eval() for part in parts)
        return cls(model, sources.tokenizer, encoder, connector, layout, device)

    # ------------------------------------------------------------------ text

    def tokenize(self, text: str) -> list[int]:
        # Special tokens written in the text (the BOS) are parsed as such.
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def detokenize(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ------------------------------------------------------------------ frames

    @torch.no_grad()
    def encode_frame(self, rgb: np.ndarray) -> torch.Tensor:
        """One frame as `layout.tokens` LLM embeddings."""
        pixels = torch.from_numpy(letterbox(rgb, self.resolution)).permute(2, 0, 1)[None]
        # SigLIP's normalisation: rescale to [0, 1], then mean 0.5 and std 0.5.
        pixels = (pixels.float() / 255 - 0.5) / 0.5
        out = self.vision(pixel_values=pixels.to(self.device, self.vision.dtype))
        tokens = []
        if self.layout.cls_token:
            tokens.append(out.pooler_output[:, None])
        if self.layout.pooled:
            hidden = out.last_hidden_state
            side = int(hidden.shape[1] ** 0.5)
            grid = hidden.reshape(1, side, side, -1).permute(0, 3, 1, 2)
            pooled = torch.nn.functional.adaptive_avg_pool2d(grid, self.layout.pooled)
            tokens.append(pooled.flatten(2).permute(0, 2, 1))
        return self.connector(torch.cat(tokens, dim=1))[0]

    # ------------------------------------------------------------------ the decoder

    def new_cache(self) -> DynamicCache:
        return DynamicCache()

    @torch.no_grad()
    def append(
        self,
        cache: DynamicCache,
        ids: list[int],
        frame: torch.Tensor | None = None,
        start: int | None = None,
    ) -> torch.Tensor:
        """Run `ids` (then a frame's embeddings) on top of the cache, from rotary position
        `start` (default: the cache's length); the next token's logits."""
        parts = []
        if ids:
            parts.append(self.llm.get_input_embeddings()(torch.tensor(ids, device=self.device)))
        if frame is not None:
            parts.append(frame)
        embeds = torch.cat(parts)[None]
        extra = {self._cache_keyword: cache}
        if start is not None:
            positions = torch.arange(start, start + embeds.shape[1], device=self.device)
            extra["position_ids"] = positions[None]
        out = self.llm(inputs_embeds=embeds, use_cache=True, logits_to_keep=1, **extra)
        return out.logits[0, -1].float()

    def keep_slots(self, cache: DynamicCache, slots: list[int]) -> None:
        """Keep only these cache slots, in every layer (the keys keep their rotation)."""
        index = torch.tensor(slots, dtype=torch.long, device=self.device)
        for layer in _cache_layers(cache):
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)


def letterbox(rgb: np.ndarray, side: int) -> np.ndarray:
    """The release's frame preparation (data/utils.py `ffmpeg_once`): the longer side scaled
    to `side` (bicubic), the shorter padded with black, centred."""
    height, width = rgb.shape[:2]
    scale = side / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    image = Image.fromarray(rgb).resize(size, Image.Resampling.BICUBIC)
    canvas = Image.new("RGB", (side, side))
    canvas.paste(image, ((side - size[0]) // 2, (side - size[1]) // 2))
    return np.array(canvas)  # writable, for torch.from_numpy


def _vision_encoder(source: Path, dtype: torch.dtype) -> SiglipVisionModel:
    """The vision half of a SigLIP checkpoint. The release's encoder is a whole SigLIP (text
    tower too), whose unused half transformers would list weight by weight: not logged."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return SiglipVisionModel.from_pretrained(source, dtype=dtype)
    finally:
        hf_logging.set_verbosity(verbosity)


def _connector(vision_size: int, hidden_size: int) -> torch.nn.Sequential:
    # The release's GELUActivation is the exact (erf) GELU.
    return torch.nn.Sequential(
        torch.nn.Linear(vision_size, hidden_size),
        torch.nn.GELU(),
        torch.nn.Linear(hidden_size, hidden_size),
    )


def _dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":  # the release runs in bfloat16 on a GPU; a CPU computes in float32
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype)
