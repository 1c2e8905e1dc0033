"""The CPU path of the GPU check (bench/gpu_transformers_check.py --size tiny): the same
script, end to end, with the tiny Qwen2.5-VL built from its config with random weights by the
adapter process (`random_weights`), a 40 s video and the real Core.

The stream: one proactive record whose last window ends at 35 s (frames at 0..35 s, a
decision after each) and questions at 13 s and 26 s with 10 s of history (frames 3..13 and
16..26). The cache holds about three frames, so all but the last few of each session go.
"""

from __future__ import annotations

import json

import pytest

from tests.model_stack import require_model_stack

require_model_stack()
pytestmark = pytest.mark.models  # .ci/run runs these in its model-stack venv

from bench.gpu_transformers_check import TINY, question_times, run_check, table  # noqa: E402

PROACTIVE_FRAMES = 36
QUESTION_FRAMES = 11


def test_the_tiny_check_streams_every_frame_through_a_flat_cache(tmp_path):
    assert question_times(TINY) == [13, 26]
    report = run_check(TINY, tmp_path / "work", videos=tmp_path / "videos", sample_s=0.01)

    assert (report.sessions, report.finished) == (3, 3)
    assert report.frames_committed == PROACTIVE_FRAMES + 2 * QUESTION_FRAMES
    assert report.decisions == PROACTIVE_FRAMES  # a step after every frame
    assert report.questions_answered == 2
    # Each session keeps at most its last four frames (300 tokens, 78 a frame).
    assert report.frames_committed - 3 * 4 <= report.evicted_frames < report.frames_committed

    # The tiny model: 2 layers x (keys + values) x 2 KV heads x head size 8 x 4 bytes.
    assert report.kv_bytes_per_token == 2 * 2 * 2 * 8 * 4
    assert report.kv_bytes_bound == 360 * report.kv_bytes_per_token
    # Flat: bounded throughout, and as full at the end as after the warm-up.
    full = 300 * report.kv_bytes_per_token
    assert 0 < report.kv_bytes_max <= report.kv_bytes_bound
    assert full // 2 <= report.kv_bytes_first_quarter <= report.kv_bytes_bound
    assert full // 2 <= report.kv_bytes_last_quarter <= report.kv_bytes_bound
    assert report.allocated_first_quarter is None  # the CPU has no device allocator

    assert 0 < report.frame_ms_p50 <= report.frame_ms_p95
    assert report.decision_ms_p50 > 0 and 0 < report.ttft_ms_p50 <= report.ttft_ms_max
    assert 0 < report.harness_wait < 1
    assert json.loads(report.to_json())["frames_committed"] == report.frames_committed

    lines = table(report, TINY).splitlines()
    assert lines[0].startswith("`python bench/gpu_transformers_check.py --size tiny`")
    assert lines[2].startswith("| sessions ok | frames committed | decisions |")
    assert lines[4].startswith(f"| 3/3 | {report.frames_committed} | {report.decisions} | 2 |")
