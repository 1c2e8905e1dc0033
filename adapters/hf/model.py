"""A Hugging Face vision-language model fed one stream at a time through a growing KV cache.

Supported: models that place image tokens with multimodal RoPE computed by their own
`get_rope_index` and that name their image, vision-start and vision-end tokens in the
config: the Qwen2-VL, Qwen2.5-VL and Qwen3-VL families, loaded through the generic
image-text-to-text auto class. Each append runs the new tokens (and a frame's pixels) on top
of the cache, so the cost of a frame is its own tokens, never the history again.

Works with transformers 4.57 and 5.x: the two places where their APIs differ (the cache
keyword, the RoPE index arguments) are resolved once, at load time.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoImageProcessor,
    AutoModelForImageTextToText,
    AutoTokenizer,
    DynamicCache,
)
from transformers.utils import logging as hf_logging

from streameval.adapters.errors import AdapterSetupError
from streameval.adapters.hf.chat import TURN_END


class ModelLoadError(AdapterSetupError):
    """The configured model cannot be loaded or is not a supported kind."""


@dataclass(frozen=True)
class EncodedFrame:
    """One frame as the model takes it: placeholder ids plus the image tensors."""

    token_ids: list[int]
    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    pixels: int  # after the image processor's resize: what the vision encoder sees


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def device_identity(device: str) -> str | None:
    """A CUDA device's name and UUID (stable across hosts' numbering); None on the CPU."""
    if not device.startswith("cuda"):
        return None
    properties = torch.cuda.get_device_properties(torch.device(device))
    uuid = getattr(properties, "uuid", None)
    return f"{properties.name} GPU-{uuid}" if uuid is not None else properties.name


class VisionLanguageModel:
    """The loaded model, its tokenizer and image processor, shared by every session.

    One lock serialises forward passes: sessions interleave at forward granularity, and
    each call's measured interval is its own compute, not time spent waiting for another.
    """

    def __init__(self, model, tokenizer, image_processor, device: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.device = device
        self.lock = threading.Lock()
        self._rope_index = _rope_index_function(model)  # refuses unsupported models first
        config = model.config
        self.image_token_id: int = config.image_token_id
        self._vision_start: int = config.vision_start_token_id
        self._vision_end: int = config.vision_end_token_id
        self._merge = int(image_processor.merge_size)
        self.max_context: int = config.get_text_config().max_position_embeddings
        # Placeholders stand for pixels: a generated one would have no image behind it.
        placeholders = [self.image_token_id, self._vision_start, self._vision_end]
        placeholders += [config.video_token_id] if hasattr(config, "video_token_id") else []
        self.unspeakable = torch.tensor(placeholders, device=device)
        self.stop_ids = _stop_ids(model, tokenizer)
        forward = inspect.signature(model.forward).parameters
        # transformers 5 renamed `past_key_values` to `cache`.
        self._cache_keyword = "cache" if "cache" in forward else "past_key_values"

    @classmethod
    def load(
        cls,
        path: str,
        visual_tokens: int,
        dtype: str,
        device: str,
        attn_implementation: str | None,
    ) -> VisionLanguageModel:
        source = str(Path(path).expanduser())  # a Hugging Face id passes through unchanged
        if path.startswith(("/", ".", "~")) and not Path(source).is_dir():
            raise ModelLoadError(f"directory {path!r} does not exist")
        device = resolve_device(device)
        hf_logging.disable_progress_bar()  # the adapter's output is its log, not a terminal
        extra = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            image_processor = _image_processor(source, visual_tokens)
            model = AutoModelForImageTextToText.from_pretrained(
                source, dtype=dtype if dtype == "auto" else getattr(torch, dtype), **extra
            )
        except (OSError, ValueError, KeyError) as exc:
            reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise ModelLoadError(f"cannot load {path!r}: {reason}") from None
        return cls(model.to(device).eval(), tokenizer, image_processor, device)

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def detokenize(self, ids: list[int]) -> str:
        # Special tokens stay: a silence marker may be one.
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def encode_frame(self, rgb: np.ndarray) -> EncodedFrame:
        batch = self.image_processor(images=[rgb], return_tensors="pt")
        grid = batch["image_grid_thw"]
        visual = int(grid.prod()) // self._merge**2
        _, height, width = (int(v) for v in grid[0])
        patch = int(self.image_processor.patch_size)
        return EncodedFrame(
            token_ids=[self._vision_start] + [self.image_token_id] * visual + [self._vision_end],
            pixel_values=batch["pixel_values"],
            grid_thw=grid,
            pixels=height * patch * width * patch,
        )

    def new_stream(self) -> StreamState:
        return StreamState(self)

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.model.config)

    def forward(
        self, cache, start_position: int, ids: list[int], frame: EncodedFrame | None
    ) -> tuple[torch.Tensor, int]:
        """Run `ids` on top of `cache`, their positions starting at `start_position`.

        Returns the next-token logits and the position after this chunk.
        """
        input_ids = torch.tensor([ids], device=self.device)
        image: dict = {}
        if frame is not None:
            image = {
                "pixel_values": frame.pixel_values.to(self.device, self.model.dtype),
                "image_grid_thw": frame.grid_thw.to(self.device),
            }
        with self.lock, torch.inference_mode():
            # A chunk's positions are the whole sequence's shifted by where the previous
            # chunk ended: the rule restarts every span from the last position plus one.
            positions = self._rope_index(input_ids, image.get("image_grid_thw")) + start_position
            output = self.model(
                input_ids=input_ids,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_keyword: cache},
                **image,
            )
            return output.logits[0, -1], int(positions.max()) + 1


class StreamState:
    """One session's model state: a KV cache that only grows, and the next RoPE position."""

    def __init__(self, vlm: VisionLanguageModel) -> None:
        self._vlm = vlm
        self._cache = vlm.new_cache()
        self._next_position = 0

    @property
    def length(self) -> int:
        """Tokens held in the cache."""
        return self._cache.get_seq_length()

    def append(self, ids: list[int], frame: EncodedFrame | None = None) -> int:
        """Run `ids` on top of the cache (with the frame's pixels for its placeholders) and
        return the greedy next token, never a vision placeholder."""
        logits, self._next_position = self._vlm.forward(
            self._cache, self._next_position, ids, frame
        )
        return int(logits.index_fill(0, self._vlm.unspeakable, -torch.inf).argmax())


