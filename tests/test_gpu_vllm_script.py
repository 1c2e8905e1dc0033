"""bench/gpu_vllm_qwen2vl.py hands vLLM its attention backend the ways current vLLM reads it:
`vllm serve --attention-backend` and the engine argument `attention_backend` (the
VLLM_ATTENTION_BACKEND environment variable is ignored by current vLLM)."""

from __future__ import annotations

from pathlib import Path

from bench.gpu_vllm_qwen2vl import in_process_command, serve_command
from streameval.adapters.config import load_config
from streameval.adapters.vllm_engine import VLLMEngineConfig, merge_engine_args

FLAGS = {"max_model_len": 4096, "gpu_memory_utilization": 0.3}
MODEL = Path("/models/tiny")


def overrides(command: list[str]) -> list[str]:
    """The `-A key=value` options of an adapter command."""
    return [value for flag, value in zip(command, command[1:], strict=False) if flag == "-A"]


def test_vllm_serve_gets_the_attention_backend_option():
    serve = serve_command(MODEL, 8000, FLAGS, "TRITON_ATTN")
    assert serve[:3] == ["vllm", "serve", str(MODEL)]
    assert serve[-2:] == ["--attention-backend", "TRITON_ATTN"]
    assert "--attention-backend" not in serve_command(MODEL, 8000, FLAGS, None)


def test_the_in_process_adapter_gets_the_attention_backend_engine_argument():
    command = in_process_command(MODEL, 8001, FLAGS, "FLEX_ATTENTION")
    config = load_config("vllm", VLLMEngineConfig, None, overrides(command))
    assert config.engine_args == {"attention_backend": "FLEX_ATTENTION"}
    engine = merge_engine_args(config, known=None)
    assert engine["attention_backend"] == "FLEX_ATTENTION"
    assert engine["max_model_len"] == 4096 and engine["model"] == str(MODEL)

    plain = load_config(
        "vllm", VLLMEngineConfig, None, overrides(in_process_command(MODEL, 8001, FLAGS, None))
    )
    assert "attention_backend" not in merge_engine_args(plain, known=None)
