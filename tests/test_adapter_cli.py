"""`streameval adapter options|list|serve` as a user runs them: each `-A` key of an adapter with
its type, default and meaning (a built-in's, a module's in the current folder), the adapter
table in 80 columns, their --json, and a class that cannot be served as one of three lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streameval.adapters import chat_prompts
from streameval.adapters.registry import ADAPTERS, adapter_class, config_model
from tests.test_terminal_width import assert_fits, in_terminal, metric_row

USER_MODULE = """
from pydantic import BaseModel, Field

from streameval.adapters.sdk import Adapter
from streameval.protocol import AdapterConditions


class MyConfig(BaseModel):
    model_config = {"extra": "forbid"}
    endpoint: str = Field(description="where the model answers")
    max_frames: int = Field(8, ge=1, le=64, description="frames per call")
    mode: str | None = None


class MyAdapter(Adapter):
    name = "mine"
    conditions = AdapterConditions(state="non-native", initiation="query", model_name="m")
    Config = MyConfig

    def __init__(self, config: MyConfig) -> None:
        self.config = config


def make_adapter():
    return MyAdapter
"""


def streameval(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The installed `streameval` script, run from `cwd` with no PYTHONPATH, as a user does."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    script = Path(sys.executable).with_name("streameval")
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    (tmp_path / "my_adapter.py").write_text(USER_MODULE)
    return tmp_path


def options_json(name: str, cwd: Path | None = None) -> list[dict]:
    done = streameval("adapter", "options", name, "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --------------------------------------------------------------------------- options


def test_an_adapter_without_options_says_so():
    done = streameval("adapter", "options", "silent")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "adapter 'silent' takes no options\n",
        "",
    )
    assert options_json("silent") == []


def test_the_vllm_adapters_options_with_types_defaults_and_meanings():
    options = {option["key"]: option for option in options_json("vllm")}
    assert list(options) == [
        "model", "model_version", "qa_max_frames", "qa_frame_selection",
        "proactive_interval_s", "proactive_window_frames", "frames_during_call",
        "image_max_pixels", "input_mode", "video_server_kwargs", "frame_label", "video_label",
        "system_prompt", "qa_prompt", "open_qa_prompt", "proactive_prompt", "wait_word",
        "max_tokens_qa", "max_tokens_proactive", "temperature", "seed", "top_p", "top_k",
        "repetition_penalty", "stop", "mm_processor_kwargs", "max_retries", "retry_backoff_s",
        "proactive_window", "reanchor_frames", "audio", "audio_label",
        "tensor_parallel_size", "gpu_memory_utilization",
        "max_model_len", "dtype", "enable_prefix_caching", "trust_remote_code", "engine_args",
        "output_timeout_s", "health_interval_s",
    ]  # fmt: skip
    assert options["model"] == {
        "key": "model",
        "type": "str",
        "required": True,
        "default": None,
        "description": "the model as the backend names it, e.g. a Hugging Face id",
    }
    shown = {key: (o["type"], o["default"], o["required"]) for key, o in options.items()}
    assert shown["gpu_memory_utilization"] == ("float > 0, <= 1", 0.9, False)
    assert shown["max_model_len"] == ("int >= 1 or null", None, False)
    assert shown["qa_frame_selection"] == ("recent | uniform", "recent", False)
    assert shown["proactive_window"] == ("sliding | append", "sliding", False)
    assert shown["reanchor_frames"] == ("int >= 2", 16, False)
    assert shown["enable_prefix_caching"] == ("bool", True, False)
    assert shown["trust_remote_code"] == ("bool", False, False)
    assert shown["engine_args"] == ("mapping", {}, False)
    assert shown["wait_word"] == ("str length >= 1", "WAIT", False)
    assert shown["max_retries"] == ("int >= 0, <= 10", 2, False)
    assert shown["seed"] == ("int or null", 0, False)
    assert shown["qa_prompt"] == ("str", chat_prompts.QA_PROMPT, False)  # whole in --json


@pytest.mark.parametrize("name", [name for name in ADAPTERS if config_model(adapter_class(name))])
def test_every_option_of_a_built_in_adapter_has_a_meaning(name):
    assert [o["key"] for o in options_json(name) if not o["description"]] == []


def test_the_options_table_fits_80_columns_with_every_key_whole():
    lines = in_terminal("adapter", "options", "transformers")
    assert_fits(lines)
    assert lines[0].startswith("Options of transformers: -A KEY=VALUE, or KEY: VALUE in a")
    keys = [o["key"] for o in options_json("transformers")]
    assert [line for line in lines if line in keys] == keys  # each block headed by its key
    assert "  type int >= 4 · default 768" in lines
    assert "  type str · default required" in lines
    assert "  a local model directory (or a Hugging Face id)" in lines
    # A long text default is cut at a word; --json has it whole.
    assert '  type str · default "The images above are frames…' in lines


def test_the_vllm_options_table_wraps_between_words_in_80_columns():
    """The table fits only with the type and default columns wrapped too: no column may be
    narrowed below its longest word (rich alone would, and crop the line)."""
    lines = in_terminal("adapter", "options", "vllm")
    assert_fits(lines)
    assert lines[2].split() == ["option", "type", "default", "meaning"]
    assert metric_row("model", lines) == [
        "model", "str", "required", "the model as the backend names it, e.g. a Hugging Face id"
    ]  # fmt: skip
    assert metric_row("gpu_memory_utilization", lines) == [
        "gpu_memory_utilization", "float > 0, <= 1", "0.9",
        "share of each GPU's memory vLLM may take",
    ]  # fmt: skip
    assert metric_row("qa_frame_selection", lines) == [
        "qa_frame_selection", "recent | uniform", '"recent"',
        "the newest frames, or frames spread evenly over all received",
    ]  # fmt: skip


def test_listing_model_options_loads_no_model_stack():
    probe = (
        "import json, sys, streameval.cli\n"
        "for name in ('transformers', 'vllm'):\n"
        "    sys.argv = ['streameval', 'adapter', 'options', name, '--json']\n"
        "    try:\n        streameval.cli.main()\n"
        "    except SystemExit as exc:\n        assert not exc.code, exc.code\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'vllm'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_a_user_modules_options_from_the_current_folder(user_folder):
    assert options_json("my_adapter:MyAdapter", cwd=user_folder) == [
        {
            "key": "endpoint",
            "type": "str",
            "required": True,
            "default": None,
            "description": "where the model answers",
        },
        {
            "key": "max_frames",
            "type": "int >= 1, <= 64",
            "required": False,
            "default": 8,
            "description": "frames per call",
        },
        {"key": "mode", "type": "str or null", "required": False, "default": None,
         "description": ""},
    ]  # fmt: skip
    table = streameval("adapter", "options", "my_adapter:MyAdapter", cwd=user_folder)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert ["endpoint", "str", "required", "where", "the", "model", "answers"] in rows
    assert ["mode", "str", "or", "null", "null"] in rows


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("command", ["options", "serve"])
@pytest.mark.parametrize(
    ("target", "line"),
    [
        (
            "my_adapter:Nope",
            "error: adapter 'my_adapter:Nope': module my_adapter has no attribute Nope "
            "(its Adapter classes: MyAdapter)",
        ),
        (
            "my_adapter:make_adapter",
            "error: adapter 'my_adapter:make_adapter': make_adapter in module my_adapter is a "
            "function, not an Adapter subclass",
        ),
        (
            "my_adapter:MyConfig",
            "error: adapter 'my_adapter:MyConfig': MyConfig in module my_adapter is a class, "
            "not an Adapter subclass",
        ),
        (
            "their_adapter:MyAdapter",
            "error: adapter 'their_adapter:MyAdapter': no module 'their_adapter' on the Python "
            "path nor in the current folder ({folder}); run from the folder that holds "
            "their_adapter.py, or add that folder to PYTHONPATH",
        ),
    ],
)
def test_a_class_that_cannot_be_served_is_one_line_and_exit_2(command, target, line, user_folder):
    extra = ["--port", "0"] if command == "serve" else []
    done = streameval("adapter", command, target, *extra, cwd=user_folder)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [line.format(folder=user_folder)]


BROKEN_MODULE = """
from my_adapter import MyAdapter


