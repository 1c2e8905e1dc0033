"""Adapters by name: the built-ins plus those other packages register as entry points.

A third-party package makes its adapter servable by name with an entry point in the
`streameval.adapters` group (pyproject: `[project.entry-points."streameval.adapters"]`,
`my-model = "my_pkg.adapter:MyAdapter"`). Nothing here imports an adapter's module until
that adapter is served or its options are listed, so listing adapters never loads a model
stack (and the built-in model adapters import theirs in their constructors only).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ValidationError

from streameval.adapters.config import (
    AdapterConfigError,
    load_config,
    read_config_file,
    validate_config,
)
from streameval.adapters.errors import AdapterSetupError
from streameval.adapters.sdk import Adapter, check_conditions, conditions_problem
from streameval.protocol import AdapterConditions

ENTRY_POINT_GROUP = "streameval.adapters"
BUILT_IN = "built-in"


@dataclass(frozen=True)
class BuiltIn:
    target: str  # module:Class
    kind: str  # what it runs: no model, a baseline, or the stack that runs the model
    description: str  # one line, for `streameval adapter list`


ADAPTERS: dict[str, BuiltIn] = {
    "reference": BuiltIn(
        "streameval.adapters.reference:ReferenceAdapter",
        "no model",
        "Answers the synthetic benchmark from pixels (and synthetic-av's sound) alone "
        "(the demo's adapter)",
    ),
    "silent": BuiltIn(
        "streameval.adapters.baselines:SilentAdapter",
        "baseline",
        "Never speaks: declines every question and stays silent at every step",
    ),
    "always": BuiltIn(
        "streameval.adapters.baselines:AlwaysAdapter",
        "baseline",
        "Speaks at every step and always picks the first option",
    ),
    "random-choice": BuiltIn(
        "streameval.adapters.baselines:RandomChoiceAdapter",
        "baseline",
        "Picks an option at random, seeded by the record so reruns agree",
    ),
    "openai": BuiltIn(
        "streameval.adapters.openai_adapter:OpenAIAdapter",
        "HTTP client",
        "A chat VideoLLM behind an OpenAI-compatible server (vLLM, SGLang, an API)",
    ),
    "transformers": BuiltIn(
        "streameval.adapters.transformers_adapter:TransformersAdapter",
        "torch",
        "A Hugging Face VideoLLM streaming natively on its own KV cache",
    ),
    "videollm-online": BuiltIn(
        "streameval.adapters.videollm_online.adapter:VideoLLMOnlineAdapter",
        "torch",
        "VideoLLM-online: decides at every frame to speak or stay silent, on its KV cache",
    ),
    "vllm": BuiltIn(
        "streameval.adapters.vllm_engine:VLLMEngineAdapter",
        "vLLM",
        "A chat VideoLLM on a vLLM engine inside the adapter's process",
    ),
}

# A missing module named on the left is installed by the extra on the right.
_EXTRAS = {"torch": "transformers", "transformers": "transformers", "vllm": "vllm"}


class AdapterLoadError(AdapterSetupError):
    """An adapter that cannot be served: unknown, not importable, or badly configured."""


class UnknownAdapter(AdapterLoadError):
    def __init__(self, name: str) -> None:
        known = ", ".join(sorted(available_adapters()))
        super().__init__(f"unknown adapter {name!r}; known: {known} (or give module:Class)")


@dataclass(frozen=True)
class AdapterEntry:
    name: str
    target: str  # module:Class
    origin: str  # "built-in" or the distribution that registered it
    kind: str
    description: str


def available_adapters() -> dict[str, AdapterEntry]:
    """Built-ins and entry points; a built-in name cannot be taken over by a package.

    An entry point's description is its distribution's summary: reading the adapter's own
    docstring would import its module, and with it perhaps a model stack."""
    found = {
        name: AdapterEntry(name, b.target, BUILT_IN, b.kind, b.description)
        for name, b in ADAPTERS.items()
    }
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in found:
            dist = point.dist
            origin = dist.name if dist is not None else "entry point"
            summary = (dist.metadata.get("Summary") or "") if dist is not None else ""
            found[point.name] = AdapterEntry(
                point.name, point.value, origin, f"plugin ({origin})", summary
            )
    return found


def adapter_class(name: str) -> type[Adapter]:
    """Import the class of a registered name or of a `module:Class` path (a module in the
    current folder included)."""
    entry = available_adapters().get(name)
    target = entry.target if entry is not None else name
    if ":" not in target:
        raise UnknownAdapter(name)
    module_name, class_name = target.split(":", 1)
    if not module_name:
        raise UnknownAdapter(name)
    if entry is None:
        _find_in_current_folder(module_name)
    module = _import_module(name, module_name)
    if not hasattr(module, class_name):
        raise AdapterLoadError(_no_attribute(name, module, class_name))
    found = getattr(module, class_name)
    if not (isinstance(found, type) and issubclass(found, Adapter)):
        raise AdapterLoadError(
            f"adapter {name!r}: {class_name} in module {module_name} is {_what(found)}, "
            "not an Adapter subclass"
        )
    return found


def _no_attribute(name: str, module: ModuleType, attribute: str) -> str:
    """The attribute is not there: name the Adapter classes the module does define."""
    defined = sorted(
        key
        for key, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, Adapter)
        and value.__module__ == module.__name__
    )
    defines = (
        f"its Adapter classes: {', '.join(defined)}" if defined else "it defines no Adapter class"
    )
    return f"adapter {name!r}: module {module.__name__} has no attribute {attribute} ({defines})"


def _what(value: object) -> str:
    if isinstance(value, type):
        return "a class"
    if isinstance(value, ModuleType):
        return "a module"
    return "a function" if callable(value) else f"a {type(value).__name__} value"


def _find_in_current_folder(module_name: str) -> None:
    """Make a module in the current folder importable, as `python -m` does: the `streameval`
    script puts its own folder first on the path, not the current one. Only for a module
    found nowhere else, so a file here never hides an installed package."""
    top = module_name.split(".")[0]
    here = Path.cwd()
    in_here = (here / f"{top}.py").is_file() or (here / top).is_dir()
    if in_here and importlib.util.find_spec(top) is None:
        sys.path.insert(0, str(here))


def _import_module(name: str, module_name: str) -> ModuleType:
    """The adapter's module; one line for what the user can fix: a module that is not there
    or needs a package that is not installed, conditions declared without a required field."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and f"{module_name}.".startswith(f"{exc.name}."):
            raise AdapterLoadError(_not_found(name, exc.name)) from None
        raise AdapterLoadError(_missing_module(name, exc)) from None
    except ValidationError as exc:  # `conditions = AdapterConditions(...)` in a class body
        if exc.title != AdapterConditions.__name__:
            raise
        raise _conditions_error(name, exc) from None


