"""VideoLLM-online's published checkpoint: a PEFT LoRA adapter over the base Llama, with the
connector saved beside the LoRA weights (`modules_to_save`), as `PeftModel.save_pretrained`
writes it (showlab/videollm-online, models/modeling_live.py `build_live`; the released
chenjoya/videollm-online-8b-v1plus).

Files: `adapter_config.json` (`peft_type` LORA, `r`, `lora_alpha`, `use_rslora`,
`base_model_name_or_path`) and `adapter_model.safetensors` (or `adapter_model.bin`), whose
keys are `base_model.model.<module>.lora_A.weight` / `.lora_B.weight` for each adapted
linear layer and `base_model.model.connector.<i>.weight|bias` for the connector. peft is not
needed: merging is what loading an adapter for inference means, W += B @ A * scale.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from streameval.adapters.errors import ModelLoadError

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
PREFIX = "base_model.model."
CONNECTOR = "connector."
# PEFT's in-memory names of a saved copy and of the default adapter, which a checkpoint
# written by an older PEFT may keep in its keys.
_SAVED_COPY = ("modules_to_save.default.", "modules_to_save.")


@dataclass(frozen=True)
class LiveCheckpoint:
    scale: float  # lora_alpha / r (or / sqrt(r) under rsLoRA)
    lora: dict[str, tuple[torch.Tensor, torch.Tensor]]  # module -> (A, B)
    connector: dict[str, torch.Tensor]  # the connector's state dict ("0.weight", ...)


def local_directory(source: str) -> Path:
    """A directory, or a Hugging Face id already in the local cache (never downloaded)."""
    path = Path(source).expanduser()
    if path.is_dir() or source.startswith(("/", ".", "~")):
        if not path.is_dir():
            raise ModelLoadError(f"directory {source!r} does not exist")
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(source, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means the same thing here
        raise ModelLoadError(f"{source!r} is neither a directory nor in the local cache") from None


def base_model_of(directory: Path) -> str | None:
    """The LLM the adapter was trained on, as its config names it."""
    return _adapter_config(directory).get("base_model_name_or_path")


def read_checkpoint(directory: Path) -> LiveCheckpoint:
    config = _adapter_config(directory)
    weights = _weights(directory)
    lora: dict[str, dict[str, torch.Tensor]] = {}
    connector: dict[str, torch.Tensor] = {}
    for key, tensor in weights.items():
        name = key.removeprefix(PREFIX)
        if name.startswith(CONNECTOR):
            rest = name.removeprefix(CONNECTOR)
            for saved in _SAVED_COPY:
                rest = rest.removeprefix(saved)
            connector[rest] = tensor
            continue
        module, _, part = name.rpartition(".lora_")
        if part not in ("A.weight", "B.weight"):
            raise ModelLoadError(f"{directory}: unexpected weight {key!r} in the adapter")
        lora.setdefault(module, {})[part[0]] = tensor
    if not connector:
        raise ModelLoadError(f"{directory}: the adapter holds no connector weights")
    pairs = {}
    for module, parts in lora.items():
        if set(parts) != {"A", "B"}:
            raise ModelLoadError(f"{directory}: {module} has only lora_{''.join(parts)}")
        pairs[module] = (parts["A"], parts["B"])
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    return LiveCheckpoint(scale, pairs, connector)


def _adapter_config(directory: Path) -> dict:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise ModelLoadError(f"{directory}: no {CONFIG_FILE} (not a PEFT adapter checkpoint)")
    config = json.loads(path.read_text())
    if config.get("peft_type") != "LORA":
        raise ModelLoadError(f"{path}: peft_type {config.get('peft_type')!r}, expected 'LORA'")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        # Per-module ranks would need PEFT's pattern matching; the release uses none.
        raise ModelLoadError(f"{path}: per-module rank_pattern/alpha_pattern are not supported")
    return config


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    safetensors, pickled = (directory / name for name in WEIGHT_FILES)
    if safetensors.is_file():
        from safetensors.torch import load_file

        return load_file(str(safetensors))
    if pickled.is_file():
        return torch.load(pickled, map_location="cpu", weights_only=True)
    raise ModelLoadError(f"{directory}: no {' or '.join(WEIGHT_FILES)}")


@torch.no_grad()
def merge_lora(model: torch.nn.Module, checkpoint: LiveCheckpoint) -> None:
    """Fold each LoRA pair into its linear layer: W += B @ A * scale (computed in float32)."""
    modules = dict(model.named_modules())
    for name, (a, b) in checkpoint.lora.items():
        layer = modules.get(name)
        if not isinstance(layer, torch.nn.Linear):
            raise ModelLoadError(f"the adapter adapts {name!r}, which the base model lacks")
        delta = (b.float() @ a.float()) * checkpoint.scale
        if delta.shape != layer.weight.shape:
            raise ModelLoadError(
                f"the adapter's {name} is {tuple(delta.shape)}, the base model's "
                f"{tuple(layer.weight.shape)}: not the base model it was trained on"
            )
        layer.weight += delta.to(layer.weight.device, layer.weight.dtype)