class BrokenAdapter(MyAdapter):
    async def start(self) -> None:
        raise RuntimeError("no GPU here")
"""


def test_an_adapter_whose_start_fails_exits_1_after_saying_why(user_folder):
    """Listening came first (a Core may have seen it), so this is a failed service (1), not
    one that could not start (2)."""
    (user_folder / "broken_adapter.py").write_text(BROKEN_MODULE)
    done = streameval(
        "adapter", "serve", "broken_adapter:BrokenAdapter", "--port", "0", "-A", "endpoint=x",
        cwd=user_folder,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout.startswith("streameval-adapter listening on ws://127.0.0.1:")
    assert done.stderr.splitlines()[-1] == (
        "error: adapter mine failed to start: RuntimeError: no GPU here"
    )


# --------------------------------------------------------------------------- list


def test_the_adapter_table_fits_80_columns_and_cuts_no_word():
    lines = in_terminal("adapter", "list")
    assert_fits(lines)
    assert lines[0].split() == ["adapter", "kind", "what"]
    for name, built_in in ADAPTERS.items():
        # The row read with what its cells wrapped onto the lines below.
        assert metric_row(name, lines) == [name, built_in.kind, built_in.description]
    assert metric_row("openai", lines) == [
        "openai",
        "HTTP client",
        "A chat VideoLLM behind an OpenAI-compatible server (vLLM, SGLang, an API)",
    ]


def test_the_adapter_and_preset_lists_in_json():
    adapters = json.loads(streameval("adapter", "list", "--json").stdout)
    assert [a["name"] for a in adapters] == sorted(ADAPTERS)
    assert adapters[[a["name"] for a in adapters].index("reference")] == {
        "name": "reference",
        "target": "streameval.adapters.reference:ReferenceAdapter",
        "origin": "built-in",
        "kind": "no model",
        "description": "Answers the synthetic benchmark from pixels (and synthetic-av's sound) "
        "alone (the demo's adapter)",
    }
    presets = json.loads(streameval("adapter", "list", "--presets", "--json").stdout)
    by_name = {preset["preset"]: preset for preset in presets}
    assert set(by_name["livecc-7b"]) == {"preset", "adapters", "file"}
    assert by_name["livecc-7b"]["adapters"] == ["transformers"]
    assert by_name["qwen2.5-vl-7b"]["adapters"] == ["openai", "vllm"]
    assert Path(by_name["qwen2.5-vl-7b"]["file"]).name == "qwen2.5-vl-7b.yaml"


def test_serve_help_points_to_the_options():
    shown = streameval("adapter", "serve", "--help").stdout
    assert "streameval adapter options NAME" in " ".join(shown.split())
