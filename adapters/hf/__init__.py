"""Helpers of the `transformers` adapter (adapters/transformers_adapter.py).

`text` and `chat` are pure Python; `model`, `stream` and `decoding` (how each next token is
chosen) import torch and transformers, so only the adapter's constructor and session start
import them: listing or configuring adapters never loads a model stack.

May import: chat_prompts, errors.
"""
