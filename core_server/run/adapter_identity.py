"""Which adapter served a run, as the runner compares it on a resume and `streameval runs`
lists it; plain dicts in, nothing imported (the listing stays light)."""

from __future__ import annotations

import json

# A refusal names this many differences, then counts the rest: its message stays one line.
MAX_CHANGES_SHOWN = 6
# A setting's value in a refusal is cut to this many characters.
SHOWN_CHARS = 60
# A setting one adapter declares and the other does not.
ABSENT = "(absent)"


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
    before, after = dict(old["conditions"]), dict(now["conditions"])
    settings = setting_differences(before.pop("settings", {}), after.pop("settings", {}))
    for key in _keys(before, after):
        if before.get(key) != after.get(key):
            changes.append(f"conditions.{key} {before.get(key)} -> {after.get(key)}")
    changes += [f"conditions.settings.{key} {_shown(a)} -> {_shown(b)}" for key, a, b in settings]
    if len(changes) > MAX_CHANGES_SHOWN:
        hidden = len(changes) - MAX_CHANGES_SHOWN
        changes = [*changes[:MAX_CHANGES_SHOWN], f"and {hidden} more"]
    return changes


def _keys(first: dict, second: dict) -> list[str]:
    """The keys of both, the first's order, then the second's new ones."""
    return list(first) + [key for key in second if key not in first]


def _shown(value: object) -> str:
    """A setting's value in a refusal, quoted if text, cut short if long."""
    if value is None:
        return ABSENT
    text = json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def setting_differences(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """(key, value in a, value in b) for each setting that differs; None where absent."""
    return [(key, a.get(key), b.get(key)) for key in _keys(a, b) if a.get(key) != b.get(key)]


def run_settings(conditions: dict) -> dict:
    """The adapter settings a run was made with: those of the last adapter identity it
    bound (a run resumed with `--allow-adapter-change` has several; `runs --json` lists
    them all)."""
    adapters = conditions.get("adapters") or []
    if not adapters:
        return {}
    return dict((adapters[-1].get("conditions") or {}).get("settings") or {})


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
