from vllm import AsyncEngineArgs, EngineArgs

__all__ = ["AsyncEngineArgs", "EngineArgs"]
