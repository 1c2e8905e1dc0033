"""Tiny randomly initialised Qwen-VL models, written to a folder like a downloaded checkpoint.

Qwen2-VL by default; Qwen2.5-VL and Qwen3-VL too (`FAMILIES`).

No hub access: the tokenizer is byte-level BPE over the 256 byte symbols (no merges) plus
the Qwen chat and vision special tokens, so every byte of text is one token and every
special marker is one token. Loading it takes well under a second on a CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# As a released Qwen2-VL checkpoint declares it (written by hand: the class that saves it
# needs torchvision in transformers 5, and loading picks a backend that is installed).
IMAGE_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}


def byte_level_core(special_tokens: tuple[str, ...]):
    """A `tokenizers` byte-level BPE over the 256 byte symbols, no merges, plus `special_tokens`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(special_tokens))
    return core


def build_tokenizer(special_tokens: tuple[str, ...] = SPECIAL_TOKENS):
    from transformers import Qwen2TokenizerFast

    # The Qwen2-VL processors accept only the Qwen2 tokenizer class, not a bare fast one.
    return Qwen2TokenizerFast(
        tokenizer_object=byte_level_core(special_tokens),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )


# Per family: the configuration classes, the text model's multimodal RoPE, the vision
# tower (its output width must equal the text hidden size, 32) and the patch size.
FAMILIES = {
    "qwen2_vl": {
        "classes": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration"),
        # The sections must sum to head_dim / 2 = 32 / 4 / 2.
        "rope": {"type": "mrope", "mrope_section": [2, 1, 1]},
        "vision": {"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 4, "mlp_ratio": 2},
        "patch": 14,
    },
    "qwen2_5_vl": {
        "classes": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
        "rope": {"type": "mrope", "mrope_section": [2, 1, 1]},
        "vision": {
            "depth": 2,
            "hidden_size": 32,
            "out_hidden_size": 32,
            "intermediate_size": 37,
            "num_heads": 4,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        "patch": 14,
    },
    "qwen3_vl": {
        "classes": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
        "rope": {"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        "vision": {
            "depth": 2,
            "hidden_size": 32,
            "out_hidden_size": 32,
            "intermediate_size": 37,
            "num_heads": 4,
            "deepstack_visual_indexes": [1],
            "num_position_embeddings": 64,
        },
        "patch": 16,
    },
}


def special_token_ids(tokenizer) -> dict[str, int]:
    """The config's token ids as the offline tokenizer numbers them."""
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    return {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
    }


# The text model at its tiny sizes (every family's; tests/tiny_qwen_omni.py's too).
TINY_TEXT = {
    "hidden_size": 32,
    "intermediate_size": 37,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 4096,
}


def tiny_config(tokenizer, family: str = "qwen2_vl"):
    """The family's configuration at the tiny sizes, over `tokenizer`'s vocabulary."""
    import transformers

    spec = FAMILIES[family]
    config_class = getattr(transformers, spec["classes"][0])
    ids = special_token_ids(tokenizer)
    return config_class(
        text_config={
            "vocab_size": len(tokenizer),
            **TINY_TEXT,
            "rope_scaling": spec["rope"],
            "bos_token_id": ids["bos_token_id"],
            "eos_token_id": ids["eos_token_id"],
            "pad_token_id": ids["bos_token_id"],
        },
        vision_config={
            **spec["vision"],
            "patch_size": spec["patch"],
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
        },
        **ids,
    )


def write_image_processor(directory: Path, patch: int) -> None:
    """preprocessor_config.json for `patch`-pixel patches."""
    side = patch * 2  # one visual token per 2x2 merged patches
    processor = {
        **IMAGE_PROCESSOR,
        "patch_size": patch,
        "min_pixels": 4 * side * side,  # the released Qwen defaults: 4 to 1280 tokens
        "max_pixels": 1280 * side * side,
    }
    (directory / "preprocessor_config.json").write_text(json.dumps(processor))


def build_tiny_model(directory: Path, family: str = "qwen2_vl", seed: int = 0) -> Path:
    """Write config, random weights, tokenizer and image processor to `directory`."""
    import torch
    import transformers

    spec = FAMILIES[family]
    model_class = getattr(transformers, spec["classes"][1])
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model_class(tiny_config(tokenizer, family)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    write_image_processor(directory, spec["patch"])
    return directory


# Qwen2-VL's chat format for text, image and video parts: the tiny checkpoint has none, and
# the `vllm` adapter (and `vllm serve`) render prompts with the model's template.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] in ('video', 'video_url') %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def with_chat_template(model: Path) -> Path:
    """Give a tiny checkpoint the chat template, in its tokenizer config and in
    chat_template.json (where processors look for it)."""
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "chat_template": CHAT_TEMPLATE}))
    (model / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    return model
