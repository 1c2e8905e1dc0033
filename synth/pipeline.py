"""`streameval synth` from videos to trajectories (stages 1-4), then stage 5 (synth/summary.py).

Videos are processed one after another. Each one's frames are sampled into
`<out>/frames/` (the Core's content-addressed frame cache, so a rerun reuses them and the
dataset's image paths stay inside the output folder). A video whose frames cannot be read,
or whose model call fails after its retries, is skipped: one error line, its entry in
`synth.json`, and the failed call in `calls.jsonl`; the run goes on.

Outputs, all under `<out>` (an earlier run's are replaced):

- `calls.jsonl`: every model call attempt (synth/client.py);
- `trajectories.jsonl`: one `Trajectory` per video that went through stages 1-4;
- `synth.json`: what the run was (model, options, seed) and what came of it: enough to
  reproduce it and to tell iterations apart;
- stage 5's `train.jsonl`, `summary.json` and `report.html`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path

from streameval.adapters.chat_prompts import FRAME_LABEL
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.types import ImageRules
from streameval.synth.client import CallFailed, ModelClient, ModelSettings
from streameval.synth.filters import SilentShareBounds
from streameval.synth.models import MAX_SILENT_SHARE, MIN_SILENT_SHARE, Trajectory
from streameval.synth.rollout import roll_out, tie_breaker
from streameval.synth.stages import SampledVideo, Stages
from streameval.synth.summary import Summary, write_stage5

CALLS_FILE = "calls.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
MANIFEST_FILE = "synth.json"
FRAMES_DIR = "frames"


@dataclass(frozen=True)
class SynthOptions:
    segment_s: float = 2.0
    fps: float = 0.5  # the paper's sampling rate
    questions: int = 3  # K per video
    seed: int = 0  # the model's sampling seed and the roll-out's tie-breaks
    max_width: int = ImageRules.max_width
    max_images: int = 16  # per call of stages 1, 2 and 4
    min_silent_share: float = MIN_SILENT_SHARE  # the audit's bounds on the dataset's share
    max_silent_share: float = MAX_SILENT_SHARE
    time_labels: bool = False  # "Frame at {t:g}s:" before each frame of the dataset's rows


@dataclass(frozen=True)
class Skipped:
    video: str
    stage: str  # "frames" or the stage whose call failed
    error: str  # the one line printed


@dataclass
class SynthResult:
    videos: int
    trajectories: list[Trajectory] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    summary: Summary | None = None  # stage 5's, once it ran


async def synthesise(
    videos: Sequence[Path],
    model: ModelSettings,
    options: SynthOptions,
    out: Path,
    on_error: Callable[[str], None],
) -> SynthResult:
    """Stages 1-4 for every video, then stage 5 over the trajectories; `on_error` hears
    the one line of each skipped video as it happens."""
    out.mkdir(parents=True, exist_ok=True)
    for name in (CALLS_FILE, TRAJECTORIES_FILE):
        (out / name).write_text("")
    cache = FrameCache(out / FRAMES_DIR)
    rules = ImageRules(fps=options.fps, max_width=options.max_width)
    client = ModelClient(model, out / CALLS_FILE)
    result = SynthResult(videos=len(videos))
    try:
        for path in videos:
            video = os.path.abspath(path)
            try:
                frames = await cache.aget(Path(video), rules)
                sampled = SampledVideo.of(video, frames, options.segment_s)
                trajectory = await synthesise_video(client, sampled, options)
            except VideoDecodeError as exc:
                cause = str(exc).removeprefix(f"{video}: ")  # the line names the video once
                skip = Skipped(video, "frames", f"video {video}: stage frames: {cause}")
            except CallFailed as exc:
                skip = Skipped(video, exc.stage, str(exc))
            else:
                result.trajectories.append(trajectory)
                with (out / TRAJECTORIES_FILE).open("a", encoding="utf-8") as lines:
                    lines.write(trajectory.model_dump_json() + "\n")
                continue
            result.skipped.append(skip)
            on_error(skip.error)
    finally:
        await client.aclose()
    result.summary = write_stage5(
        result.trajectories,
        out,
        bounds=SilentShareBounds(options.min_silent_share, options.max_silent_share),
        frame_label=FRAME_LABEL if options.time_labels else None,
        digest_of=lambda video: cache.digest(Path(video)),  # remembered from sampling its frames
    )
    _write_manifest(out, model, options, result)
    return result


async def synthesise_video(
    client: ModelClient, video: SampledVideo, options: SynthOptions
) -> Trajectory:
    """Algorithm 1, lines 6-16, for one video."""
    stages = Stages(client, video, options.max_images)
    category = await stages.category()
    questions = await stages.questions(category, options.questions)
    relevance = await stages.relevance(category, questions)
    rng = tie_breaker(options.seed, video.frames.video_digest)
    actions = await roll_out(relevance, rng, stages.responder(category, questions))
    return Trajectory(
        video=video.video,
        duration_s=video.frames.duration_s,
        category=category,
        questions=questions,
        segments=video.segments,
        relevance=relevance,
        actions=actions,
    )


def _write_manifest(
    out: Path, model: ModelSettings, options: SynthOptions, result: SynthResult
) -> None:
    dataset = result.summary.dataset if result.summary else None
    manifest = {
        "streameval": version("streameval"),
        "model": {"base_url": model.base_url, "model": model.model, "retries": model.retries},
        "options": asdict(options),
        "videos": result.videos,
        "trajectories": len(result.trajectories),
        "skipped": [asdict(skip) for skip in result.skipped],
        "dataset_sha256": dataset.sha256 if dataset else None,
        "refused": result.summary.refused if result.summary else None,
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
