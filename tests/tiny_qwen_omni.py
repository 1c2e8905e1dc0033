"""A tiny randomly initialised Qwen2.5-Omni thinker, written to a folder like a checkpoint.

Two layouts: the thinker alone (`qwen2_5_omni_thinker`, loaded by the image-text-to-text
auto class) and the released one (`qwen2_5_omni`: the thinker under `thinker.`, beside a
talker this checkpoint does not build), the layout of Qwen/Qwen2.5-Omni-7B.

No hub access: the tokenizer is tests/tiny_qwen2vl.py's byte-level one over the Qwen2.5-Omni
markers (one token per byte of text, one per marker), and preprocessor_config.json is
written by hand, as the released checkpoint's: a Whisper feature extractor (128 mel bins,
10 ms hop at 16 kHz) and the Qwen2-VL image processor in one file.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.tiny_qwen2vl import FAMILIES, IMAGE_PROCESSOR, TINY_TEXT, build_tokenizer

# Qwen2.5-Omni's markers, as its tokenizer names them.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|vision_bos|>",
    "<|vision_eos|>",
    "<|IMAGE|>",
    "<|VIDEO|>",
)

# The released preprocessor_config.json's audio half (Qwen/Qwen2.5-Omni-7B): 30 s windows
# of 128-bin log-mel features, one per 160 samples of 16 kHz sound.
FEATURE_EXTRACTOR = {
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 128,
    "sampling_rate": 16000,
    "hop_length": 160,
    "n_fft": 400,
    "chunk_length": 300,
    "n_samples": 4800000,
    "nb_max_frames": 30000,
    "padding_side": "right",
    "padding_value": 0.0,
    "dither": 0.0,
    "return_attention_mask": True,
}
PATCH = 14


def thinker_config(tokenizer, n_window: int = 100):
    """The thinker's configuration at tiny sizes (hidden 32) over `tokenizer`'s vocabulary.
    `n_window`: the audio encoder attends within windows of 2 x n_window mel frames (the
    released 100: two seconds)."""
    from transformers import Qwen2_5OmniThinkerConfig

    def token(name: str) -> int:
        return tokenizer.convert_tokens_to_ids(name)

    return Qwen2_5OmniThinkerConfig(
        text_config={
            "vocab_size": len(tokenizer),
            **TINY_TEXT,
            # The sections sum to head_dim / 2 = 32 / 4 / 2.
            "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1]},
        },
        vision_config={  # Qwen2.5-VL's vision tower
            **FAMILIES["qwen2_5_vl"]["vision"],
            "patch_size": PATCH,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
        },
        audio_config={
            "num_mel_bins": FEATURE_EXTRACTOR["feature_size"],
            "encoder_layers": 2,
            "encoder_attention_heads": 4,
            "encoder_ffn_dim": 37,
            "d_model": 32,
            "output_dim": 32,
            "n_window": n_window,
            "max_source_positions": 1500,
        },
        audio_token_index=token("<|AUDIO|>"),
        image_token_index=token("<|IMAGE|>"),
        video_token_index=token("<|VIDEO|>"),
        audio_start_token_id=token("<|audio_bos|>"),
        audio_end_token_id=token("<|audio_eos|>"),
        # Not fields of the thinker's config class; the released config.json carries them
        # and get_rope_index reads them.
        vision_start_token_id=token("<|vision_bos|>"),
        vision_end_token_id=token("<|vision_eos|>"),
        bos_token_id=token("<|endoftext|>"),
        eos_token_id=token("<|im_end|>"),
        pad_token_id=token("<|endoftext|>"),
    )


def write_preprocessor(directory: Path) -> None:
    side = PATCH * 2  # one visual token per 2x2 merged patches
    preprocessor = {
        **FEATURE_EXTRACTOR,
        **IMAGE_PROCESSOR,
        "patch_size": PATCH,
        "min_pixels": 4 * side * side,
        "max_pixels": 1280 * side * side,
    }
    (directory / "preprocessor_config.json").write_text(json.dumps(preprocessor))


def build_tiny_omni(directory: Path, released_layout: bool = False, seed: int = 0) -> Path:
    """Write config, random weights, tokenizer and preprocessor config to `directory`.
    `released_layout`: the whole model's config (`qwen2_5_omni`, audio output off) with the
    thinker's weights under `thinker.`, as Qwen/Qwen2.5-Omni-7B is laid out."""
    import torch
    from transformers import (
        Qwen2_5OmniConfig,
        Qwen2_5OmniForConditionalGeneration,
        Qwen2_5OmniThinkerForConditionalGeneration,
    )

    tokenizer = build_tokenizer(SPECIAL_TOKENS)
    config = thinker_config(tokenizer)
    torch.manual_seed(seed)
    if released_layout:
        whole = Qwen2_5OmniConfig(thinker_config=config.to_dict(), enable_audio_output=False)
        Qwen2_5OmniForConditionalGeneration(whole).save_pretrained(directory)
    else:
        Qwen2_5OmniThinkerForConditionalGeneration(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    write_preprocessor(directory)
    return directory
