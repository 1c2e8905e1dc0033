"""Adapters by name. Imports are lazy so that listing adapters never loads a model stack."""

from __future__ import annotations

import importlib

from adapters.sdk import Adapter

ADAPTERS: dict[str, str] = {
    "reference": "adapters.reference:ReferenceAdapter",
    "silent": "adapters.baselines:SilentAdapter",
    "always": "adapters.baselines:AlwaysAdapter",
    "random-choice": "adapters.baselines:RandomChoiceAdapter",
}


class UnknownAdapter(KeyError):
    def __str__(self) -> str:
        return f"unknown adapter {self.args[0]!r}; known: {', '.join(sorted(ADAPTERS))}"


def load_adapter(name: str) -> Adapter:
    """Instantiate an adapter by registry name or by `module:Class` path."""
    target = ADAPTERS.get(name, name if ":" in name else None)
    if target is None:
        raise UnknownAdapter(name)
    module_name, class_name = target.split(":", 1)
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls()
