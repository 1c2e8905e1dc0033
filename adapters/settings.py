"""An adapter's resolved options as the settings its hello declares (`conditions.settings`).

The registry builds every adapter it serves from its `Config` (a preset or YAML file, then
`-A key=value`), and the SDK records that instance here, so two runs that differ in one
option differ in their adapter's identity without the adapter author doing anything:

- every field, defaults included, one setting per value: a nested mapping becomes dotted
  keys (`extra_body.top_k`), a list or null its JSON text;
- a secret keeps its key with `REDACTED` for a value: a `SecretStr`/`SecretBytes` field, or
  a key with a word such as `token`, `secret`, `password` or `api_key` in its name;
- a text longer than `LONG_VALUE_CHARS` (a long system prompt) is recorded as its SHA-256
  digest and length, so the hello stays small and a different text still differs;
- a field marked `Field(..., json_schema_extra=NOT_IDENTITY)` is left out: it says where or
  how the model is reached (`base_url`, timeouts, retries), not what it is shown or does;
- a field marked `Field(..., json_schema_extra=RECORDED_IF_CHANGED)` is left out at its
  default: an option added after runs were recorded, whose default is the behaviour before
  it existed (greedy decoding, no penalty), so those runs keep their identity.

Settings the adapter declares itself win over the value of the same key here: they may be
resolved further (a cache bound computed from the model's context).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr
from pydantic_core import to_jsonable_python

from streameval.protocol import AdapterConditions

Setting = str | int | float | bool
# What a redacted setting holds instead of its value.
REDACTED = "<redacted>"
# Longer texts are recorded as a digest: a hello is stored with every session.
LONG_VALUE_CHARS = 512
# `Field(json_schema_extra=NOT_IDENTITY)`: this option is not part of the adapter's identity.
NOT_IDENTITY: dict[str, Any] = {"identity": False}
# `Field(json_schema_extra=RECORDED_IF_CHANGED)`: recorded only when set away from its default.
RECORDED_IF_CHANGED: dict[str, Any] = {"identity": "if_changed"}

_SECRET_WORDS = frozenset({"token", "secret", "secrets", "password", "passwd", "apikey"})


def is_secret_name(key: str) -> bool:
    """A key naming a credential: one of its words (split at `_`, `.`, `-`) is `token`,
    `secret`, `password` or `apikey`, or two of them read `api_key`. `max_tokens` is not."""
    words = [word for word in re.split(r"[_.\-]+", key.lower()) if word]
    pairs = {f"{a}{b}" for a, b in zip(words, words[1:], strict=False)}
    return bool(_SECRET_WORDS.intersection(words)) or "apikey" in pairs


def config_settings(config: BaseModel) -> dict[str, Setting]:
    """The options of `config` as flat settings (the rules are the module's docstring)."""
    return dict(_model_settings(config, ""))


def _model_settings(model: BaseModel, prefix: str) -> Iterator[tuple[str, Setting]]:
    for name, field in type(model).model_fields.items():
        extra = field.json_schema_extra
        identity = extra.get("identity") if isinstance(extra, Mapping) else None
        value = getattr(model, name)
        if identity is False:
            continue
        if identity == "if_changed" and value == field.get_default(call_default_factory=True):
            continue
        yield from _value_settings(f"{prefix}{field.alias or name}", value)


def _value_settings(key: str, value: Any) -> Iterator[tuple[str, Setting]]:
    if isinstance(value, SecretStr | SecretBytes) or (value is not None and is_secret_name(key)):
        yield key, REDACTED
    elif isinstance(value, BaseModel):
        yield from _model_settings(value, f"{key}.")
    elif isinstance(value, Mapping) and value:
        for inner, item in value.items():
            yield from _value_settings(f"{key}.{inner}", item)
    else:
        yield key, _scalar(to_jsonable_python(value))


def _scalar(value: Any) -> Setting:
    if isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) <= LONG_VALUE_CHARS:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"sha256:{digest} ({len(text)} chars)"


def with_config_settings(conditions: AdapterConditions, config: BaseModel) -> AdapterConditions:
    """`conditions` with the options of `config` added to its settings; a setting the
    adapter declared keeps its declared value."""
    settings = {**config_settings(config), **conditions.settings}
    return conditions.model_copy(update={"settings": settings})
