"""The adapter side (`streameval.adapters`): the SDK a model is wrapped in (sdk.py), the
WebSocket service that exposes an adapter to the Core (server.py, inbox.py), adapters by
name (registry.py, config.py, options.py, presets/), the CPU adapters that need no weights
(reference.py, baselines.py) and the model adapters (openai_adapter.py, vllm_engine.py,
transformers_adapter.py with hf/).

It never imports the scorer; torch, transformers and vllm are imported only by the model
adapters that need them, when one is built.
"""
