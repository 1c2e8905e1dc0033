"""Print what pyproject.toml requires, one requirement a line: the build backend's, the
project's dependencies and those of the extras named as arguments.

The images install these in a layer of their own, built from pyproject.toml and this file
alone, so that a change to the sources reuses it (docker/Dockerfile). Standard library only:
it runs in the bare base image, before anything is installed.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: dict, extras: list[str]) -> list[str]:
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise SystemExit(f"error: pyproject.toml has no extra {', '.join(unknown)}")
    return [
        *pyproject["build-system"]["requires"],
        *project["dependencies"],
        *(requirement for extra in extras for requirement in optional[extra]),
    ]


if __name__ == "__main__":
    pyproject = tomllib.loads(Path("pyproject.toml").read_text())
    print("\n".join(requirements(pyproject, sys.argv[1:])))
