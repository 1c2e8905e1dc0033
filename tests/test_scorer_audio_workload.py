"""The workload family's sound (issue 37): what the Core streamed (`audio_sent`) and what
the adapter said its model calls took in (`audio_seconds`, `audio_tokens`), over the records
whose session has sound; a video-only run has no population for them and its records leave
them out."""

from __future__ import annotations

import pytest

from streameval.scorer.episodes import assemble_one
from streameval.scorer.eventlog import SessionLog, memory_source
from streameval.scorer.metrics.workload import evaluate_workload
from streameval.scorer.report import evaluate_source, scores_of
from tests.test_scorer_qa import PAPER, question

AUDIO_METRICS = (
    "audio_streamed_s",
    "audio_chunks",
    "silent_audio_chunks",
    "audio_submitted_s",
    "audio_tokens",
)


def heard(record_id: str, chunks: int, silent: set[int], calls: list[tuple]) -> SessionLog:
    """Frames at 0..chunks/2 s with the chunks before each in stream order, then one model
    call per (audio_seconds, audio_tokens), the question and its answer."""
    log = SessionLog("run", record_id).start(audio=True)
    for k in range(chunks):
        if k % 2 == 0:
            log.frame(k / 2)
        log.audio(k, silent=k in silent)
    for seconds, tokens in calls:
        log.workload([log.frame_id(0)], audio_seconds=seconds, audio_tokens=tokens)
    log.question(question(record_id, video=f"v-{record_id}"))
    log.respond("B")
    log.finish()
    return log


def seen(record_id: str) -> SessionLog:
    log = SessionLog("run", record_id).start()
    log.frame(0.0)
    log.workload([log.frame_id(0)])
    log.question(question(record_id, video=f"v-{record_id}"))
    log.respond("B")
    log.finish()
    return log


def test_a_record_sums_the_chunks_streamed_and_the_sound_its_calls_took_in():
    """6 chunks of 0.5 s (3 s), two of them silent; calls reported 1.5 s + 1 s of sound and
    38 tokens for the first (none for the second)."""
    log = heard("q1", 6, {4, 5}, [(1.5, 38), (1.0, None)])
    result = evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds)
    assert result.has_audio
    assert (result.audio_streamed_s, result.audio_chunks, result.silent_audio_chunks) == (3.0, 6, 2)
    assert (result.audio_submitted_s, result.audio_tokens) == (2.5, 38)
    assert result.model_calls == 2


def test_streamed_sound_the_adapter_never_reported_is_missing_not_zero():
    log = heard("q1", 4, set(), [(None, None)])
    result = evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds)
    assert (result.audio_streamed_s, result.audio_chunks, result.silent_audio_chunks) == (2.0, 4, 0)
    assert (result.audio_submitted_s, result.audio_tokens) == (None, None)


def test_the_run_sums_over_the_records_with_sound_only():
    records = [question(r, video=f"v-{r}") for r in ("q1", "q2", "q3")]
    logs = [
        heard("q1", 6, {4, 5}, [(1.5, 38), (1.0, None)]),
        heard("q2", 4, set(), [(2.0, None)]),
        seen("q3"),
    ]
    scores = scores_of(evaluate_source(memory_source(records, logs), PAPER))
    workload = scores.overall["workload"]
    observed = {
        name: (workload[name].value, workload[name].population, workload[name].observed)
        for name in AUDIO_METRICS
    }
    assert observed == {
        "audio_streamed_s": (5.0, 2, 2),
        "audio_chunks": (10, 2, 2),
        "silent_audio_chunks": (2, 2, 2),
        "audio_submitted_s": (4.5, 2, 2),
        "audio_tokens": (38, 2, 1),  # q2's adapter call did not say
    }
    assert workload["delivered_frames"].population == 3
    by_record = {r.record_id: r.workload for r in scores.records}
    assert by_record["q1"]["audio_streamed_s"] == 3.0
    assert by_record["q2"]["audio_tokens"] is None
    assert not [key for key in by_record["q3"] if key.startswith(("audio", "silent_audio"))]


def test_a_video_only_run_has_no_population_for_sound():
    records = [question("q1"), question("q2", video="v2")]
    scores = scores_of(evaluate_source(memory_source(records, [seen("q1"), seen("q2")]), PAPER))
    workload = scores.overall["workload"]
    for name in AUDIO_METRICS:
        assert (workload[name].value, workload[name].population) == (None, 0), name
    assert workload["submitted_images"].value == 2
    for record in scores.records:
        assert "audio_streamed_s" not in record.workload


@pytest.mark.parametrize("seconds", [-1.0, 1e30])
def test_an_impossible_reported_duration_is_missing(seconds: float):
    log = heard("q1", 2, set(), [(seconds, 5)])
    result = evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds)
    assert (result.audio_submitted_s, result.audio_tokens) == (None, 5)
