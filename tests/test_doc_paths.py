"""Every file README.md and docs/*.md cite by a relative path exists in the repository.

A cited path is a Markdown document (`*.md`, relative to the citing page or to the
repository's root) or a path under one of the repository's top-level folders
(`core_server/streams/timeline.py`, `tests/fixtures/`), in a link, in code or in prose. A path
written with a placeholder in capitals (`adapters/presets/NAME.yaml`, `000N_name.py`)
stands for files of that form and is not looked up; a document never is a placeholder.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOP_LEVEL = {entry.name for entry in REPO.iterdir()}
# A relative path: optional ./ or ../, folders, then a file name with an extension or a
# folder's trailing slash; not part of a URL, an absolute path or a longer word.
PATH = re.compile(r"(?<![\w/.:~$-])((?:\.{1,2}/)?(?:[\w.-]+/)*[\w.-]+(?:\.\w+|/))")
PLACEHOLDER = re.compile(r"(?<![a-z])[A-Z][A-Z0-9_]*(?![a-z])")


def cited_paths(text: str) -> list[str]:
    cited = []
    for match in PATH.finditer(text):
        path = match.group(1)
        first = path.split("/")[0]
        if path.endswith(".md") or ("/" in path.rstrip("/") and first in TOP_LEVEL):
            cited.append(path)
    return cited


def is_placeholder(path: str) -> bool:
    return not path.endswith(".md") and PLACEHOLDER.search(path) is not None


def missing(page: Path) -> list[str]:
    return [
        path
        for path in cited_paths(page.read_text())
        if not is_placeholder(path)
        and not (page.parent / path).exists()
        and not (REPO / path).exists()
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_cited_path_exists(page: Path) -> None:
    assert missing(page) == []


def test_the_check_finds_paths_in_links_code_and_prose() -> None:
    text = (
        "See [the protocol](protocol.md#frames), `core_server/streams/timeline.py`, "
        "docs/metrics.md and `tests/fixtures/`; not https://x.org/a/b.md, "
        "/etc/hosts.md, `adapters/presets/NAME.yaml` or `synth-out/train.jsonl`."
    )
    cited = cited_paths(text)
    assert cited == [
        "protocol.md",
        "core_server/streams/timeline.py",
        "docs/metrics.md",
        "tests/fixtures/",
        "adapters/presets/NAME.yaml",
    ]
    assert [path for path in cited if is_placeholder(path)] == ["adapters/presets/NAME.yaml"]
    page = REPO / "docs" / "x.md"
    assert [p for p in cited if not (page.parent / p).exists() and not (REPO / p).exists()] == [
        "adapters/presets/NAME.yaml"
    ]
