"""The `transformers` adapter on a GPU: a 30-minute stream through a full-size VideoLLM.

    python bench/gpu_transformers_check.py                  # --size full on CUDA, else tiny
    python bench/gpu_transformers_check.py --size tiny      # the CPU path (the suite runs it)
    python bench/gpu_transformers_check.py --write          # the table into BENCHMARKS.md
    python bench/gpu_transformers_check.py --seconds 600    # a shorter stream

`--size full` builds Qwen2.5-VL-7B-Instruct's published architecture (QWEN25_VL_7B below)
with random weights, in bfloat16, directly on the GPU (the adapter's `random_weights`
option: no checkpoint, no download; only torch and transformers are needed), and streams a
30-minute synthetic video at 1 fps to it. `--size tiny` is the same check with the tiny
Qwen2.5-VL of tests/tiny_qwen2vl.py on the CPU and a 40-second video. Either way the adapter
is served as its own process, and the real Core (in this process, logical pacing, `trace`
profile, a SQLite store) runs one proactive record over the whole video (a decision at every
frame) and a few questions, each its own session, one session at a time. The context is
small enough that every session passes through it many times (`evict-oldest`).

Measured (the model's weights are random, so the answers are noise: this is speed and
memory, not accuracy):

- per-frame time: the `state_commit` intervals of frame blocks as the adapter reports them
  (from the frame's arrival in the hook to its tokens in the cache: JPEG decode, image
  processor, vision encoder and the forward pass), p50 and p95; a decision's `model_call`;
- TTFT as the Core measures it: question sent -> first token received;
- KV-cache memory over the proactive session: the adapter's `GET /info` (`memory`: the
  live caches' tokens and key/value bytes, read off the tensors, and the device's allocated
  bytes) polled every half second (tiny: every 50 ms); the largest values in the first and
  the last quarter of the session's frames show whether it stays flat once the cache is full;
- harness wait: per session, the time from its first frame sent to its end (the Core's
  clock; the video's decode before it is left out) not covered by any of the adapter's
  workload intervals (`state_commit`, `model_call`, `evict`; the same host's monotonic
  clock), summed over sessions, over their summed wall time: the share of the time the
  model sat idle waiting for the harness (the Core's sends, the WebSocket hops, the
  adapter's own event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ["HF_HUB_OFFLINE"] = "1"

from bench.bench_long_stream import execute, stream_config  # noqa: E402
from bench.make_video import cached_video  # noqa: E402
from bench.report import update_subsection  # noqa: E402
from streameval.core.benchmark.records import (  # noqa: E402
    Benchmark,
    ProactiveRecord,
    QARecord,
    Trigger,
)
from streameval.core.launch.adapter_process import AdapterProcess  # noqa: E402
from streameval.core.run.runner import RunExecutor  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import EventKind  # noqa: E402
from tests.recording import Sampler  # noqa: E402

OUT = REPO / "bench" / "out"
SECTION = "The transformers adapter on a GPU: 30 minutes of video through a 7B model"
PROACTIVE_ID = "check:pro"
BUDGET_S = 480  # what `--size full` is sized to take, loading included

# Qwen/Qwen2.5-VL-7B-Instruct on the Hugging Face Hub, config.json: the published
# architecture, as data. Its token ids (151643 and up) are replaced by the offline
# tokenizer's (tests/tiny_qwen2vl.py), which are below the vocabulary size.
QWEN25_VL_7B = {
    "text_config": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "hidden_act": "silu",
        "max_position_embeddings": 128000,
        "max_window_layers": 28,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "sliding_window": 32768,
        "use_sliding_window": False,
        "tie_word_embeddings": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
    },
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
    },
    "tie_word_embeddings": False,
    "dtype": "bfloat16",
}


@dataclass(frozen=True)
class Size:
    """One way to run the check: the model, the stream and the adapter's bounds."""

    name: str
    model: str  # what the report calls it
    device: str
    dtype: str
    seconds: int  # of video, at 1 fps
    side: int  # frame width and height
    visual_tokens: int
    context_tokens: int
    reserve_tokens: int
    # Random weights never end a reply early: every decision runs to this limit (a trained
    # model's "<silent>" and end of turn are about 5 tokens; 2 keeps --size full inside 8
    # minutes).
    max_tokens_proactive: int
    max_tokens_qa: int
    questions: int
    qa_history_s: float  # video before each question
    sample_s: float  # /info polling interval
    startup_s: float  # for the adapter to load


