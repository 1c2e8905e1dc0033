"""A non-editable install (`pip install .`, the README's Quick start and the Docker images)
ships every file of the package folders: each module lies in a listed package or matches
its package's `package-data` patterns in pyproject.toml, and so does every other file. (An
editable install reads the repository, so the other tests cannot see a file left out.)"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

from streameval.child_process import module_command

REPO = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_folders() -> dict[str, Path]:
    """Each listed package and its folder, from the `package-dir` mapping."""
    roots = SETUPTOOLS["package-dir"]
    folders = {}
    for package in SETUPTOOLS["packages"]:
        root = max((r for r in roots if package == r or package.startswith(f"{r}.")), key=len)
        rest = package.removeprefix(root).strip(".")
        folders[package] = REPO / roots[root] / Path(*rest.split(".") if rest else ())
    return folders


def _shipped_files() -> list[Path]:
    """The files of the mapped folders, but for caches and notes for developers."""
    return [
        path
        for folder in set(SETUPTOOLS["package-dir"].values())
        for path in (REPO / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".md"
    ]


def _ships(path: Path, folders: dict[str, Path]) -> bool:
    """A module of a listed package, or a file that the `package-data` of a package holding
    it names (relative to that package's folder, as setuptools reads them). The migrations'
    modules are data: Alembic reads them, nothing imports them as a package."""
    if path.suffix == ".py" and path.parent in folders.values():
        return True
    patterns = SETUPTOOLS.get("package-data", {})
    return any(
        _glob_matches(path.relative_to(folder).parts, glob)
        for package, folder in folders.items()
        if path.is_relative_to(folder)
        for glob in patterns.get(package, [])
    )


def _glob_matches(parts: tuple[str, ...], glob: str) -> bool:
    """A glob as setuptools reads it: `*` stays within one folder."""
    pieces = glob.split("/")
    return len(pieces) == len(parts) and all(map(fnmatch.fnmatchcase, parts, pieces))


def test_every_file_of_the_package_folders_ships() -> None:
    folders = _package_folders()
    left_out = sorted(
        str(path.relative_to(REPO)) for path in _shipped_files() if not _ships(path, folders)
    )
    assert left_out == []


def test_a_child_process_does_not_import_from_the_current_folder(tmp_path: Path) -> None:
    """From a checkout's root, where the Quick start runs, its `streameval/` folder would
    hide a non-editable install's package from `python -m`: the Core's children (adapter,
    store writer, scorer) are started without the current folder on their path."""
    (tmp_path / "only_here.py").write_text("print('imported from the current folder')\n")
    plain = [sys.executable, "-m", "only_here"]
    assert subprocess.run(plain, cwd=tmp_path, capture_output=True).returncode == 0
    ours = subprocess.run(module_command("only_here"), cwd=tmp_path, capture_output=True, text=True)
    assert ours.returncode != 0 and "No module named only_here" in ours.stderr
