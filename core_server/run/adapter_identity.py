"""Which adapter served a run, as the runner compares it on a resume and `streameval runs`
lists it; plain dicts in, nothing imported (the listing stays light)."""

from __future__ import annotations

import json


def adapter_identity(info: dict) -> dict:
    """What makes two adapters the same for a run: name, version and declared conditions
    (model name and version included), not where they are served. A condition that is
    null, or settings declaring nothing, count as absent (an older /info may not have the
    field at all)."""
    conditions = info.get("conditions") or {}
    return {
        "adapter": info.get("adapter"),
        "adapter_version": info.get("adapter_version"),
        "conditions": {
            key: value for key, value in conditions.items() if value is not None and value != {}
        },
    }


def identity_label(info: dict) -> str:
    """`name version (model_name model_version)`, for one line of text."""
    conditions = info.get("conditions") or {}
    label = f"{info.get('adapter', '?')} {info.get('adapter_version', '?')}"
    model = " ".join(
        str(conditions[k]) for k in ("model_name", "model_version") if conditions.get(k)
    )
    return f"{label} ({model})" if model else label


def identity_differences(used: dict, new: dict) -> list[str]:
    """`field old -> new` for each field of the identity that differs."""
    old, now = adapter_identity(used), adapter_identity(new)
    changes = [
        f"{key} {old[key]} -> {now[key]}"
        for key in ("adapter", "adapter_version")
        if old[key] != now[key]
    ]
    keys = list(old["conditions"]) + [k for k in now["conditions"] if k not in old["conditions"]]
    for key in keys:
        before, after = old["conditions"].get(key), now["conditions"].get(key)
        if before != after:
            changes.append(f"conditions.{key} {before} -> {after}")
    return changes


def hello_mismatch(info: dict, hello: dict) -> str | None:
    """How a session's hello differs from the identity the endpoint's /info declared (an
    adapter may not be admitted under one name and serve sessions under another), or None.
    Compared as JSON, as /info arrives."""
    changes = identity_differences(info, json.loads(json.dumps(hello)))
    if not changes:
        return None
    return (
        f"the hello names {identity_label(hello)} but the endpoint's /info named "
        f"{identity_label(info)} ({', '.join(changes)})"
    )
