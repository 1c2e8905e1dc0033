"""Typed adapter configuration: a YAML file or packaged preset, plus `-A key=value` overrides.

An adapter that takes options declares them as a pydantic model on its class
(`Config = MyConfig`, usually a subclass of `AdapterConfig`) and accepts an instance of it
in `__init__`. This module turns what a user typed into that instance, or into one
`AdapterConfigError` line that names the offending option.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from streameval.adapters.errors import AdapterSetupError

PRESET_DIR = Path(__file__).resolve().parent / "presets"


class AdapterConfig(BaseModel):
    """Base of adapter options: unknown keys are errors, values are fixed once served."""

    # No protected namespaces: adapters have options such as `model_version`.
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())


class AdapterConfigError(AdapterSetupError, ValueError):
    """A configuration the user gave that cannot be read or does not validate."""


# --------------------------------------------------------------------------- presets


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESET_DIR.glob("*.yaml"))


def resolve_config_source(source: str | Path) -> Path:
    """An existing file, else the packaged preset of that name."""
    path = Path(source)
    if path.is_file():
        return path
    preset = PRESET_DIR / f"{source}.yaml"
    if preset.is_file():
        return preset
    raise AdapterConfigError(
        f"no config file {str(source)!r} and no preset of that name "
        f"(presets: {', '.join(preset_names())})"
    )


def read_config_file(source: str | Path) -> dict[str, Any]:
    path = resolve_config_source(source)
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise AdapterConfigError(f"config {path}{where}: not valid YAML") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise AdapterConfigError(f"config {path}: must be a mapping of option: value")
    return loaded


# --------------------------------------------------------------------------- overrides


def parse_overrides(items: Iterable[str], model: type[BaseModel] | None) -> dict[str, Any]:
    """`key=value` pairs; dotted keys reach into mappings (`extra_body.top_k=5`).

    Values are YAML (`8` is a number, `[a, b]` a list, `{x: 1}` a mapping), except for a
    top-level option typed as text, which keeps the characters typed: `model_version=2.10`
    must not turn into the number 2.1.
    """
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise AdapterConfigError(f"-A {item!r}: expected key=value")
        path = key.split(".")
        value = raw if len(path) == 1 and _is_text_option(model, key) else _yaml_value(key, raw)
        target = overrides
        for part in path[:-1]:
            nested = target.setdefault(part, {})
            if not isinstance(nested, dict):
                raise AdapterConfigError(f"-A {key}: {part} was already given a plain value")
            target = nested
        target[path[-1]] = value
    return overrides


def _yaml_value(key: str, raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise AdapterConfigError(f"-A {key}: cannot read value {raw!r}") from None


def _is_text_option(model: type[BaseModel] | None, key: str) -> bool:
    if model is None or key not in model.model_fields:
        return False
    annotation = model.model_fields[key].annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # str | None
        return str in typing.get_args(annotation)
    return annotation is str


def merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Overrides win; mappings merge key by key so `-A extra_body.x=1` keeps the file's y."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# --------------------------------------------------------------------------- validation


def validate_config(adapter: str, model: type[BaseModel], values: Mapping[str, Any]) -> BaseModel:
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        raise AdapterConfigError(_one_line(adapter, model, exc)) from None


def _one_line(adapter: str, model: type[BaseModel], exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "config"
    if first["type"] == "extra_forbidden":
        known = ", ".join(model.model_fields)
        return f"{adapter} config: unknown option {where!r} (options: {known})"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        return f"{adapter} config: {where}: required (give it in --config or with -A {where}=...)"
    return f"{adapter} config: {where}: {message} (got {first.get('input')!r})"


def load_config(
    adapter: str,
    model: type[BaseModel],
    source: str | Path | None = None,
    overrides: Iterable[str] = (),
) -> BaseModel:
    """The adapter's typed options: file (or preset) first, then `-A` overrides on top."""
    values = read_config_file(source) if source is not None else {}
    return validate_config(adapter, model, merge(values, parse_overrides(overrides, model)))
