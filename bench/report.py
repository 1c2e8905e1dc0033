"""Keep BENCHMARKS.md as one section per benchmark, each rewritten by its own script."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
HEADER = "# Benchmarks\n\nSpeed targets are measured by the scripts in `bench/`, not by tests.\n"


def update_section(title: str, body: str, path: Path = BENCHMARKS) -> None:
    """Replace the `## title` section (or append it), leaving every other section as is."""
    text = path.read_text() if path.exists() else HEADER
    section = f"## {title}\n\n{body.rstrip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)
