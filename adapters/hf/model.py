"""A Hugging Face vision-language model fed one stream at a time through a growing KV cache.

Supported: models that place image tokens with multimodal RoPE computed by their own
`get_rope_index` and that name their image, vision-start and vision-end tokens in the
config: the Qwen2-VL, Qwen2.5-VL and Qwen3-VL families, loaded through the generic
image-text-to-text auto class, and Qwen2.5-Omni's thinker (a checkpoint of the whole model,
as released, loads its thinker only), which also hears: its audio blocks are
`<|audio_bos|>`, one `<|AUDIO|>` per 40 ms of sound, `<|audio_eos|>`
(transformers' processing_qwen2_5_omni.py and modeling_qwen2_5_omni.py). Each append runs
the new tokens (and a frame's pixels or a block's sound) on top of the cache, so the cost of
a frame is its own tokens, never the history again.

Works with transformers 4.57 and 5.x: the two places where their APIs differ (the cache
keyword, the RoPE index arguments) are resolved once, at load time.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoFeatureExtractor,
    AutoImageProcessor,
    AutoModelForImageTextToText,
    AutoTokenizer,
    DynamicCache,
)
from transformers.utils import logging as hf_logging

from streameval.adapters.errors import ModelLoadError
from streameval.adapters.hf.chat import TURN_END


@dataclass(frozen=True)
class EncodedFrame:
    """One frame (or, `modality="video"`, one chunk of frames) as the model takes it:
    placeholder ids plus the vision tensors."""

    token_ids: list[int]
    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    pixels: int  # after the processor's resize: what the vision encoder sees, all frames
    modality: str = "image"  # or "video"
    second_per_grid: float | None = None  # a video's seconds per temporal grid step


@dataclass(frozen=True)
class EncodedAudio:
    """A span of sound as the model takes it: its placeholder ids (start, one per audio
    token, end) and its log-mel features (mel bins x frames)."""

    token_ids: list[int]
    features: torch.Tensor
    seconds: float
    tokens: int  # audio tokens, the markers not counted


# What one forward pass can carry behind its placeholders.
Media = EncodedFrame | EncodedAudio


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

    def __init__(
        self, model, tokenizer, image_processor, device: str, feature_extractor=None
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        # Set for a model that hears (one with an audio token), else None.
        self.feature_extractor = feature_extractor
        self.device = device
        self.lock = threading.Lock()
        # Every session's cache while it lives, for `memory()`; its own lock, as `/info`
        # reads it while a forward pass holds `lock`.
        self._caches: weakref.WeakSet[DynamicCache] = weakref.WeakSet()
        self._caches_lock = threading.Lock()
        self._rope_index = _rope_index_function(model)  # refuses unsupported models first
        config = model.config
        self.image_token_id: int = config.image_token_id
        self._vision_start: int = config.vision_start_token_id
        self._vision_end: int = config.vision_end_token_id
        self._merge = int(image_processor.merge_size)
        self.max_context: int = config.get_text_config().max_position_embeddings
        self.vocab_size: int = config.get_text_config().vocab_size
        # Placeholders stand for pixels: a generated one would have no image behind it.
        placeholders = [self.image_token_id, self._vision_start, self._vision_end]
        self.video_token_id: int | None = getattr(config, "video_token_id", None)
        placeholders += [] if self.video_token_id is None else [self.video_token_id]
        self.audio_token_id: int | None = getattr(config, "audio_token_id", None)
        if self.audio_token_id is not None:
            self._audio_start: int = config.audio_start_token_id
            self._audio_end: int = config.audio_end_token_id
            placeholders += [self.audio_token_id, self._audio_start, self._audio_end]
        self.temporal_patch = int(getattr(image_processor, "temporal_patch_size", 2))
        # Qwen3-VL separates a video's temporal groups with timestamps in text.
        self._timestamps = config.model_type.startswith("qwen3")
        self.unspeakable = torch.tensor(placeholders, device=device)
        self.stop_ids = _stop_ids(model, tokenizer)
        rotary = getattr(getattr(model, "model", model), "language_model", None)
        self._inv_freq: torch.Tensor = rotary.rotary_emb.inv_freq
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
        random_weights: bool = False,
    ) -> VisionLanguageModel:
        """`random_weights`: build the architecture of the directory's config.json on
        `device` with freshly initialised weights instead of reading any (a speed check of a
        full-size model without its checkpoint: bench/gpu_transformers_check.py)."""
        source = str(Path(path).expanduser())  # a Hugging Face id passes through unchanged
        if path.startswith(("/", ".", "~")) and not Path(source).is_dir():
            raise ModelLoadError(f"directory {path!r} does not exist")
        device = resolve_device(device)
        hf_logging.disable_progress_bar()  # the adapter's output is its log, not a terminal
        extra = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            image_processor = _image_processor(source, visual_tokens)
            if random_weights:
                model = _random_model(source, dtype, device, extra)
            else:
                model = _pretrained_model(
                    source, dtype if dtype == "auto" else getattr(torch, dtype), extra
                )
            hears = getattr(model.config, "audio_token_id", None) is not None
            feature_extractor = AutoFeatureExtractor.from_pretrained(source) if hears else None
        except (OSError, ValueError, KeyError) as exc:
            reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise ModelLoadError(f"cannot load {path!r}: {reason}") from None
        return cls(model.to(device).eval(), tokenizer, image_processor, device, feature_extractor)

    @property
    def hears(self) -> bool:
        """The model takes sound (Qwen2.5-Omni's thinker)."""
        return self.feature_extractor is not None

    @property
    def sample_rate(self) -> int | None:
        """The sound's sample rate the model takes (None: it takes none)."""
        extractor = self.feature_extractor
        return None if extractor is None else int(extractor.sampling_rate)

    @property
    def audio_window_s(self) -> float:
        """Seconds of sound the audio encoder attends within: it cuts a block's features
        into windows of 2 x n_window mel frames and encodes each alone (the released
        checkpoint: 2 s)."""
        audio = self.model.config.audio_config
        extractor = self.feature_extractor
        return 2 * audio.n_window * extractor.hop_length / extractor.sampling_rate

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

    def encode_chunk(
        self, rgbs: Sequence[np.ndarray], times: Sequence[float], fps: float
    ) -> EncodedFrame:
        """Frames as one video block, the way the Qwen-VL video processors lay them out:
        groups of `temporal_patch_size` frames (the last frame repeated to fill the last
        group), each frame resized like an image. `times` are the frames' video times (the
        timestamps Qwen3-VL writes before each group); `fps` the stream's frame rate
        (Qwen2.5-VL's seconds per temporal step)."""
        if self.video_token_id is None:
            raise ValueError("this model has no video token")
        step = self.temporal_patch
        rgbs, times = list(rgbs), list(times)
        while len(rgbs) % step:
            rgbs.append(rgbs[-1])
            times.append(times[-1])
        batch = self.image_processor(images=rgbs, return_tensors="pt")
        grids = batch["image_grid_thw"]
        if not bool((grids == grids[0]).all()):
            raise ValueError("the frames of a video chunk must have one size")
        _, height, width = (int(v) for v in grids[0])
        patch = int(self.image_processor.patch_size)
        per_frame = height * width
        # Each image patch holds its frame `step` times over; a video patch holds `step`
        # consecutive frames: take one copy per frame and regroup them in time.
        single = batch["pixel_values"].view(len(rgbs), per_frame, -1, step, patch, patch)[
            :, :, :, 0
        ]
        groups = len(rgbs) // step
        pixel_values = (
            single.reshape(groups, step, per_frame, -1, patch, patch)
            .permute(0, 2, 3, 1, 4, 5)
            .reshape(groups * per_frame, -1)
        )
        visual = per_frame // self._merge**2
        block = [self._vision_start] + [self.video_token_id] * visual + [self._vision_end]
        if self._timestamps:  # Qwen3-VL: "<1.5 seconds>" before each group of frames
            ids: list[int] = []
            for group in range(groups):
                middle = (times[group * step] + times[group * step + step - 1]) / 2
                ids += self.tokenize(f"<{middle:.1f} seconds>") + block
        else:
            ids = [self._vision_start] + [self.video_token_id] * (visual * groups)
            ids += [self._vision_end]
        return EncodedFrame(
            token_ids=ids,
            pixel_values=pixel_values.contiguous(),
            grid_thw=torch.tensor([[groups, height, width]]),
            pixels=len(rgbs) * height * patch * width * patch,
            modality="video",
            second_per_grid=step / fps if fps > 0 else None,
        )

    def encode_audio(self, samples: np.ndarray, sample_rate: int) -> EncodedAudio | None:
        """int16 mono PCM as one audio block, featurised as Qwen2.5-Omni's processor does
        (a Whisper log-mel, one frame per hop of sound started); None when the span is too
        short to yield an audio token (under 30 ms)."""
        extractor = self.feature_extractor
        if extractor is None:
            raise ValueError("this model takes no audio")
        if sample_rate != extractor.sampling_rate:
            raise ValueError(
                f"audio at {sample_rate} Hz; the model's feature extractor takes "
                f"{extractor.sampling_rate} Hz"
            )
        frames = -(-len(samples) // extractor.hop_length)
        tokens = _audio_tokens(frames)
        if tokens < 1:
            return None
        # The processor pads the sound with zeros to its 300-s window; every frame that
        # overlaps the sound sees only those zeros after it (n_fft // 2 either side of its
        # centre), and the frames past them are silence, which never sets the log-mel's
        # maximum. So zeros of 2 x n_fft give the same features without the 300 s.
        waveform = np.pad(samples.astype(np.float32) / 32768.0, (0, 2 * extractor.n_fft))
        batch = extractor(
            waveform, sampling_rate=sample_rate, padding="longest", return_tensors="pt"
        )
        return EncodedAudio(
            token_ids=[self._audio_start] + [self.audio_token_id] * tokens + [self._audio_end],
            features=batch["input_features"][0, :, :frames],
            seconds=len(samples) / sample_rate,
            tokens=tokens,
        )

    def new_cache(self) -> DynamicCache:
        cache = DynamicCache(config=self.model.config)
        with self._caches_lock:
            self._caches.add(cache)
        return cache

    def memory(self) -> dict[str, int | None]:
        """What the live sessions' caches hold now: their tokens and the bytes of their
        keys and values (read off the tensors), and the device's allocated bytes (weights
        included; None on the CPU)."""
        with self._caches_lock:
            caches = list(self._caches)
        layers = [layer for cache in caches for layer in _cache_layers(cache)]
        tensors = [t for layer in layers for t in (layer.keys, layer.values)]
        on_cuda = self.device.startswith("cuda")
        return {
            "sessions": len(caches),
            "kv_cache_tokens": sum(cache.get_seq_length() for cache in caches),
            "kv_cache_bytes": sum(t.numel() * t.element_size() for t in tensors),
            "device_allocated_bytes": torch.cuda.memory_allocated(self.device) if on_cuda else None,
        }

    def forward(
        self,
        cache,
        start_position: int,
        ids: list[int],
        media: Media | Sequence[Media] | None = None,
    ) -> tuple[torch.Tensor, int]:
        """Run `ids` on top of `cache`, their positions starting at `start_position`;
        `media` are the images, videos and audio blocks behind their placeholders, in order.

        Returns the next-token logits and the position after this chunk.
        """
        if isinstance(media, Media):
            media = [media]
        input_ids = torch.tensor([ids], device=self.device)
        inputs: dict = {}
        grids: dict = {}
        audios = [m for m in media or () if isinstance(m, EncodedAudio)]
        if audios:
            inputs.update(self.audio_inputs(audios))
            grids["audio_seqlens"] = inputs["feature_attention_mask"].sum(-1)
        visuals = [m for m in media or () if isinstance(m, EncodedFrame)]
        for modality, pixels_key, grid_key in _MODALITIES:
            chosen = [v for v in visuals if v.modality == modality]
            if chosen:
                pixels = torch.cat([v.pixel_values for v in chosen])
                inputs[pixels_key] = pixels.to(self.device, self.model.dtype)
                grids[grid_key] = inputs[grid_key] = torch.cat([v.grid_thw for v in chosen]).to(
                    self.device
                )
                if modality == "video" and chosen[0].second_per_grid is not None:
                    grids["second_per_grid_ts"] = torch.tensor(
                        [v.second_per_grid for v in chosen], device=self.device
                    )
        with self.lock, torch.inference_mode():
            # A chunk's positions are the whole sequence's shifted by where the previous
            # chunk ended: the rule restarts every span from the last position plus one.
            positions = self._rope_index(input_ids, grids) + start_position
            output = self.model(
                input_ids=input_ids,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_keyword: cache},
                **inputs,
            )
            # Text after a span continues from the span's last text position (a video's
            # temporal positions may run past it), and every chunk ends with text.
            return output.logits[0, -1], int(positions[:, 0, -1].max()) + 1

    def audio_inputs(self, audios: Sequence[EncodedAudio]) -> dict:
        """The blocks' features side by side, padded to the longest, with the mask that
        says which frames are sound (the thinker's `feature_attention_mask`)."""
        longest = max(a.features.shape[-1] for a in audios)
        features = torch.zeros(len(audios), audios[0].features.shape[0], longest)
        mask = torch.zeros(len(audios), longest, dtype=torch.long)
        for row, audio in enumerate(audios):
            features[row, :, : audio.features.shape[-1]] = audio.features
            mask[row, : audio.features.shape[-1]] = 1
        return {
            "input_features": features.to(self.device, self.model.dtype),
            "feature_attention_mask": mask.to(self.device),
        }

    # ------------------------------------------------------------------ cache surgery

    def keep_slots(self, cache, keep: torch.Tensor) -> None:
        """Keep only the cache slots `keep` (ascending indices) in every layer: the others'
        keys and values are gone; the kept keys keep the positions they were rotated to."""
        with self.lock, torch.inference_mode():
            for layer in _cache_layers(cache):
                index = keep.to(layer.keys.device)
                layer.keys = layer.keys.index_select(-2, index)
                layer.values = layer.values.index_select(-2, index)

    def shift_positions(self, cache, deltas: torch.Tensor) -> None:
        """Move every cached key by its slot's position delta (may be negative).

        RoPE rotations compose, and a shift moves all three M-RoPE sections (temporal,
        height, width) by the same amount, so every frequency band turns by delta x its
        frequency whichever section it belongs to: the key becomes the one the model would
        have cached at the new position. Values carry no position.
        """
        inv_freq = self._inv_freq.double()
        angles = deltas.double().to(inv_freq.device)[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        with self.lock, torch.inference_mode():
            for layer in _cache_layers(cache):
                keys = layer.keys
                cos = angles.cos().to(keys.device, torch.float32)
                sin = angles.sin().to(keys.device, torch.float32)
                turned = keys.float()
                half = turned.shape[-1] // 2
                rotated = torch.cat((-turned[..., half:], turned[..., :half]), dim=-1)
                layer.keys = (turned * cos + rotated * sin).to(keys.dtype)


def _image_processor(path: str, visual_tokens: int):
    """The model's image processor, capped at `visual_tokens` tokens per frame."""
    processor = AutoImageProcessor.from_pretrained(path)
    token_side = int(processor.patch_size) * int(processor.merge_size)
    max_pixels = visual_tokens * token_side**2
    min_pixels = min(int(processor.size["shortest_edge"]), max_pixels)
    return AutoImageProcessor.from_pretrained(path, min_pixels=min_pixels, max_pixels=max_pixels)


_VISION_TOKENS = ("image", "vision_start", "vision_end")
# (modality, pixel tensor keyword, grid keyword) as the Qwen-VL models name them.
_MODALITIES = (
    ("image", "pixel_values", "image_grid_thw"),
    ("video", "pixel_values_videos", "video_grid_thw"),
)


def _audio_tokens(frames: int) -> int:
    """Audio tokens of `frames` mel frames: the encoder's stride-2 convolution, then its
    stride-2 pooling (Qwen2.5-Omni's `_get_feat_extract_output_lengths`)."""
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def _rope_index_function(model):
    """`(input_ids, grids) -> positions (3, 1, n)` from the model's own rule; `grids` holds
    `image_grid_thw`, `video_grid_thw`, `second_per_grid_ts` and `audio_seqlens` (the
    audio blocks' mel frames) when there are any."""
    inner = getattr(model, "model", model)
    rope_index = getattr(inner, "get_rope_index", None)
    named = all(hasattr(model.config, f"{name}_token_id") for name in _VISION_TOKENS)
    if rope_index is None or not named:
        raise ModelLoadError(
            f"model type {model.config.model_type!r} is not supported by the transformers "
            "adapter: it needs a Qwen-VL family model (multimodal RoPE, vision start/end tokens)"
        )
    # transformers 5 marks image tokens with explicit modality ids; 4.57 finds them itself.
    parameters = inspect.signature(rope_index).parameters
    wants_types = "mm_token_type_ids" in parameters
    takes_seconds = "second_per_grid_ts" in parameters
    # Qwen2.5-Omni's rule: its own name for a video's seconds, the audio blocks' lengths,
    # and a mask it needs when there is no image or video in the chunk.
    hears = "audio_seqlens" in parameters
    image_token_id = model.config.image_token_id
    video_token_id = getattr(model.config, "video_token_id", None)

    def positions(input_ids: torch.Tensor, grids: dict) -> torch.Tensor:
        extra = dict(grids)
        seconds = extra.pop("second_per_grid_ts", None)
        if takes_seconds and seconds is not None:
            extra["second_per_grid_ts"] = seconds
        if hears:
            extra["second_per_grids"] = seconds
            extra["attention_mask"] = torch.ones_like(input_ids)
        if wants_types:
            types = (input_ids == image_token_id).int()
            if video_token_id is not None:
                types = types + 2 * (input_ids == video_token_id).int()
            extra["mm_token_type_ids"] = types
        return rope_index(input_ids, **extra)[0]

    return positions


# Checkpoints of a whole model whose text-generating part is one of its sub-models: the
# type in config.json and that part's config. transformers loads the part alone from the
# whole checkpoint (its conversion mapping drops the `thinker.` prefix); Qwen2.5-Omni's
# talker (speech out) is not read.
_PARTS = {"qwen2_5_omni": "thinker_config"}


def _model_config(source: str):
    config = AutoConfig.from_pretrained(source)
    part = _PARTS.get(config.model_type)
    return config if part is None else getattr(config, part)


def _pretrained_model(source: str, dtype, extra: dict):
    config = _model_config(source)
    return AutoModelForImageTextToText.from_pretrained(source, config=config, dtype=dtype, **extra)


def _random_model(source: str, dtype: str, device: str, extra: dict):
    """The model of `source`'s config.json with initialised weights, built directly on
    `device` (no copy from the CPU: a 7B model takes seconds on a GPU). Seeded, so every
    load on a device builds the same weights and a check's generated tokens repeat."""
    config = _model_config(source)
    torch.manual_seed(0)
    declared = getattr(config, "dtype", None) or "float32"  # "auto": the config's
    chosen = declared if dtype == "auto" else dtype
    with torch.device(device):
        return AutoModelForImageTextToText.from_config(
            config, dtype=getattr(torch, chosen) if isinstance(chosen, str) else chosen, **extra
        )


def _cache_layers(cache) -> list:
    """The cache's layers, each with `keys` and `values` (batch, heads, slots, head_dim)."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise ModelLoadError("this transformers version's DynamicCache has no layers")
    return [layer for layer in layers if getattr(layer, "keys", None) is not None]


def _stop_ids(model, tokenizer) -> frozenset[int]:
    """Tokens that end an answer: the end of a ChatML turn and every declared EOS."""
    ids = {tokenizer.convert_tokens_to_ids(TURN_END)}
    for source in (tokenizer.eos_token_id, model.generation_config.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(source)
    return frozenset(ids)
