"""Helpers of the `transformers` adapter (adapters/transformers_adapter.py).

`text` and `chat` are pure Python; `model` imports torch and transformers, so only the
adapter's constructor imports it: listing or configuring adapters never loads a model stack.

May import: chat_prompts, errors.
"""