FULL = Size(
    "full", "Qwen2.5-VL-7B-Instruct architecture, random weights, bfloat16", "cuda",
    "bfloat16", seconds=1800, side=448, visual_tokens=128, context_tokens=8192,
    reserve_tokens=1024, max_tokens_proactive=2, max_tokens_qa=16, questions=3,
    qa_history_s=60.0, sample_s=0.5, startup_s=600.0,
)  # fmt: skip
TINY = Size(
    "tiny", "tiny random Qwen2.5-VL (tests/tiny_qwen2vl.py), float32", "cpu", "float32",
    seconds=40, side=224, visual_tokens=64, context_tokens=360, reserve_tokens=60,
    max_tokens_proactive=2, max_tokens_qa=8, questions=2, qa_history_s=10.0, sample_s=0.05,
    startup_s=120.0,
)  # fmt: skip
SIZES = {size.name: size for size in (FULL, TINY)}


def write_model(directory: Path, size: Size) -> Path:
    """config.json, the offline tokenizer and the image processor: what the adapter needs to
    build the model with random weights (no weights file)."""
    import transformers

    from tests.tiny_qwen2vl import (
        build_tokenizer,
        special_token_ids,
        tiny_config,
        write_image_processor,
    )

    tokenizer = build_tokenizer()
    if size.name == FULL.name:
        config = transformers.Qwen2_5_VLConfig(**QWEN25_VL_7B, **special_token_ids(tokenizer))
    else:
        config = tiny_config(tokenizer, "qwen2_5_vl")
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    write_image_processor(directory, patch=14)
    return directory


def question_times(size: Size) -> list[int]:
    """Evenly through the video."""
    return [size.seconds * (k + 1) // (size.questions + 1) for k in range(size.questions)]


def write_benchmark(root: Path, video: Path, size: Size) -> Path:
    """One proactive record over the whole video and `size.questions` open questions."""
    proactive = ProactiveRecord(
        record_id=PROACTIVE_ID,
        source_id=PROACTIVE_ID,
        source_benchmark="bench",
        task_type="count",
        video_path=str(video),
        instruction="Say when the picture turns around.",
        instruction_time_s=0.0,
        triggers=(Trigger(trigger_type="event_onset", answer="now", point_s=size.seconds - 10),),
    )
    questions = [
        QARecord(
            record_id=f"check:qa:{t}",
            source_id=f"check:qa:{t}",
            source_benchmark="bench",
            task_type="describe",
            video_path=str(video),
            question="What moves in the picture?",
            options=(),
            answer="the texture",
            question_time_s=float(t),
            evidence_anchor_s=float(t),
        )
        for t in question_times(size)
    ]
    benchmark = Benchmark(
        name="gpu-check", version="1", video_root="/", records=[proactive, *questions]
    )
    path = root / "benchmark.json"
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path


def adapter_options(model: Path, size: Size) -> dict:
    return {
        "model": str(model),
        "model_name": f"gpu-check-{size.name}",
        "random_weights": True,
        "device": size.device,
        "dtype": size.dtype,
        "visual_tokens": size.visual_tokens,
        "context_tokens": size.context_tokens,
        "reserve_tokens": size.reserve_tokens,
        "cache_policy": "evict-oldest",
        "max_tokens_proactive": size.max_tokens_proactive,
        "max_tokens_qa": size.max_tokens_qa,
        "instruction_prompt": "{instruction} Or say {wait}.\n",
    }


def memory_reader(client, url: str) -> Callable[[], dict]:
    """The `memory` of the adapter's `GET /info` at `url`."""
    return lambda: client.get(url).json()["memory"]


@dataclass
class SessionTrace:
    """One session's events, as the report needs them."""

    record_id: str
    first_frame_ns: int = 0  # the first frame sent (the video's decode comes before)
    finished_ns: int = 0
    frames: list[tuple[int, int]] = field(default_factory=list)  # a frame's state_commit
    texts: list[tuple[int, int]] = field(default_factory=list)  # preamble, instruction
    calls: list[tuple[int, int]] = field(default_factory=list)  # model_call intervals
    evictions: list[tuple[int, int]] = field(default_factory=list)
    evicted_frames: int = 0
    answers: int = 0  # response_final
    ttft_ns: list[int] = field(default_factory=list)

    def model_ns(self) -> int:
        """The union of the adapter's intervals: time the model was working."""
        total, reached = 0, 0
        for start, end in sorted(self.frames + self.texts + self.calls + self.evictions):
            total += max(0, end - max(start, reached))
            reached = max(reached, end)
        return total


def sessions_of(events) -> dict[str, SessionTrace]:
    sessions: dict[str, SessionTrace] = {}
    asked: dict[str, int] = {}
    for event in events:
        session = sessions.setdefault(event.session_id, SessionTrace(""))
        payload = event.payload
        if event.kind == EventKind.SESSION_START:
            session.record_id = payload.record_ids[0]
        elif event.kind == EventKind.FRAME_SENT and not session.first_frame_ns:
            session.first_frame_ns = event.runtime_ns
        elif event.kind == EventKind.SESSION_FINISHED:
            session.finished_ns = event.runtime_ns
        elif event.kind == EventKind.QUESTION_SENT:
            asked[event.session_id] = event.runtime_ns
        elif event.kind == EventKind.RESPONSE_START and event.session_id in asked:
            session.ttft_ns.append(event.runtime_ns - asked.pop(event.session_id))
        elif event.kind == EventKind.RESPONSE_FINAL:
            session.answers += 1
        elif event.kind == EventKind.WORKLOAD:
            interval = (payload.started_ns, payload.ended_ns)
            if payload.kind == "state_commit":
                (session.frames if payload.images else session.texts).append(interval)
            elif payload.kind == "model_call":
                session.calls.append(interval)
            elif payload.kind == "evict":
                session.evictions.append(interval)
                session.evicted_frames += len(payload.frame_ids)
    return sessions


def _ms(values_ns: list[int], quantile: float) -> float:
    """The nearest-rank quantile, in milliseconds."""
    ordered = sorted(values_ns)
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)] / 1e6


