"""`streameval synth` as a real process against the scripted OpenAI-compatible stand-in, on
real H.264 videos written with PyAV: trajectories, the calls record, the ms-swift dataset
and its summary, with exact counts; and bad input as one error line.

The stand-in's model (tests/test_synth_stages.py, `ScriptedModel`) classifies every video as
TA, asks the same two questions and calls segments relevant by their start time, so each
video's trajectory follows from its length.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import jsonschema
import pytest

from tests.openai_stand_in import FakeOpenAIServer, labels, prompt_of
from tests.test_synth_stages import QUESTIONS, ScriptedModel, stage_of
from tests.timeline_fixtures import write_benchmark, write_video

STREAMEVAL = str(Path(sys.executable).with_name("streameval"))
# Question 0 has evidence in the segments starting at 2 s and 6 s, question 1 at 4 s.
RELEVANT = {(2.0, 0), (4.0, 1), (6.0, 0)}


def synth(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "STREAMEVAL_CACHE_DIR": str(cwd / "cache"), "COLUMNS": "200"}
    return subprocess.run(
        [STREAMEVAL, "synth", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def synth_on(server: FakeOpenAIServer, out: Path, *args: str, cwd: Path):
    """`streameval synth` against the stand-in's model, writing to `out`."""
    served = ["--model-url", server.base_url, "--model", "fake-vl", "--out", str(out)]
    return synth(*args, *served, cwd=cwd)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_folder_of_videos_becomes_trajectories_a_dataset_and_a_summary(tmp_path: Path) -> None:
    videos = tmp_path / "videos"
    write_video(videos / "a.mp4", seconds=8)  # 0.5 fps, 2 s segments: 4 segments
    write_video(videos / "b.mp4", seconds=6)  # 3 segments
    (videos / "broken.mp4").write_bytes(b"not a video")
    (videos / "notes.txt").write_text("not picked up")
    out = tmp_path / "out"
    with FakeOpenAIServer(ScriptedModel(relevant=RELEVANT)) as server:
        done = synth_on(
            server,
            out,
            "--videos",
            str(videos),
            "--questions",
            "2",
            "--max-width",
            "64",
            "--seed",
            "3",
            # These short videos respond at 5 of their 7 steps.
            "--min-silent-share",
            "0.25",
            "--json",
            cwd=tmp_path,
        )
    # One video could not be read: skipped with one line, the others went through.
    assert done.returncode == 1, done.stderr
    broken = videos / "broken.mp4"
    (line,) = done.stderr.splitlines()
    assert line == f"error: video {broken}: stage frames: Invalid data found when processing input"
    shown = json.loads(done.stdout)
    assert (shown["videos"], shown["trajectories"]) == (3, 2)
    assert [(s["video"], s["stage"]) for s in shown["skipped"]] == [(str(broken), "frames")]

    # Calls: per video, category + questions + 2 per segment + one per responding step.
    stages = [stage_of(prompt_of(body)) for body in server.requests]
    assert len(stages) == (2 + 4 * 2 + 3) + (2 + 3 * 2 + 2) == 23
    calls = jsonl(out / "calls.jsonl")
    assert [c["stage"] for c in calls] == stages
    assert all(c["error"] is None and c["attempt"] == 1 for c in calls)
    assert all(Path(image).is_file() for c in calls for image in c["images"])

    trajectories = jsonl(out / "trajectories.jsonl")
    assert [t["video"] for t in trajectories] == [str(videos / "a.mp4"), str(videos / "b.mp4")]
    a, b = trajectories
    assert a["category"] == b["category"] == "TA"
    assert [q["text"] for q in a["questions"]] == QUESTIONS
    assert a["relevance"] == [[False, False], [True, False], [False, True], [True, False]]
    assert [(x["decision"], x["question"], x["response"]) for x in a["actions"]] == [
        ("silent", None, None),
        ("respond", 0, "q0 at 2s"),
        ("respond", 1, "q1 at 4s"),
        ("respond", 0, "q0 at 6s"),
    ]
    assert [(x["decision"], x["response"]) for x in b["actions"]] == [
        ("silent", None),
        ("respond", "q0 at 2s"),
        ("respond", "q1 at 4s"),
    ]
    # Every frame path lies in the output folder's frame cache.
    frames = [f for t in trajectories for s in t["segments"] for f in s["frames"]]
    assert len(frames) == 7 and all(f.startswith(str(out / "frames")) for f in frames)

    # Stage 5: the dataset (one conversation per video) and its summary.
    rows = jsonl(out / "train.jsonl")
    assert len(rows) == 2
    schema = json.loads(
        (Path(__file__).parent / "schemas" / "ms_swift_dataset.schema.json").read_text()
    )
    for row in rows:
        jsonschema.validate(row, schema)  # ms-swift's documented dataset format
    assert [m["content"] for m in rows[1]["messages"] if m["role"] == "assistant"] == [
        "Silent",
        "q0 at 2s",
        "q1 at 4s",
    ]
    assert rows[0]["images"] == [f for s in a["segments"] for f in s["frames"]]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == shown["summary"]
    assert summary["videos"]["received"] == 2 and summary["videos"]["kept"] == 2
    assert summary["categories"] == {"IV": 0, "MD": 0, "TA": 2, "AM": 0, "DED": 0}
    assert (summary["actions"]["steps"], summary["actions"]["silent"]) == (7, 2)
    assert summary["actions"]["silent_share"] == 0.2857  # 2 / 7, as summary.json rounds it
    assert (summary["dataset"]["rows"], summary["dataset"]["steps"]) == (2, 7)
    assert (out / "report.html").read_text().lstrip().lower().startswith("<!doctype html")

    manifest = json.loads((out / "synth.json").read_text())
    assert manifest["streameval"] == version("streameval")
    assert manifest["model"] == {"base_url": server.base_url, "model": "fake-vl", "retries": 2}
    assert manifest["options"] == {
        "segment_s": 2.0,
        "fps": 0.5,
        "questions": 2,
        "seed": 3,
        "max_width": 64,
        "max_images": 16,
        "min_silent_share": 0.25,
        "max_silent_share": 0.95,
        "time_labels": False,
    }
    assert manifest["dataset_sha256"] == summary["dataset"]["sha256"]
    assert manifest["refused"] is None
    assert "Frame at" not in (out / "train.jsonl").read_text()


