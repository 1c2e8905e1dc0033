"""The stand-in `vllm` package (tests/stand_in_vllm) for tests of the `vllm` adapter (the
`stand_in` fixture of conftest.py uses it): importable here and in served adapter
processes, its call log, and an adapter that needs no model stack (no torch, no
transformers): the real `vllm` adapter with a plain-text chat template in place of the
model's processor.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from streameval.adapters.vllm_engine import VLLMEngineAdapter

STAND_IN = Path(__file__).resolve().parent / "stand_in_vllm"


def script_stand_in(monkeypatch: pytest.MonkeyPatch, log: Path):
    """Make the stand-in `vllm` importable here and in served adapter processes, logging to
    `log`; returns a function that scripts it (environment variables) and gives the log."""
    monkeypatch.syspath_prepend(str(STAND_IN))
    paths = [str(STAND_IN), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("STAND_IN_VLLM_LOG", str(log))
    forget_vllm()

    def script(**env: str) -> Path:
        for key, value in env.items():
            monkeypatch.setenv(f"STAND_IN_VLLM_{key.upper()}", value)
        return log

    return script


def forget_vllm() -> None:
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


def log_entries(log: Path, event: str) -> list[dict]:
    if not log.exists():
        return []
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    return [e for e in entries if e["event"] == event]


class TextTemplate:
    """Renders a chat's text parts, as a processor's chat template would render the text."""

    chat_template = "text parts, one per line"

    def apply_chat_template(self, messages: list[dict[str, Any]], **_options: Any) -> str:
        parts = [m["content"] for m in messages if isinstance(m["content"], str)]
        for message in messages:
            if isinstance(message["content"], list):
                parts += [p.get("text", f"<{p['type']}>") for p in message["content"]]
        return "\n".join(parts)


class StandInVLLMAdapter(VLLMEngineAdapter):
    """The `vllm` adapter on the stand-in engine, its chat template `TextTemplate`."""

    def _load(self):
        return TextTemplate(), self._vllm.AsyncLLMEngine.from_engine_args(self._engine_args)
