"""The optional model stack (torch, transformers) for the model adapters' tests, which are
marked `models`. A test module calls `require_model_stack()` as it is imported: where the stack
cannot be imported its tests skip and say why, or fail where STREAMEVAL_REQUIRE_MODELS is set
(.ci/run's model-stack venv)."""

from __future__ import annotations

import importlib
import os

import pytest

EXTRA = "pip install 'streameval[transformers]'"


def require_model_stack() -> None:
    for name in ("torch", "transformers"):
        try:
            importlib.import_module(name)
        # Not only a missing package: a broken install raises ImportError, OSError (a shared
        # library), RuntimeError (an operator registered twice), which pytest.importorskip
        # (ModuleNotFoundError alone, from pytest 9.1) would let stop the collection.
        except Exception as exc:
            reason = f"{name} cannot be imported ({type(exc).__name__}: {exc}); {EXTRA}"
            if os.environ.get("STREAMEVAL_REQUIRE_MODELS"):
                pytest.fail(f"STREAMEVAL_REQUIRE_MODELS is set but {reason}", pytrace=False)
            pytest.skip(reason, allow_module_level=True)
