"""The model adapters' tests skip, not stop the collection, where the model stack is broken
rather than absent: a torch whose import raises ImportError (a missing shared library) is
what a clean machine's pytest met, and pytest.importorskip (from pytest 9.1) lets it through."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODEL_TESTS = [
    "tests/test_transformers_adapter.py",
    "tests/test_transformers_long_stream.py",
    "tests/test_vllm_engine.py",
]
BROKEN = 'raise ImportError("libtorch_cpu.so: cannot open shared object file")\n'


def test_a_torch_that_cannot_import_skips_the_model_tests(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(BROKEN)  # first on the path: it shadows
    env = {key: value for key, value in os.environ.items() if key != "STREAMEVAL_REQUIRE_MODELS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, *MODEL_TESTS], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    # 5: every module skipped, so no test was collected; an error would be 2 (interrupted).
    assert done.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout + done.stderr
    reason = (
        "torch cannot be imported (ImportError: libtorch_cpu.so: cannot open shared object "
        "file); pip install 'streameval[transformers]'"
    )
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert [line.split(": ", 1)[1] for line in skipped] == [reason]
    assert skipped[0].startswith("SKIPPED [3] ")
    assert done.stdout.splitlines()[-1].startswith("3 skipped in ")
