"""A tiny random VideoLLM-online checkpoint, written in the released layout.

Three folders, like the release's three downloads (showlab/videollm-online README and
models/modeling_live.py `build_live`):

- `llm/`: the base Llama (config, random weights, tokenizer: byte-level, one token per byte,
  with Llama-3's `<|begin_of_text|>` and `<|eot_id|>`, built offline as in tiny_qwen2vl);
- `hub/`: a Hugging Face cache holding `google/siglip-large-patch16-384` (a tiny random
  SigLIP, 32x32 images in 8x8 patches), where the adapter's default `vision` finds it;
- `checkpoint/`: the PEFT adapter, `adapter_config.json` (rank 4, alpha 8, the release's
  target regex, `modules_to_save: [connector]`, the base model's path) and
  `adapter_model.safetensors` with `base_model.model.<module>.lora_A/B.weight` for every
  adapted linear layer and `base_model.model.connector.{0,2}.{weight,bias}`.

`interval_logit` > 0 makes the frame interval `,` the likely next token after every frame:
the connector writes a large constant into one hidden dimension of each frame token, and the
`,` row of the LM head reads it (a model that would rather stay silent).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.tiny_qwen2vl import byte_level_core

SPECIAL_TOKENS = ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>")
VISION_ID = "google/siglip-large-patch16-384"
HIDDEN, VISION_HIDDEN, LAYERS, RANK, ALPHA = 32, 16, 2, 4, 8
PROJECTIONS = {
    "self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
}
# models/arguments_live.py: the modules the release adapts.
TARGET_MODULES = "model.*(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)|lm_head$"
# What the connector adds to a frame token's first hidden dimension (interval_logit > 0).
FRAME_MARK = 50.0


@dataclass(frozen=True)
class TinyVideoLLMOnline:
    checkpoint: Path
    llm: Path
    hub: Path  # HF_HUB_CACHE for the default vision encoder
    vision: Path  # the encoder's folder in it


def build_tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=byte_level_core(SPECIAL_TOKENS),
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        unk_token=None,
    )


def build_tiny_videollm_online(
    root: Path, seed: int = 0, interval_logit: float = 0.0
) -> TinyVideoLLMOnline:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM, SiglipConfig, SiglipModel

    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    llm = root / "llm"
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=37,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    interval = tokenizer.convert_tokens_to_ids(",")
    if interval_logit:
        with torch.no_grad():
            model.lm_head.weight[interval].zero_()
            # After the final RMSNorm the marked dimension is about sqrt(HIDDEN).
            model.lm_head.weight[interval, 0] = interval_logit / HIDDEN**0.5
    model.save_pretrained(llm)
    tokenizer.save_pretrained(llm)

    vision = SiglipConfig(
        text_config={
            "vocab_size": 16,
            "hidden_size": VISION_HIDDEN,
            "intermediate_size": 24,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 8,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
        },
        vision_config={
            "hidden_size": VISION_HIDDEN,
            "intermediate_size": 24,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
    )
    hub = root / "hub"
    repo = hub / f"models--{VISION_ID.replace('/', '--')}"
    revision = "0" * 40
    SiglipModel(vision).save_pretrained(repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)

    checkpoint = root / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "base_model_name_or_path": str(llm),
                "r": RANK,
                "lora_alpha": ALPHA,
                "lora_dropout": 0.05,
                "target_modules": TARGET_MODULES,
                "modules_to_save": ["connector"],
                "bias": "none",
                "fan_in_fan_out": False,
                "use_rslora": False,
                "inference_mode": True,
            }
        )
    )
    save_file(lora_weights(model, interval_logit), str(checkpoint / "adapter_model.safetensors"))
    return TinyVideoLLMOnline(checkpoint, llm, hub, repo / "snapshots" / revision)


def adapted_modules() -> list[str]:
    names = [
        f"model.layers.{layer}.{block}.{projection}"
        for layer in range(LAYERS)
        for block, projections in PROJECTIONS.items()
        for projection in projections
    ]
    return [*names, "lm_head"]


def lora_weights(model, interval_logit: float) -> dict:
    import torch

    modules = dict(model.named_modules())
    weights = {}
    for name in adapted_modules():
        out_features, in_features = modules[name].weight.shape
        key = f"base_model.model.{name}"
        weights[f"{key}.lora_A.weight"] = torch.randn(RANK, in_features) * 0.02
        weights[f"{key}.lora_B.weight"] = torch.randn(out_features, RANK) * 0.02
    if interval_logit:  # the LM head's `,` row stays the one written above
        weights["base_model.model.lm_head.lora_B.weight"].zero_()
    connector = torch.nn.Sequential(
        torch.nn.Linear(VISION_HIDDEN, HIDDEN), torch.nn.GELU(), torch.nn.Linear(HIDDEN, HIDDEN)
    )
    if interval_logit:
        with torch.no_grad():
            connector[2].bias[0] = FRAME_MARK
    for name, tensor in connector.state_dict().items():
        weights[f"base_model.model.connector.{name}"] = tensor.detach().clone()
    return weights