def _image_processor(path: str, visual_tokens: int):
    """The model's image processor, capped at `visual_tokens` tokens per frame."""
    processor = AutoImageProcessor.from_pretrained(path)
    token_side = int(processor.patch_size) * int(processor.merge_size)
    max_pixels = visual_tokens * token_side**2
    min_pixels = min(int(processor.size["shortest_edge"]), max_pixels)
    return AutoImageProcessor.from_pretrained(path, min_pixels=min_pixels, max_pixels=max_pixels)


_VISION_TOKENS = ("image", "vision_start", "vision_end")


def _rope_index_function(model):
    """`(input_ids, image_grid_thw) -> positions (3, 1, n)` from the model's own rule."""
    inner = getattr(model, "model", model)
    rope_index = getattr(inner, "get_rope_index", None)
    named = all(hasattr(model.config, f"{name}_token_id") for name in _VISION_TOKENS)
    if rope_index is None or not named:
        raise ModelLoadError(
            f"model type {model.config.model_type!r} is not supported by the transformers "
            "adapter: it needs a Qwen-VL family model (multimodal RoPE, vision start/end tokens)"
        )
    # transformers 5 marks image tokens with explicit modality ids; 4.57 finds them itself.
    wants_types = "mm_token_type_ids" in inspect.signature(rope_index).parameters
    image_token_id = model.config.image_token_id

    def positions(input_ids: torch.Tensor, grid_thw: torch.Tensor | None) -> torch.Tensor:
        extra = {}
        if wants_types:
            extra["mm_token_type_ids"] = (input_ids == image_token_id).int()
        return rope_index(input_ids, image_grid_thw=grid_thw, **extra)[0]

    return positions


def _stop_ids(model, tokenizer) -> frozenset[int]:
    """Tokens that end an answer: the end of a ChatML turn and every declared EOS."""
    ids = {tokenizer.convert_tokens_to_ids(TURN_END)}
    for source in (tokenizer.eos_token_id, model.generation_config.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(source)
    return frozenset(ids)
