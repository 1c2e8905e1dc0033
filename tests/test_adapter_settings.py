"""An adapter's options are part of what a run records (issue 34, item 3): the SDK puts the
resolved `Config` in every hello's `conditions.settings` (flattened, secrets redacted, long
texts digested, serving options left out), `runs`, `compare` and the export show it, and a
resume with another option is refused.

The runs are real: `python -m streameval.adapters reference -A work_width=...` processes
speaking the WebSocket protocol to `streameval run` over the synthetic benchmark, stored in
a SQLite file. Narrowed to 24 pixels, the reference policy no longer reads the digits and
colours it answers from: one option, other scores.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import Field, SecretStr

from streameval.adapters.config import AdapterConfig
from streameval.adapters.registry import build_adapter, load_adapter
from streameval.adapters.sdk import Adapter
from streameval.adapters.settings import (
    LONG_VALUE_CHARS,
    NOT_IDENTITY,
    RECORDED_IF_CHANGED,
    REDACTED,
    config_settings,
    is_secret_name,
)
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.adapter_identity import identity_differences
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.protocol import MAX_HELLO_BYTES, AdapterConditions
from tests.faults import without_progress
from tests.test_cli import streameval

WIDE, NARROW = 160, 24
LIMIT = 6  # the synthetic benchmark's first six records: QA on digits, colours and counts


def run_reference(work_width: int, store: str, cache: Path) -> str:
    """One finished run of the reference adapter served with `-A work_width=...`."""
    with AdapterProcess("reference", options={"work_width": work_width}) as adapter:
        ran = streameval(
            "run", "--adapter-url", adapter.url, "--benchmark", "synthetic",
            "--limit", str(LIMIT), "--cache-dir", str(cache), "--store", store, "--json",
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert (summary["finished"], summary["failed"]) == (LIMIT, 0)
    return summary["run_id"]


def store_two_runs(root: Path) -> tuple[str, str, str]:
    """(store URL, run at work_width 160, run at work_width 24): one store, one cache."""
    store = f"sqlite:///{root / 's.db'}"
    wide = run_reference(WIDE, store, root / "cache")
    narrow = run_reference(NARROW, store, root / "cache")
    return store, wide, narrow


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    return store_two_runs(tmp_path_factory.mktemp("settings"))


# ------------------------------------------------------------------ runs, compare, export


def test_runs_shows_the_option_the_two_runs_differ_in(two_runs) -> None:
    store, wide, narrow = two_runs
    listed = streameval("runs", "--json", "--store", store)
    assert listed.returncode == 0, listed.stderr
    rows = {row["run_id"]: row for row in json.loads(listed.stdout)}
    assert rows[wide]["settings"] == {"work_width": WIDE}
    assert rows[narrow]["settings"] == {"work_width": NARROW}
    assert [i["conditions"]["settings"] for i in rows[narrow]["adapter_identities"]] == [
        {"work_width": NARROW}
    ]

    table = streameval("runs", "--store", store, env={**os.environ, "COLUMNS": "220"})
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(line for line in lines if line.startswith("run "))
    assert header.split() == [
        "run", "created", "status", "benchmark", "profile", "pacing", "adapters", "settings",
        "perturbations",
    ]  # fmt: skip
    for run_id, width in ((wide, WIDE), (narrow, NARROW)):
        row = next(line for line in lines if line.startswith(run_id))
        assert f"work_width={width}" in row.split(), row


def test_compare_lists_the_differing_setting_before_the_metrics(two_runs) -> None:
    store, wide, narrow = two_runs
    compared = streameval("compare", wide, narrow, "--json", "--store", store)
    assert compared.returncode == 0, compared.stderr
    comparison = json.loads(compared.stdout)
    assert comparison["differing_settings"] == [{"key": "work_width", "a": WIDE, "b": NARROW}]
    assert (comparison["settings_a"], comparison["settings_b"]) == (
        {"work_width": WIDE},
        {"work_width": NARROW},
    )
    keys = list(comparison)
    assert keys.index("differing_settings") < keys.index("overall")
    # The option explains the scores: at 24 pixels one answer in six is still right.
    accuracy = comparison["overall"]["qa"]["accuracy"]
    assert (accuracy["a"], accuracy["b"]) == (1.0, pytest.approx(1 / 6))

    shown = streameval("compare", wide, narrow, "--store", store)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"adapter settings that differ (A = run {wide}, B = run {narrow})"
    assert lines[3].split() == ["work_width", str(WIDE), str(NARROW)]
    assert lines.index(lines[3]) < next(i for i, x in enumerate(lines) if x.startswith("accuracy"))

    same = streameval("compare", wide, wide, "--store", store)
    assert same.stdout.splitlines()[0] == f"adapter settings of both: work_width={WIDE}"


def test_a_paper_table_labels_each_run_with_the_setting_it_differs_in(two_runs) -> None:
    store, wide, narrow = two_runs
    shown = streameval("table", wide, narrow, "--format", "json", "--store", store)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["rows"]
    model = "reference (reference-pixel-policy)"
    assert [(row["run_id"], row["label"]) for row in rows] == [
        (wide, f"{model} work_width={WIDE}"),
        (narrow, f"{model} work_width={NARROW}"),
    ]
    alone = streameval("table", wide, "--format", "json", "--store", store)
    assert json.loads(alone.stdout)["rows"][0]["label"] == model


def test_the_export_carries_the_settings_with_every_session(two_runs, tmp_path) -> None:
    store, _wide, narrow = two_runs
    out = tmp_path / "narrow.jsonl"
    exported = streameval("export", narrow, "-o", str(out), "--store", store)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    sessions = {line["session_id"] for line in lines if line["type"] == "session"}
    hellos = [
        line
        for line in lines
        if line["type"] == "event" and line["kind"] == EventKind.ADAPTER_HELLO.value
    ]
    assert len(sessions) == LIMIT
    assert {hello["session_id"] for hello in hellos} == sessions
    assert [h["payload"]["conditions"]["settings"] for h in hellos] == [
        {"work_width": NARROW}
    ] * LIMIT
    (run,) = [line for line in lines if line["type"] == "run"]
    assert [a["conditions"]["settings"] for a in run["conditions"]["adapters"]] == [
        {"work_width": NARROW}
    ]


# ------------------------------------------------------------------ resume


def test_resume_with_another_option_is_refused_in_one_line(tmp_path) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    cache = tmp_path / "cache"
    with AdapterProcess("reference", options={"work_width": WIDE}) as wide, Store(store) as opened:
        config = RunConfig(
            benchmark="synthetic",
            limit=LIMIT,
            endpoints=[EndpointConfig(url=wide.url)],
            cache_dir=str(cache),
        )
        # A run bound to the adapter at work_width 160 whose sessions never ran.
        run_id = asyncio.run(RunExecutor(config, opened).prepare())

    resume = ["run", "--resume", run_id, "--cache-dir", str(cache), "--store", store]
    with AdapterProcess("reference", options={"work_width": NARROW}) as narrow:
        refused = streameval(*resume, "--adapter-url", narrow.url)
    assert refused.returncode == 2, refused.stderr
    assert without_progress(refused.stderr) == [
        f"error: run {run_id} used adapter reference 1 (reference-pixel-policy 1) but "
        f"{narrow.url} serves reference 1 (reference-pixel-policy 1) "
        f"(conditions.settings.work_width {WIDE} -> {NARROW}); pass --allow-adapter-change "
        "to resume with a different adapter on purpose"
    ]
    with Store(store) as opened:  # nothing was touched
        assert {s.status for s in opened.sessions(run_id)} == {"pending"}
        assert opened.count_events(run_id) == 0

    with AdapterProcess("reference", options={"work_width": WIDE}) as same:
        resumed = streameval(*resume, "--adapter-url", same.url, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["finished"] == LIMIT


def test_a_refusal_names_each_setting_and_stays_one_line() -> None:
    """A run made before options were recorded, resumed by an adapter that records eight:
    six are named (a long one cut short), the rest counted."""
    old = {"adapter": "openai", "adapter_version": "1", "conditions": {"model_name": "m"}}
    settings = {f"s{i}": i for i in range(7)} | {"system_prompt": "y" * 100}
    new = {**old, "conditions": {"model_name": "m", "settings": settings}}
    changes = identity_differences(old, new)
    assert changes == [f"conditions.settings.s{i} (absent) -> {i}" for i in range(6)] + [
        "and 2 more"
    ]
    shorter = {**settings, "system_prompt": "z"}
    prompt = identity_differences(
        new, {**old, "conditions": {"model_name": "m", "settings": shorter}}
    )
    assert prompt == [f'conditions.settings.system_prompt "{"y" * 58}… -> "z"']


# ------------------------------------------------------------------ what the SDK records


class Nested(AdapterConfig):
    top_k: int = 5
    access_token: str = "tok-123"


class Options(AdapterConfig):
    model: str = "m"
    mode: Literal["fast", "slow"] = "fast"
    ratio: float = 0.5
    on: bool = True
    limit: int | None = None
    stop_words: list[str] = Field(default_factory=lambda: ["END", "Stop"])
    extra_body: dict[str, Any] = Field(default_factory=lambda: {"top_k": 1, "nested": {"x": 2}})
    empty: dict[str, Any] = Field(default_factory=dict)
    sampling: Nested = Field(default_factory=Nested)
    key: SecretStr = SecretStr("sk-secret")
    api_key: str = "sk-plain"
    hf_token: str | None = None
    max_tokens: int = 32
    system_prompt: str = ""
    base_url: str = Field("http://127.0.0.1:8000/v1", json_schema_extra=NOT_IDENTITY)
    timeout_s: float = Field(30.0, json_schema_extra=NOT_IDENTITY)


class OptionsAdapter(Adapter):
    name = "options"
    version = "1"
    Config = Options
    conditions = AdapterConditions(
        state="non-native",
        initiation="polled",
        model_name="m",
        settings={"mode": "declared", "resolved_cache": 4096},
    )

    def __init__(self, config: Options) -> None:
        self.config = config


def test_every_option_is_flattened_with_secrets_redacted_and_serving_left_out() -> None:
    assert config_settings(Options(system_prompt="Be brief.")) == {
        "model": "m",
        "mode": "fast",
        "ratio": 0.5,
        "on": True,
        "limit": "null",
        "stop_words": '["END", "Stop"]',
        "extra_body.top_k": 1,
        "extra_body.nested.x": 2,
        "empty": "{}",
        "sampling.top_k": 5,
        "sampling.access_token": REDACTED,
        "key": REDACTED,
        "api_key": REDACTED,
        "hf_token": "null",  # no secret to hide
        "max_tokens": 32,
        "system_prompt": "Be brief.",
    }
    assert [is_secret_name(k) for k in ("max_tokens", "visual_tokens", "hf_token", "apikey")] == [
        False,
        False,
        True,
        True,
    ]


class Grown(Options):
    """Options of a later adapter version: two options added, their defaults the old
    behaviour."""

    layout: Literal["old", "new"] = Field("old", json_schema_extra=RECORDED_IF_CHANGED)
    tags: dict[str, Any] = Field(default_factory=dict, json_schema_extra=RECORDED_IF_CHANGED)


def test_an_added_option_at_its_default_keeps_the_older_identity() -> None:
    assert config_settings(Grown()) == config_settings(Options())
    grown = config_settings(Grown(layout="new", tags={"a": 1}))
    assert {k: v for k, v in grown.items() if k not in config_settings(Options())} == {
        "layout": "new",
        "tags.a": 1,
    }


def test_a_long_text_is_recorded_as_its_digest_and_length() -> None:
    prompt = "Watch the stream. " * 100  # 1800 characters
    settings = config_settings(Options(system_prompt=prompt))
    assert settings["system_prompt"] == "sha256:9c52f154b1fef861 (1800 chars)"
    # One character changed, another digest: the runs still differ in this setting.
    changed = config_settings(Options(system_prompt=prompt[:-1] + "?"))["system_prompt"]
    assert changed.endswith(" (1800 chars)") and changed != settings["system_prompt"]
    exactly = config_settings(Options(system_prompt="x" * LONG_VALUE_CHARS))
    assert exactly["system_prompt"] == "x" * LONG_VALUE_CHARS


def test_served_adapters_declare_their_options_and_their_own_settings_win() -> None:
    adapter = load_adapter(f"{__name__}:OptionsAdapter", {"ratio": 0.25, "key": "other"})
    settings = adapter.conditions.settings
    assert (settings["mode"], settings["resolved_cache"]) == ("declared", 4096)
    assert (settings["ratio"], settings["key"]) == (0.25, REDACTED)
    assert "base_url" not in settings and "timeout_s" not in settings
    assert adapter.info()["conditions"]["settings"] == settings
    # The class's declared conditions are not changed for other instances.
    assert OptionsAdapter.conditions.settings == {"mode": "declared", "resolved_cache": 4096}

    # A preset and -A overrides are applied before the options are recorded.
    openai = build_adapter("openai", "qwen2.5-vl-7b", ["temperature=0.7", "base_url=http://x/v1"])
    declared = openai.conditions.settings
    assert (declared["model"], declared["temperature"]) == ("Qwen/Qwen2.5-VL-7B-Instruct", 0.7)
    assert not {"base_url", "api_key_env", "read_timeout_s", "max_retries"} & declared.keys()
    assert len(openai.conditions.model_dump_json()) < MAX_HELLO_BYTES // 8