def _durations(intervals: list[tuple[int, int]]) -> list[int]:
    return [end - start for start, end in intervals]


def _quarters(frames: list[tuple[int, int]]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The spans of the first and the last quarter of a session's frame commits."""
    ordered = sorted(frames)
    quarter = len(ordered) // 4
    return (ordered[0][0], ordered[quarter][1]), (ordered[-quarter - 1][0], ordered[-1][1])


def _largest(samples: list[tuple[int, dict]], key: str, span: tuple[int, int]) -> int | None:
    values = [m[key] for t, m in samples if span[0] <= t <= span[1] and m[key] is not None]
    return max(values) if values else None


@dataclass
class Report:
    """What one check measured (the module's docstring defines each figure)."""

    size: str
    model: str
    device: str
    load_s: float
    wall_s: float
    sessions: int
    finished: int
    frames_committed: int
    decisions: int
    questions_answered: int
    evicted_frames: int
    frame_ms_p50: float
    frame_ms_p95: float
    decision_ms_p50: float
    ttft_ms_p50: float
    ttft_ms_max: float
    kv_bytes_per_token: int
    kv_bytes_first_quarter: int
    kv_bytes_last_quarter: int
    kv_bytes_max: int  # the largest sample of the whole run
    kv_bytes_bound: int  # context_tokens x bytes per token
    allocated_first_quarter: int | None
    allocated_last_quarter: int | None
    harness_wait: float
    samples: int

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2)


def kv_bytes_per_token(model: Path, dtype: str) -> int:
    """Keys and values of one token over every layer, from config.json."""
    import torch
    import transformers

    text = transformers.AutoConfig.from_pretrained(model).get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    element = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    return 2 * text.num_hidden_layers * text.num_key_value_heads * head_dim * element


