#!/usr/bin/env bash
# streameval installs under one import name, so it shadows nothing: in a fresh environment
# with PyPI's `adapters` (AdapterHub) and `scorer` packages installed beside it, the demo runs,
# AdapterHub's `adapters` imports, and `scorer` resolves to PyPI's package (which cannot
# import on its own: its __init__ reads a CMakeLists.txt its wheel lacks).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/venv"
pip="$work/venv/bin/pip"
# The CPU torch from this machine's wheel (AdapterHub needs torch; a plain one is a CUDA build),
# and what PyPI's `scorer` sdist needs to build.
"$pip" install -q torch==2.13.0 Cython numpy wheel
"$pip" install -q "$repo" adapters
"$pip" install -q --no-build-isolation scorer

# The demo from the repository's root, where the README's Quick start runs it: its folders
# must not hide the installed package from the demo's child processes.
(cd "$repo" && STREAMEVAL_CACHE_DIR="$work/cache" "$work/venv/bin/streameval" demo --json \
    --store "sqlite:///$work/demo.db") > "$work/demo.json"
cd "$work"  # away from the repository, whose folders would be importable from its root
"$work/venv/bin/python" - <<'PY'
import importlib.util
import json

metrics = json.load(open("demo.json"))["metrics"]["overall"]
assert metrics["qa"]["accuracy"]["value"] == 1.0, metrics["qa"]["accuracy"]

import adapters  # AdapterHub's

assert hasattr(adapters, "AutoAdapterModel"), adapters.__file__
origin = importlib.util.find_spec("scorer").origin
assert origin.endswith("site-packages/scorer/__init__.py"), origin

import streameval.adapters.sdk
import streameval.scorer.report

assert "site-packages/streameval/adapters" in streameval.adapters.sdk.__file__
print("side by side: streameval demo ran; adapters and scorer are PyPI's own")
PY
