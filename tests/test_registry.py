"""The adapter registry: built-in names, third-party entry points, typed configuration from a
YAML file (or packaged preset) plus `-A key=value` overrides, and one-line errors."""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from streameval.adapters.config import AdapterConfigError, load_config, preset_names
from streameval.adapters.openai_adapter import OpenAIAdapterConfig
from streameval.adapters.registry import (
    AdapterEntry,
    AdapterLoadError,
    UnknownAdapter,
    available_adapters,
    build_adapter,
    load_adapter,
    preset_adapters,
)
from streameval.adapters.transformers_adapter import TransformersAdapterConfig
from streameval.adapters.vllm_engine import VLLMEngineConfig
from streameval.core.launch.adapter_process import AdapterProcess, AdapterProcessError

REPO = Path(__file__).resolve().parent.parent

PLUGIN = """
from pydantic import Field

from streameval.adapters.config import AdapterConfig
from streameval.protocol import AdapterConditions
from streameval.adapters.sdk import Adapter


class EchoConfig(AdapterConfig):
    model: str
    greeting: str = "hello"
    times: int = Field(1, ge=1)
    tags: list[str] = []


class EchoAdapter(Adapter):
    name = "echo"
    Config = EchoConfig

    def __init__(self, config: EchoConfig) -> None:
        self.config = config
        self.conditions = AdapterConditions(
            state="non-native",
            initiation="query",
            model_name=config.model,
            history=f"{config.greeting} x{config.times!r} {config.tags}",
        )
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed distribution `echo-plugin` declaring two `streameval.adapters` entry
    points: a new name, and one that tries to take over a built-in name."""
    root = tmp_path / "site"
    (root / "echo_plugin").mkdir(parents=True)
    (root / "echo_plugin" / "__init__.py").write_text(PLUGIN)
    info = root / "echo_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: echo-plugin\nVersion: 1.0\nSummary: Echoes the stream\n"
    )
    (info / "entry_points.txt").write_text(
        "[streameval.adapters]\n"
        "echo = echo_plugin:EchoAdapter\n"
        "reference = echo_plugin:EchoAdapter\n"
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", f"{root}:{REPO}")  # for child processes
    return root


def streameval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streameval.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


# --------------------------------------------------------------------------- discovery


def test_entry_points_are_discovered_and_cannot_take_built_in_names(plugin):
    adapters = available_adapters()
    assert adapters["echo"] == AdapterEntry(
        "echo",
        "echo_plugin:EchoAdapter",
        "echo-plugin",
        "plugin (echo-plugin)",
        "Echoes the stream",
    )
    assert adapters["reference"].origin == "built-in"
    assert adapters["openai"] == AdapterEntry(
        "openai",
        "streameval.adapters.openai_adapter:OpenAIAdapter",
        "built-in",
        "HTTP client",
        "A chat VideoLLM behind an OpenAI-compatible server (vLLM, SGLang, an API)",
    )
    adapter = load_adapter("echo", {"model": "m", "times": 2})
    assert type(adapter).__module__ == "echo_plugin" and adapter.config.times == 2

    listed = streameval("adapter", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [entry["name"] for entry in entries] == sorted(adapters)
    assert {
        "name": "echo",
        "target": "echo_plugin:EchoAdapter",
        "origin": "echo-plugin",
        "kind": "plugin (echo-plugin)",
        "description": "Echoes the stream",
    } in entries
    table = [line.split() for line in streameval("adapter", "list").stdout.splitlines()]
    assert ["echo", "plugin", "(echo-plugin)", "Echoes", "the", "stream"] in table


def test_a_plugin_is_served_with_its_config_file_and_overrides(plugin, tmp_path):
    config = tmp_path / "echo.yaml"
    config.write_text("model: echo-model\ngreeting: hi\ntimes: 1\n")
    options = {"times": 3, "tags": ["a", "b"]}
    with AdapterProcess("echo", config=config, options=options) as process:
        info = httpx.get(f"http://{process.host}:{process.port}/info").json()
    assert info["adapter"] == "echo"
    assert info["conditions"]["model_name"] == "echo-model"  # from the file
    # The overrides win over the file and arrive typed: an int and a list.
    assert info["conditions"]["history"] == "hi x3 ['a', 'b']"


def test_listing_adapters_imports_no_adapter_module():
    probe = (
        "import sys; from streameval.adapters.registry import available_adapters; "
        "available_adapters(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers', 'vllm', 'httpx') or m.startswith('streameval.adapters.openai')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.strip() == "[]", done.stderr


# --------------------------------------------------------------------------- configuration


def test_file_then_overrides_typed_by_the_adapters_options(tmp_path):
    config = tmp_path / "model.yaml"
    config.write_text(
        "model: from-file\nmax_retries: 1\nextra_body:\n  min_p: 0.1\nimage_max_pixels: 1000\n"
    )
    loaded = load_config(
        "openai",
        OpenAIAdapterConfig,
        config,
        [
            "max_retries=3",
            "qa_max_frames=8",
            "temperature=0.5",
            "model_version=2.10",
            "extra_body.top_k=5",
            "image_max_pixels=null",
            "mm_processor_kwargs={max_dynamic_patch: 1}",
            "system_prompt=Watch closely: answer = letter",
        ],
    )
    assert loaded.model == "from-file"
    assert (loaded.max_retries, loaded.qa_max_frames, loaded.temperature) == (3, 8, 0.5)
    assert loaded.model_version == "2.10"  # a text option keeps the characters typed
    assert loaded.extra_body == {"min_p": 0.1, "top_k": 5}  # merged key by key
    assert loaded.image_max_pixels is None
    assert loaded.mm_processor_kwargs == {"max_dynamic_patch": 1}
    assert loaded.system_prompt == "Watch closely: answer = letter"


@pytest.mark.parametrize(
    ("file_text", "overrides", "message"),
    [
        (None, [], "openai config: model: required (give it in --config or with -A model=...)"),
        (
            None,
            ["model=m", "qa_max_frames=many"],
            "openai config: qa_max_frames: Input should be a valid integer, unable to parse "
            "string as an integer (got 'many')",
        ),
        (
            None,
            ["model=m", "frames_during_call=keep"],
            "openai config: frames_during_call: Input should be 'buffer' or 'drop' (got 'keep')",
        ),
        (
            None,
            ["model=m", "qa_prompt=Say {answer}"],
            "openai config: qa_prompt: unknown placeholder {answer}; qa_prompt may use "
            "{options}, {question}, {t} (got 'Say {answer}')",
        ),
        (None, ["model"], "-A 'model': expected key=value"),
        (
            None,
            ["extra_body=1", "extra_body.top_k=2"],
            "-A extra_body.top_k: extra_body was already given a plain value",
        ),
        ("model: m\nqa_frames: 8\n", [], "openai config: unknown option 'qa_frames' (options: "),
        ("model: m\n  bad: [\n", [], "config {path} line 2: not valid YAML"),
        ("- model\n", [], "config {path}: must be a mapping of option: value"),
    ],
)
def test_bad_configuration_is_one_clear_line(file_text, overrides, message, tmp_path):
    path = tmp_path / "c.yaml"
    if file_text is not None:
        path.write_text(file_text)
    with pytest.raises(AdapterConfigError) as caught:
        build_adapter("openai", path if file_text is not None else None, overrides)
    assert str(caught.value).startswith(message.replace("{path}", str(path)))
    assert "\n" not in str(caught.value)


def test_missing_configs_unknown_names_and_missing_extras(tmp_path):
    with pytest.raises(AdapterConfigError) as caught:
        build_adapter("openai", tmp_path / "missing.yaml")
    assert str(caught.value) == (
        f"no config file '{tmp_path / 'missing.yaml'}' and no preset of that name "
        f"(presets: {', '.join(preset_names())})"
    )
    with pytest.raises(AdapterConfigError, match="^adapter 'silent' takes no options$"):
        build_adapter("silent", None, ["x=1"])
    with pytest.raises(UnknownAdapter) as unknown:
        load_adapter("nobody")
    assert str(unknown.value).startswith("unknown adapter 'nobody'; known: always, openai, ")
    with pytest.raises(AdapterLoadError) as not_adapter:
        load_adapter("json:JSONDecoder")
    assert str(not_adapter.value) == (
        "adapter 'json:JSONDecoder': JSONDecoder in module json is a class, not an Adapter subclass"
    )
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(AdapterLoadError) as missing:
            load_adapter("vllm", {"model": "m"})
        assert str(missing.value) == (
            "adapter 'vllm' needs the module 'vllm', which is not installed "
            "(pip install 'streameval[vllm]')"
        )


def test_serving_with_a_bad_option_fails_fast_with_the_line():
    with pytest.raises(AdapterProcessError) as caught:
        AdapterProcess("openai", options={"model": "m", "max_retries": 99}).start()
    assert str(caught.value) == (
        "adapter 'openai' did not start: error: openai config: max_retries: Input should be "
        "less than or equal to 10 (got 99)"
    )
    done = streameval(
        "adapter", "serve", "openai", "--port", "0", "-A", "model=m", "-A", "qa_max_frames=0"
    )
    assert done.returncode != 0
    assert done.stderr.splitlines() == [
        "error: openai config: qa_max_frames: Input should be greater than or equal to 1 (got 0)"
    ]


def test_sigterm_stops_a_served_adapter_cleanly():
    """`docker stop` and schedulers send SIGTERM; the service ends with status 0 at once
    (as a container's PID 1 it would otherwise wait for SIGKILL)."""
    with AdapterProcess("always") as adapter:
        assert adapter.process is not None
        adapter.process.send_signal(signal.SIGTERM)
        assert adapter.process.wait(timeout=5) == 0


# --------------------------------------------------------------------------- presets


# A preset configures either both chat backends or the native transformers adapter.
CHAT_PRESETS = [p for p in preset_names() if preset_adapters(p) == ["openai", "vllm"]]
NATIVE_PRESETS = [p for p in preset_names() if preset_adapters(p) == ["transformers"]]
VIDEOLLM_ONLINE_PRESETS = [p for p in preset_names() if preset_adapters(p) == ["videollm-online"]]


def test_every_preset_configures_the_chat_backends_or_one_native_adapter():
    assert sorted(CHAT_PRESETS + NATIVE_PRESETS + VIDEOLLM_ONLINE_PRESETS) == preset_names()
    assert NATIVE_PRESETS == ["livecc-7b", "qwen2.5-omni-7b"]
    assert VIDEOLLM_ONLINE_PRESETS == ["videollm-online-8b"]


@pytest.mark.parametrize("preset", CHAT_PRESETS)
def test_every_chat_preset_configures_both_chat_backends_and_is_documented(preset):
    openai = load_config("openai", OpenAIAdapterConfig, preset, ["base_url=http://h:1/v1"])
    engine = load_config("vllm", VLLMEngineConfig, preset)
    assert openai.model == engine.model and "/" in openai.model
    docs = (REPO / "docs" / "models.md").read_text()
    assert f"`{preset}`" in docs and openai.model in docs


@pytest.mark.parametrize("preset", NATIVE_PRESETS)
def test_every_native_preset_is_documented(preset):
    config = load_config("transformers", TransformersAdapterConfig, preset)
    docs = (REPO / "docs" / "models.md").read_text()
    assert f"`{preset}`" in docs and config.model in docs


def test_the_presets_cover_the_common_backbones():
    models = {load_config("p", OpenAIAdapterConfig, p).model for p in CHAT_PRESETS}
    for family in ("Qwen2-VL", "Qwen2.5-VL", "Qwen3-VL", "InternVL3_5", "MiniCPM-V", "onevision"):
        assert any(family in model for model in models), family
    listed = json.loads(streameval("adapter", "list", "--presets", "--json").stdout)
    assert [row["preset"] for row in listed] == preset_names()
    adapters = {row["preset"]: row["adapters"] for row in listed}
    assert adapters["livecc-7b"] == ["transformers"]
    assert adapters["qwen2.5-vl-7b"] == ["openai", "vllm"]
    assert adapters["videollm-online-8b"] == ["videollm-online"]


def test_every_option_of_the_model_adapters_is_documented():
    table = (REPO / "docs" / "models.md").read_text()
    first_cells = re.findall(r"^\| ([^|]+) \|", table, re.M)
    documented = {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}
    options = set(OpenAIAdapterConfig.model_fields) | set(VLLMEngineConfig.model_fields)
    options |= set(TransformersAdapterConfig.model_fields)
    assert options <= documented, sorted(options - documented)
