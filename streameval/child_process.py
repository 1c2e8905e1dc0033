"""The command line of a child process of ours: the same interpreter, one of our modules."""

from __future__ import annotations

import sys


def module_command(module: str, *args: str) -> list[str]:
    """`python -P -m MODULE ARGS`. `-P` keeps the current folder off the child's import
    path, as it is off the `streameval` script's: from a checkout's root (where the README's
    Quick start runs) the checkout's `streameval/` folder would otherwise hide the installed
    package, whose Core, adapters and scorer lie in other folders of the checkout. A user's
    own adapter module in the current folder is still found (adapters/registry.py)."""
    return [sys.executable, "-P", "-m", module, *args]