def _not_found(name: str, module_name: str) -> str:
    top = module_name.split(".")[0]
    return (
        f"adapter {name!r}: no module {module_name!r} on the Python path nor in the current "
        f"folder ({Path.cwd()}); run from the folder that holds {top}.py, or add that folder "
        "to PYTHONPATH"
    )


def _conditions_error(name: str, exc: ValidationError) -> AdapterLoadError:
    return AdapterLoadError(f"adapter {name!r}{_line_of(exc)}: {conditions_problem(exc)}")


def _line_of(exc: BaseException) -> str:
    """` (FILE, line N)`: where the adapter's own code raised `exc` (not pydantic's)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if "pydantic" not in Path(frame.filename).parts:
            return f" ({frame.filename}, line {frame.lineno})"
    return ""


def config_model(cls: type[Adapter]) -> type[BaseModel] | None:
    """The adapter's options model (`Config` on its class), or None if it takes none."""
    model = getattr(cls, "Config", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def preset_adapters(preset: str) -> list[str]:
    """The built-in adapters a packaged preset configures: those whose options it fills
    (model presets of the chat backends suit `openai` and `vllm`; a streaming-native model's
    preset, the `transformers` adapter)."""
    values = read_config_file(preset)
    fitting = []
    for name in ADAPTERS:
        model = config_model(adapter_class(name))
        if model is None:
            continue
        try:
            validate_config(name, model, values)
        except AdapterConfigError:
            continue
        fitting.append(name)
    return fitting


def build_adapter(
    name: str, config_file: str | Path | None = None, overrides: Iterable[str] = ()
) -> Adapter:
    """What `streameval adapter serve NAME --config FILE -A key=value` serves."""
    cls = adapter_class(name)
    model = config_model(cls)
    overrides = list(overrides)
    if model is None:
        if config_file is not None or overrides:
            raise AdapterConfigError(f"adapter {name!r} takes no options")
        return _instantiate(name, cls, None)
    return _instantiate(name, cls, load_config(name, model, config_file, overrides))


def load_adapter(name: str, config: Mapping[str, Any] | None = None) -> Adapter:
    """Instantiate an adapter by name with options given as a mapping (validated)."""
    cls = adapter_class(name)
    model = config_model(cls)
    if model is None:
        if config:
            raise AdapterConfigError(f"adapter {name!r} takes no options")
        return _instantiate(name, cls, None)
    return _instantiate(name, cls, validate_config(name, model, config or {}))


def _instantiate(name: str, cls: type[Adapter], config: BaseModel | None) -> Adapter:
    # Heavy stacks (torch, vllm) are imported in the constructor, so a missing one shows
    # here rather than at module import; conditions built from options are validated there.
    try:
        adapter = cls() if config is None else cls(config)
    except ModuleNotFoundError as exc:
        raise AdapterLoadError(_missing_module(name, exc)) from None
    except ValidationError as exc:
        if exc.title != AdapterConditions.__name__:
            raise
        raise _conditions_error(name, exc) from None
    check_conditions(adapter, config)
    return adapter


def _missing_module(name: str, exc: ModuleNotFoundError) -> str:
    missing = (exc.name or "").split(".")[0]
    extra = _EXTRAS.get(missing)
    hint = f" (pip install 'streameval[{extra}]')" if extra else ""
    return f"adapter {name!r} needs the module {missing!r}, which is not installed{hint}"