def build_report(size: Size, device: str, model: Path, summary, events, samples, load_s, wall_s):
    sessions = sessions_of(events)
    proactive = next(s for s in sessions.values() if s.record_id == PROACTIVE_ID)
    questions = [s for s in sessions.values() if s.record_id != PROACTIVE_ID]
    every = list(sessions.values())
    first, last = _quarters(proactive.frames)
    per_token = kv_bytes_per_token(model, size.dtype)
    wall = sum(s.finished_ns - s.first_frame_ns for s in every)
    ttfts = [t for s in questions for t in s.ttft_ns]
    return Report(
        size=size.name,
        model=size.model,
        device=device,
        load_s=round(load_s, 1),
        wall_s=round(wall_s, 1),
        sessions=summary.total,
        finished=summary.finished,
        frames_committed=sum(len(s.frames) for s in every),
        decisions=len(proactive.calls),
        questions_answered=sum(s.answers for s in questions),
        evicted_frames=sum(s.evicted_frames for s in every),
        frame_ms_p50=_ms(_durations([f for s in every for f in s.frames]), 0.5),
        frame_ms_p95=_ms(_durations([f for s in every for f in s.frames]), 0.95),
        decision_ms_p50=_ms(_durations(proactive.calls), 0.5),
        ttft_ms_p50=_ms(ttfts, 0.5),
        ttft_ms_max=max(ttfts) / 1e6,
        kv_bytes_per_token=per_token,
        kv_bytes_first_quarter=_largest(samples, "kv_cache_bytes", first) or 0,
        kv_bytes_last_quarter=_largest(samples, "kv_cache_bytes", last) or 0,
        kv_bytes_max=max((m["kv_cache_bytes"] for _, m in samples), default=0),
        kv_bytes_bound=size.context_tokens * per_token,
        allocated_first_quarter=_largest(samples, "device_allocated_bytes", first),
        allocated_last_quarter=_largest(samples, "device_allocated_bytes", last),
        harness_wait=round(1 - sum(s.model_ns() for s in every) / wall, 4),
        samples=len(samples),
    )


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    cpuinfo = Path("/proc/cpuinfo")
    names = [
        line.split(":", 1)[1].strip()
        for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
        if line.startswith("model name")
    ]
    load = os.getloadavg()[0]
    model = names[0] if names else platform.machine()
    return f"{model}, {os.cpu_count()} cores (load average {load:.1f} before the check)"


def run_check(size: Size, work: Path, videos: Path = OUT, sample_s: float | None = None) -> Report:
    """Build the model folder and the video (kept in `videos`), serve the adapter, run the
    Core, report. `sample_s`: the /info polling interval, default the size's."""
    started = time.perf_counter()
    device = device_name(size.device)  # before the check loads the machine
    model = write_model(work / "model", size)
    video = cached_video(videos, seconds=size.seconds, width=size.side, height=size.side, fps=1)
    benchmark = write_benchmark(work, video, size)
    loading = time.perf_counter()
    with AdapterProcess(
        "transformers", startup_timeout_s=size.startup_s, options=adapter_options(model, size)
    ) as adapter:
        load_s = time.perf_counter() - loading
        config = stream_config(benchmark, adapter.url, work, qa_history_s=size.qa_history_s)
        info = adapter.url.replace("ws://", "http://").removesuffix("/ws") + "/info"
        with Store(f"sqlite:///{work / 'check.db'}") as store, httpx.Client(timeout=10) as client:
            with Sampler(memory_reader(client, info), sample_s or size.sample_s) as sampler:
                summary = asyncio.run(execute(RunExecutor(config, store)))
            events = list(store.iter_events(summary.run_id))
    if summary.failed:
        first = summary.failures[0]
        raise SystemExit(
            f"{summary.failed} of {summary.total} sessions failed; {first.session_id} at "
            f"{first.stage}: {first.reason}"
        )
    wall_s = time.perf_counter() - started
    return build_report(size, device, model, summary, events, sampler.samples, load_s, wall_s)


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2**20:,.1f} MiB" if value >= 2**20 else f"{value / 2**10:.1f} KiB"


def table(report: Report, size: Size) -> str:
    r = report
    cache = size.context_tokens - size.reserve_tokens
    default = SIZES[size.name].seconds
    seconds = "" if size.seconds == default else f" --seconds {size.seconds}"
    return "\n".join(
        [
            f"`python bench/gpu_transformers_check.py --size {size.name}{seconds}` "
            f"({date.today()}, "
            f"{r.device}, Python {platform.python_version()}): {r.model}; a {size.seconds} s "
            f"{size.side}x{size.side} video at 1 fps, one proactive session over all of it "
            f"and {size.questions} questions ({size.qa_history_s:g} s of video each), "
            f"{size.visual_tokens} visual tokens a frame, a {size.context_tokens}-token "
            f"context ({cache} before a frame, `evict-oldest`). Total {r.wall_s:.0f} s, of "
            f"which {r.load_s:.0f} s loading the adapter.",
            "",
            "| sessions ok | frames committed | decisions | questions answered | frames "
            "evicted | ms/frame p50 (p95) | ms/decision p50 | TTFT p50 (max) | KV cache, "
            "first -> last quarter (bound) | device allocated, first -> last quarter | "
            "harness wait |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            f"| {r.finished}/{r.sessions} | {r.frames_committed} | {r.decisions} | "
            f"{r.questions_answered} | {r.evicted_frames} | {r.frame_ms_p50:.1f} "
            f"({r.frame_ms_p95:.1f}) | {r.decision_ms_p50:.1f} | {r.ttft_ms_p50:.1f} ms "
            f"({r.ttft_ms_max:.1f}) | {_bytes(r.kv_bytes_first_quarter)} -> "
            f"{_bytes(r.kv_bytes_last_quarter)} ({_bytes(r.kv_bytes_bound)}) | "
            f"{_bytes(r.allocated_first_quarter)} -> {_bytes(r.allocated_last_quarter)} | "
            f"{100 * r.harness_wait:.1f}% |",
        ]
    )


