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


def update_subsection(title: str, intro: str, part: str, body: str, path: Path = BENCHMARKS):
    """Replace the `### part` of the `## title` section (or append it), keeping its other
    parts; the section opens with `intro`. For a benchmark whose runs write separate parts."""
    text = path.read_text() if path.exists() else HEADER
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    parts = re.split(r"^### (.*)\n", found.group(1) if found else "", flags=re.M)[1:]
    kept = dict(zip(parts[::2], (p.strip() for p in parts[1::2]), strict=True))
    kept[part] = body.strip()
    sections = "".join(f"\n\n### {name}\n\n{content}" for name, content in kept.items())
    update_section(title, intro.strip() + sections, path)
