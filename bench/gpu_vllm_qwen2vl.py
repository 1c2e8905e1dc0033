"""vLLM on a GPU, end to end, with a tiny random Qwen2-VL (no download): `vllm serve` + the
`openai` adapter, then the in-process `vllm` adapter, each through a small synthetic run.

    python bench/gpu_vllm_qwen2vl.py                # print the markdown table
    python bench/gpu_vllm_qwen2vl.py --write        # and put it into BENCHMARKS.md

Needs a CUDA GPU with `pip install 'streameval[vllm]'` (vLLM brings torchvision, which the
Qwen2-VL processor needs); never run by the test suite. Measured per backend: load time
(process start -> the server's health check answers 200: `/health` of `vllm serve`, the
adapter's `/healthz`), TTFT p50 as the Core measures it (question sent -> first token), the
run's wall time and the sessions that finished. The tiny model (hidden size 32, head size 8)
answers noise; it measures the plumbing, not accuracy. A head size of 8 may not be supported
by every attention backend: pass `--attention-backend` (e.g. TRITON_ATTN or FLEX_ATTENTION)
if the default refuses it. It goes to `vllm serve --attention-backend` and to the in-process
adapter as the engine argument `attention_backend` (`-A engine_args=...`): current vLLM
reads only those (`AttentionConfig.backend`, vllm/config/attention.py, wired in
vllm/engine/arg_utils.py); the VLLM_ATTENTION_BACKEND environment variable it once read is
ignored (vllm-project/vllm issue 50292).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from streameval.core.launch.adapter_process import adapter_command  # noqa: E402

SECTION = "vLLM on a GPU: tiny Qwen2-VL through `vllm serve` and in process"
SERVED_NAME = "tiny-qwen2-vl"


def build_model(directory: Path) -> Path:
    """The tiny Qwen2-VL as vLLM loads a checkpoint: config.json (architectures), safetensors
    weights, tokenizer files with a chat template, preprocessor_config.json, and the
    template again as chat_template.json (where processors look for it)."""
    from tests.tiny_qwen2vl import build_tiny_model, with_chat_template

    model = with_chat_template(build_tiny_model(directory))
    architectures = json.loads((model / "config.json").read_text()).get("architectures")
    if architectures != ["Qwen2VLForConditionalGeneration"]:
        raise SystemExit(f"unexpected architectures in config.json: {architectures}")
    return model


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout_s: float) -> float:
    """Seconds until `url` answers 200; exits if the process dies or time runs out."""
    import httpx

    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if process.poll() is not None:
            raise SystemExit(f"{process.args[0]} exited with {process.returncode} while loading")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return time.perf_counter() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} not healthy within {timeout_s:g}s")


def run_core(adapter_url: str, store_url: str, cache: Path, args) -> tuple[dict, float]:
    command = [
        sys.executable,
        "-m",
        "streameval.cli",
        "run",
        "--benchmark",
        "synthetic",
        "--limit",
        str(args.sessions),
        "--adapter-url",
        adapter_url,
        "--concurrency",
        str(args.concurrency),
        "--store",
        store_url,
        "--cache-dir",
        str(cache),
        "--adapter-ready-timeout",
        str(args.load_timeout),
        "--json",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if not done.stdout.strip():
        raise SystemExit(f"core failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout), wall


def ttft_p50_ms(store_url: str, run_id: str) -> float | None:
    from streameval.core.store.store import Store
    from streameval.events import EventKind

    asked: dict[str, int] = {}
    ttft: list[float] = []
    with Store(store_url) as store:
        for event in store.iter_events(run_id):
            if event.kind == EventKind.QUESTION_SENT:
                asked[event.session_id] = event.runtime_ns
            elif event.kind == EventKind.RESPONSE_START and event.session_id in asked:
                ttft.append((event.runtime_ns - asked.pop(event.session_id)) / 1e6)
    return sorted(ttft)[len(ttft) // 2] if ttft else None


def measure(name: str, server: list[str], health: str, adapter_url: str, work: Path, args):
    """Start `server`, time its load, run the Core through `adapter_url`, stop it."""
    log = open(work / f"{name}.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(server, stdout=log, stderr=subprocess.STDOUT)
    try:
        load_s = wait_healthy(health, process, args.load_timeout)
        store_url = f"sqlite:///{work / f'{name}.db'}"
        summary, wall = run_core(adapter_url, store_url, work / "cache", args)
        ttft = ttft_p50_ms(store_url, summary["run_id"])
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
    return {
        "backend": name,
        "load_s": load_s,
        "ttft_p50_ms": ttft,
        "wall_s": wall,
        "ok": f"{summary['finished']}/{summary['sessions']}",
    }


def engine_flags(args) -> dict:
    return {
        "max_model_len": 4096,
        "gpu_memory_utilization": args.gpu_memory_utilization,
    }


# The chat adapters' default qa_max_frames (>= proactive_window_frames).
IMAGES = 16


def serve_command(model: Path, port: int, flags: dict, attention_backend: str | None):
    """`vllm serve` of the tiny model; the attention backend as its `--attention-backend`."""
    command = [
        "vllm",
        "serve",
        str(model),
        "--port",
        str(port),
        "--served-model-name",
        SERVED_NAME,
        "--max-model-len",
        str(flags["max_model_len"]),
        "--gpu-memory-utilization",
        str(flags["gpu_memory_utilization"]),
        "--enable-prefix-caching",
        "--limit-mm-per-prompt",
        json.dumps({"image": IMAGES, "video": 1}),
        "--trust-remote-code",
    ]
    return command + (["--attention-backend", attention_backend] if attention_backend else [])


def in_process_command(model: Path, port: int, flags: dict, attention_backend: str | None):
    """The `vllm` adapter serving the tiny model; the attention backend as the engine
    argument `attention_backend`."""
    options = [
        f"model={model}",
        f"max_model_len={flags['max_model_len']}",
        f"gpu_memory_utilization={flags['gpu_memory_utilization']}",
    ]
    if attention_backend:
        options.append(f"engine_args={json.dumps({'attention_backend': attention_backend})}")
    return adapter_command("vllm", "127.0.0.1", port, None, options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8, help="synthetic records to run")
    parser.add_argument("--concurrency", type=int, default=4, help="sessions in flight")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument("--load-timeout", type=float, default=900.0, help="seconds per load")
    parser.add_argument(
        "--attention-backend", help="vLLM's attention backend for both engines (e.g. TRITON_ATTN)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, dbs)")
    parser.add_argument("--write", action="store_true", help="put the table into BENCHMARKS.md")
    args = parser.parse_args()
    if shutil.which("vllm") is None:
        raise SystemExit("the `vllm` command is not installed: pip install 'streameval[vllm]'")

    work = Path(tempfile.mkdtemp(prefix="gpu-vllm-"))
    model = build_model(work / SERVED_NAME)
    flags = engine_flags(args)

    port = free_port()
    serve = serve_command(model, port, flags, args.attention_backend)
    adapter_port = free_port()
    openai_adapter = adapter_command(
        "openai",
        "127.0.0.1",
        adapter_port,
        None,
        [f"base_url=http://127.0.0.1:{port}/v1", f"model={SERVED_NAME}"],
    )
    rows = []
    # vllm serve first (its own /health), with the openai adapter in front of it.
    adapter = subprocess.Popen(openai_adapter, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rows.append(
            measure(
                "vllm serve + openai",
                serve,
                f"http://127.0.0.1:{port}/health",
                f"ws://127.0.0.1:{adapter_port}/ws",
                work,
                args,
            )
        )
    finally:
        adapter.terminate()
        adapter.wait(timeout=30)

    in_process_port = free_port()
    in_process = in_process_command(model, in_process_port, flags, args.attention_backend)
    rows.append(
        measure(
            "in-process vllm",
            in_process,
            f"http://127.0.0.1:{in_process_port}/healthz",
            f"ws://127.0.0.1:{in_process_port}/ws",
            work,
            args,
        )
    )

    body = table(rows, args)
    print(body)
    if args.write:
        from bench.report import update_section

        update_section(SECTION, body)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work folder: {work}", file=sys.stderr)


def table(rows: list[dict], args) -> str:
    try:
        import torch

        gpu = torch.cuda.get_device_name(0)
    except Exception:  # no torch or no GPU: the table says so
        gpu = "unknown GPU"
    try:
        import vllm

        version = vllm.__version__
    except Exception:
        version = "?"
    lines = [
        f"{date.today()}, {gpu}, vLLM {version}, Python {platform.python_version()}; "
        f"{args.sessions} synthetic sessions, {args.concurrency} in flight, logical pacing, "
        f"attention backend {args.attention_backend or 'chosen by vLLM'}; "
        "a tiny random Qwen2-VL (plumbing, not accuracy):",
        "",
        "| backend | load (s) | TTFT p50 (ms) | run wall (s) | sessions ok |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        ttft = "-" if row["ttft_p50_ms"] is None else f"{row['ttft_p50_ms']:.1f}"
        lines.append(
            f"| {row['backend']} | {row['load_s']:.1f} | {ttft} | {row['wall_s']:.1f} | "
            f"{row['ok']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
