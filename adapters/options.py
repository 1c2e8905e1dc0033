"""What `streameval adapter options NAME` lists: each `-A` key of an adapter's options model
with its type, default and meaning, read from the pydantic model (its fields' descriptions).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

# A field's bounds (`Field(ge=1)`), as `int >= 1` reads them: (operator, attribute).
_BOUNDS: dict[type, tuple[str, str]] = {
    annotated_types.Ge: (">=", "ge"),
    annotated_types.Gt: (">", "gt"),
    annotated_types.Le: ("<=", "le"),
    annotated_types.Lt: ("<", "lt"),
    annotated_types.MinLen: ("length >=", "min_length"),
    annotated_types.MaxLen: ("length <=", "max_length"),
}


@dataclass(frozen=True)
class OptionInfo:
    key: str
    type: str  # as a user types it: `int >= 1`, `buffer | drop`, `str or null`
    required: bool
    default: Any  # as JSON; None when required
    description: str


def describe_options(model: type[BaseModel]) -> list[OptionInfo]:
    """The options in the model's order (its base's fields first)."""
    return [_option(key, field) for key, field in model.model_fields.items()]


def _option(key: str, field: FieldInfo) -> OptionInfo:
    required = field.is_required()
    default = None if required else field.get_default(call_default_factory=True)
    return OptionInfo(
        key=field.alias or key,
        type=type_text(field),
        required=required,
        default=to_jsonable_python(default),
        description=field.description or "",
    )


def type_text(field: FieldInfo) -> str:
    annotation = field.annotation
    nullable = _is_union(annotation) and type(None) in typing.get_args(annotation)
    bounds = [
        f"{operator} {getattr(item, attribute)}"
        for item in field.metadata
        for kind, (operator, attribute) in _BOUNDS.items()
        if isinstance(item, kind)
    ]
    text = _annotation_text(annotation)
    if bounds:
        text += " " + ", ".join(bounds)
    return f"{text} or null" if nullable else text


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _annotation_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if _is_union(annotation):
        return " | ".join(_annotation_text(arg) for arg in args if arg is not type(None))
    if origin is typing.Literal:
        return " | ".join(str(arg) for arg in args)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return "mapping"
    if isinstance(origin, type) and issubclass(origin, Sequence | set | frozenset):
        return f"list of {_annotation_text(args[0])}" if args else "list"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))