def test_a_copy_under_another_name_is_one_video_and_labels_are_asked_for(tmp_path: Path) -> None:
    """A byte-identical copy gets the same trajectory (same frames, same seed): one row."""
    videos = tmp_path / "videos"
    write_video(videos / "a.mp4", seconds=8)  # 4 segments: S R S S (75% Silent)
    (videos / "b.mp4").write_bytes((videos / "a.mp4").read_bytes())
    out = tmp_path / "out"
    with FakeOpenAIServer(ScriptedModel(relevant={(2.0, 0)})) as server:
        done = synth_on(
            server,
            out,
            "--videos",
            str(videos),
            "--questions",
            "2",
            "--max-width",
            "64",
            "--time-labels",
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == [
        "2 videos: 2 trajectories, 0 skipped",
        f"dataset {out / 'train.jsonl'}: 1 conversations, 4 steps (1 videos dropped by the audit)",
    ]
    a, b = jsonl(out / "trajectories.jsonl")
    assert {k: v for k, v in a.items() if k != "video"} == {
        k: v for k, v in b.items() if k != "video"
    }
    summary = json.loads((out / "summary.json").read_text())
    assert summary["videos"]["dropped_by_reason"]["duplicate"] == 1
    assert summary["dropped"] == [
        {
            "video": str(videos / "b.mp4"),
            "reason": "duplicate",
            "detail": f"a near-identical trajectory of {videos / 'a.mp4'}, the same video, "
            "was kept before",
        }
    ]
    assert summary["actions"]["silent_share"] == 0.75
    (row,) = jsonl(out / "train.jsonl")
    assert [m["content"] for m in row["messages"] if m["role"] == "user"] == [
        "Frame at 0s:<image>Questions about this live video:\n1. How many grey frames?",
        "Frame at 2s:<image>",
        "Frame at 4s:<image>",
        "Frame at 6s:<image>",
    ]
    assert json.loads((out / "synth.json").read_text())["options"]["time_labels"] is True


def test_a_dataset_that_always_responds_is_refused(tmp_path: Path) -> None:
    """A model that calls every segment relevant: 0% Silent. One error line, exit 5, no
    train.jsonl; the trajectories, the calls and the summary stay."""
    videos = tmp_path / "videos"
    write_video(videos / "a.mp4", seconds=6)  # 3 segments
    out = tmp_path / "out"
    everything = {(start, k) for start in (0.0, 2.0, 4.0) for k in (0, 1)}
    with FakeOpenAIServer(ScriptedModel(relevant=everything)) as server:
        done = synth_on(
            server,
            out,
            "--videos",
            str(videos),
            "--questions",
            "2",
            "--max-width",
            "64",
            cwd=tmp_path,
        )
    assert done.returncode == 5
    assert done.stderr.splitlines() == [
        "error: dataset refused: the dataset's Silent share is 0.0% (0 of 3 steps), below the "
        "minimum 0.6 (--min-silent-share); train.jsonl not written"
    ]
    assert done.stdout.splitlines()[1] == (
        "dataset refused: Silent share 0.0% (0 videos dropped by the audit)"
    )
    assert not (out / "train.jsonl").exists()
    assert len(jsonl(out / "trajectories.jsonl")) == 1
    assert len(jsonl(out / "calls.jsonl")) == 2 + 3 * 2 + 3
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["dataset"], summary["actions"]["silent_share"]) == (None, 0.0)
    manifest = json.loads((out / "synth.json").read_text())
    assert manifest["refused"] == summary["refused"] and manifest["dataset_sha256"] is None