def default_size() -> str:
    import torch

    return "full" if torch.cuda.is_available() else "tiny"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), help="default: full on CUDA, else tiny")
    parser.add_argument("--seconds", type=int, help="of video; default 1800 (full), 40 (tiny)")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.add_argument("--write", action="store_true", help="put the table in BENCHMARKS.md")
    args = parser.parse_args()
    size = SIZES[args.size or default_size()]
    if args.seconds:
        size = dataclasses.replace(size, seconds=args.seconds)
    if size.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--size full needs a CUDA GPU (torch sees none); try --size tiny")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        report = run_check(size, Path(temporary))
    if args.json:
        args.json.write_text(report.to_json())
    text = table(report, size)
    print(text)
    if size.name == FULL.name and report.wall_s > BUDGET_S:
        print(
            f"note: {report.wall_s:.0f} s, over the {BUDGET_S} s the check is sized for",
            file=sys.stderr,
        )
    if args.write:
        update_subsection(SECTION, INTRO, SUBSECTIONS[size.name], text)


INTRO = """\
`bench/gpu_transformers_check.py` runs the `transformers` adapter, served as its own process,
under the real Core on a full-size model and reports what a long native session costs.
`--size full`: Qwen2.5-VL-7B-Instruct's published architecture (config.json of
Qwen/Qwen2.5-VL-7B-Instruct, written into the script) built with random weights in bfloat16
directly on the GPU (the adapter's `random_weights` option: no checkpoint, no download, only
torch and transformers); a 30-minute 448x448 synthetic video at 1 fps (PyAV); one proactive
session over all of it with a decision at every frame (2 tokens: random weights never end a
reply early) and 3 open questions (60 s of video each, 16 tokens), one session at a time,
logical pacing, `trace` profile; 128 visual tokens a frame and an 8,192-token context (7,168
before a frame, `evict-oldest`), so every session passes through the cache many times. Sized
for under 8 minutes on one H100: about 2,000 frames, each a prefill and a decision of three
forward passes, at an estimated 25 ms a pass (eager transformers), about 200 s of model time;
not measured yet. `--seconds` shortens the stream. The GPU command, in a checkout on a CUDA
host after `pip install -e '.[transformers]'`:

```bash
python bench/gpu_transformers_check.py --size full --write
```

ms/frame: a frame's `state_commit` interval as the adapter reports it (JPEG decode, image
processor, vision encoder, prefill); ms/decision: a decision's `model_call`; TTFT: question
sent -> first token received (the Core's clock); KV cache: the live caches' key and value
bytes read off the tensors (the adapter's `GET /info`, `memory`), the largest sample in the
first and in the last quarter of the proactive session's frames, against the bound (context x
bytes a token: 57,344 for this architecture in bfloat16); device allocated:
`torch.cuda.memory_allocated`, weights included, likewise; harness wait: the share of the
sessions' time (first frame sent -> end) outside every workload interval the adapter
reported, i.e. the model idle, waiting for the Core, the WebSocket hops and the adapter's
event loop. `--size tiny` is the same check on the CPU with the tiny Qwen2.5-VL of
tests/tiny_qwen2vl.py and a 40 s video; tests/test_gpu_transformers_check.py runs it.
"""

SUBSECTIONS = {
    "full": "GPU: `--size full`",
    "tiny": "CPU path: `--size tiny` (the suite runs it)",
}


if __name__ == "__main__":
    main()