def test_a_benchmarks_videos_each_once(tmp_path: Path) -> None:
    """The fixture benchmark has three records on one 20 s video: one trajectory."""
    benchmark = write_benchmark(tmp_path / "bench")
    out = tmp_path / "out"
    model = ScriptedModel(questions=QUESTIONS[:1], relevant={(4.0, 0), (12.0, 0)})
    with FakeOpenAIServer(model) as server:
        done = synth_on(
            server,
            out,
            "--benchmark",
            str(benchmark),
            "--questions",
            "1",
            "--segment-s",
            "4",
            "--max-width",
            "64",
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines()[0] == "1 videos: 1 trajectories, 0 skipped"
    (trajectory,) = jsonl(out / "trajectories.jsonl")
    assert trajectory["video"] == str(tmp_path / "bench" / "v.mp4")
    # 20 s in 4 s segments at 0.5 fps: two frames per segment, five segments.
    assert [len(s["frames"]) for s in trajectory["segments"]] == [2] * 5
    assert [a["decision"] for a in trajectory["actions"]] == [
        "silent",
        "respond",
        "silent",
        "respond",
        "silent",
    ]
    assert len(server.requests) == 2 + 5 + 2
    assert [labels(body) for body in server.requests[-2:]] == [
        [0.0, 2.0, 4.0, 6.0],
        [float(t) for t in range(0, 16, 2)],
    ]
    assert len(jsonl(out / "train.jsonl")) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model-url", "http://127.0.0.1:9/v1", "--model", "m"],
            "error: give the videos: either --videos DIR or --benchmark FILE",
        ),
        (
            ["--videos", "{tmp}", "--model", "m"],
            "error: --model-url: give the served model's URL, e.g. http://127.0.0.1:8000/v1",
        ),
        (
            ["--videos", "{tmp}", "--model-url", "http://127.0.0.1:9/v1", "--model", "m"],
            "error: --videos: no video file (.avi, .m4v, .mkv, .mov, .mp4, .mpg, .ts, .webm) in "
            "{tmp}",
        ),
        (
            [
                "--videos",
                "{tmp}",
                "--model-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--segment-s",
                "1",
            ],
            "error: --segment-s 1 holds no frame at --fps 0.5: give at least 2 s",
        ),
        (
            [
                "--benchmark",
                "{tmp}/nope.json",
                "--model-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
            ],
            "error: benchmark '{tmp}/nope.json' is neither 'synthetic' nor an existing path",
        ),
        (
            [
                "--videos",
                "{tmp}",
                "--model-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--questions",
                "0",
            ],
            "error: --questions must be at least 1, got 0",
        ),
        (
            [
                "--videos",
                "{tmp}",
                "--model-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--max-silent-share",
                "1.5",
            ],
            "error: --max-silent-share is a share of the steps, from 0 to 1, got 1.5",
        ),
        (
            [
                "--videos",
                "{tmp}",
                "--model-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--min-silent-share",
                "0.8",
                "--max-silent-share",
                "0.7",
            ],
            "error: --min-silent-share 0.8 is above --max-silent-share 0.7",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    filled = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    done = synth(*filled, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [message.replace("{tmp}", str(tmp_path))]
    assert done.stdout == "" and not (tmp_path / "out").exists()
