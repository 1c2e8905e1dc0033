"""TRACE proactive rules on hand-computed cases: windows, assignment, false alarms, misses,
delays, redundancy, and failed records in the denominators."""

from __future__ import annotations

import pytest

from streameval.core.benchmark.records import ProactiveRecord, Trigger
from streameval.scorer.episodes import assemble_one
from streameval.scorer.eventlog import SessionLog, memory_source
from streameval.scorer.metrics.proactive import (
    BEFORE_WINDOW,
    IN_WINDOW,
    NO_OUTPUT,
    assign,
    build_windows,
    evaluate_proactive,
)
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import evaluate_source, scores_of

PROFILE = SCORING_PROFILES["trace-paper-v1"]
EXTENDED = SCORING_PROFILES["trace-extended"]


def point(t: float, answer: str = "x") -> Trigger:
    return Trigger(trigger_type="event_onset", answer=answer, point_s=t)


def state(start: float, end: float, answer: str = "x") -> Trigger:
    return Trigger(
        trigger_type="state_interval", answer=answer, interval_start_s=start, interval_end_s=end
    )


def record(
    triggers: tuple[Trigger, ...], record_id: str = "p1", task_type: str = "REC", video: str = "v1"
) -> ProactiveRecord:
    return ProactiveRecord(
        record_id=record_id,
        source_id=video,
        source_benchmark="handwritten",
        task_type=task_type,
        video_path=f"{video}.mp4",
        instruction="Tell me when it happens.",
        instruction_time_s=0.0,
        triggers=triggers,
    )


def spans(windows) -> list[tuple[float, float]]:
    return [(w.start, w.end) for w in windows]


# --- windows -----------------------------------------------------------------------------------


def test_windows_are_truncated_by_the_next_trigger_and_the_last_runs_full_tolerance() -> None:
    windows = build_windows([point(10), point(12), point(30)], 5.0)
    assert spans(windows) == [(10, 12), (12, 17), (30, 35)]


def test_tolerance_ten_seconds() -> None:
    assert spans(build_windows([point(10), point(12), point(30)], 10.0)) == [
        (10, 12),
        (12, 22),
        (30, 40),
    ]


def test_windows_follow_time_order_not_annotation_order() -> None:
    windows = build_windows([point(30, "c"), point(10, "a"), point(12, "b")], 5.0)
    assert [(w.start, w.end, w.answer, w.trigger) for w in windows] == [
        (10, 12, "a", 1),
        (12, 17, "b", 2),
        (30, 35, "c", 0),
    ]


def test_equal_trigger_times_share_one_full_window() -> None:
    # t_next is the first start *strictly* greater.
    assert spans(build_windows([point(10), point(10)], 5.0)) == [(10, 15), (10, 15)]


def test_state_intervals_keep_their_bounds_and_truncate_point_windows() -> None:
    windows = build_windows([state(20, 28), point(18), point(25)], 5.0)
    # The point at 18 stops at the state's start; the one at 25 is the last start: full Δ.
    assert spans(windows) == [(18, 20), (20, 28), (25, 30)]


# --- assignment --------------------------------------------------------------------------------


def test_a_response_before_a_window_is_consumed_as_before_window() -> None:
    windows = build_windows([point(10), point(20)], 5.0)
    assert assign(windows, [5.0, 21.0]) == [(BEFORE_WINDOW, 0), (IN_WINDOW, 1)]


def test_before_window_takes_the_latest_unused_earlier_response() -> None:
    windows = build_windows([point(10), point(20)], 5.0)
    # 6 is taken by the first window; 3 is left for the second.
    assert assign(windows, [3.0, 6.0]) == [(BEFORE_WINDOW, 1), (BEFORE_WINDOW, 0)]


def test_one_response_cannot_fill_two_windows() -> None:
    windows = build_windows([point(10), point(10)], 5.0)
    assert assign(windows, [11.0]) == [(IN_WINDOW, 0), (NO_OUTPUT, None)]
    # Overlapping windows: the state interval (earlier start) takes it, the point gets none.
    windows = build_windows([state(10, 30), point(12)], 5.0)
    assert assign(windows, [13.0]) == [(IN_WINDOW, 0), (NO_OUTPUT, None)]


def test_the_first_response_in_a_window_is_assigned() -> None:
    windows = build_windows([point(10)], 5.0)
    assert assign(windows, [12.0, 11.0, 14.0]) == [(IN_WINDOW, 1)]


def test_window_end_is_excluded() -> None:
    windows = build_windows([point(10)], 5.0)
    assert assign(windows, [15.0]) == [(NO_OUTPUT, None)]
    assert assign(windows, [10.0]) == [(IN_WINDOW, 0)]


# --- one record end to end (logical pacing) ----------------------------------------------------


def steps_log(rec: ProactiveRecord, answers: dict[int, str], last: int = 32) -> SessionLog:
    """Frames every second from 0 to `last`, a step after each; answers at some seconds."""
    log = SessionLog("run", rec.record_id).start()
    for t in range(last + 1):
        log.frame(float(t))
        if t == 0:
            log.instruction(rec)
        log.step()
        if t in answers:
            log.respond(answers[t])
        else:
            log.silent()
    log.finish()
    return log


def test_false_alarms_misses_and_tail_responses() -> None:
    rec = record((point(10, "3"), point(20, "4")))
    # 5: before the first window (false alarm); 11: in window 1; 17: between the windows
    # (false alarm); 22: in window 2; 30: outside every window after the last one began
    # (a tail response: no false alarm, but still an answered episode).
    log = steps_log(rec, {5: "early", 11: "3", 17: "noise", 22: "wrong", 30: "late"})
    result = evaluate_proactive(assemble_one("p1", log.rows()), rec, PROFILE)
    # Video delays: 11 - 10 and 22 - 20. Runtime delays (the log's clock ticks 1 ms per
    # event): frame 10, step, silent, frame 11, step, first token = 5 ms after frame 10's
    # send; frame 20 then 8 events to the first token at 22.
    assert [(o.assignment, o.delay_video_s, o.delay_runtime_s) for o in result.windows] == [
        (IN_WINDOW, 1.0, 0.005),
        (IN_WINDOW, 2.0, 0.008),
    ]
    assert [e.text for e in result.answered] == ["early", "3", "noise", "wrong", "late"]
    assert result.false_alarm == [True, False, True, False, False]
    assert result.tail == [False, False, False, False, True]


def test_scores_of_one_record_by_hand() -> None:
    rec = record((point(10, "3"), point(20, "4"), point(40, "5")))
    log = steps_log(
        rec, {5: "early", 11: "3", 12: "3 again", 17: "noise", 22: "wrong", 45: "x"}, 46
    )
    overall = scores_of(evaluate_source(memory_source([rec], [log]), PROFILE)).overall
    proactive = overall["proactive"]
    # Windows [10,15) [20,25) [40,45): 11 correct, 22 wrong (in window, not a miss); the
    # third has nothing inside it (45 is its excluded end), so the latest unused earlier
    # answer (17; 5 and 12 are also unused) is consumed as before_window.
    assert proactive["in_window_accuracy"].value == pytest.approx(1 / 3)
    assert proactive["miss_rate"].value == pytest.approx(1 / 3)
    assert proactive["before_window_rate"].value == pytest.approx(1 / 3)
    # Answered: 5, 11, 12, 17, 22, 45 -> false alarms 5 and 17 (45 is after the last start).
    assert proactive["false_alarm_rate"].value == pytest.approx(2 / 6)
    assert proactive["false_alarm_rate"].population == 6
    assert proactive["redundant_responses"].value == 1  # 11 and 12 share the first window
    # TRACE's delay is on the runtime clock under logical pacing too (processing time):
    # 5 ms and 8 ms after the first frame at or after each window start was sent.
    delay = proactive["median_response_delay_runtime_s"]
    assert (delay.value, delay.population, delay.coverage) == (pytest.approx(0.0065), 2, 1.0)
    assert "median_response_delay_video_s" not in proactive
    assert proactive["completion_rate"].value == 1.0
    # trace-extended also reports the delay in video seconds: 11 - 10 and 22 - 20.
    extended = scores_of(evaluate_source(memory_source([rec], [log]), EXTENDED)).overall
    assert extended["proactive"]["median_response_delay_video_s"].value == pytest.approx(1.5)
    assert extended["proactive"]["median_response_delay_runtime_s"].value == pytest.approx(0.0065)


def test_only_wait_is_silence_under_trace_and_more_tokens_under_extended() -> None:
    rec = record((point(10, "3"),))
    log = steps_log(rec, {4: "wait", 11: "<silent>", 12: "Silent."})
    # TRACE: after normalisation only the empty text and "wait" are non-answers, so
    # "<silent>" is a (wrong) in-window answer and "Silent." a redundant one.
    scores = scores_of(evaluate_source(memory_source([rec], [log]), PROFILE))
    proactive = scores.overall["proactive"]
    assert proactive["miss_rate"].value == 0.0
    assert proactive["in_window_accuracy"].value == 0.0
    assert proactive["redundant_responses"].value == 1
    assert scores.records[0].proactive["unanswered_episodes"] == 1
    # This project's reading: "silent", "<silent>" and "Silent." are silence too.
    scores = scores_of(evaluate_source(memory_source([rec], [log]), EXTENDED))
    proactive = scores.overall["proactive"]
    assert proactive["miss_rate"].value == 1.0
    assert proactive["before_window_rate"].value == 0.0
    # No answered episode at all: the false-alarm rate has no population and no value.
    alarms = proactive["false_alarm_rate"]
    assert (alarms.value, alarms.population, alarms.coverage) == (None, 0, None)
    assert scores.records[0].proactive["unanswered_episodes"] == 3


def test_exact_match_after_normalisation_and_accepted_facts_only_when_extended() -> None:
    rec = record(
        (
            Trigger(
                trigger_type="event_onset",
                answer="Red Cup",
                point_s=10,
                accepted_facts=("crimson cup",),
            ),
            point(20, "Red Cup"),
            point(30, "3"),
            point(40, "4"),
        )
    )
    log = steps_log(
        rec, {11: "Crimson cup", 21: "  red   CUP", 31: "3.", 41: "<think>4?</think> 4"}, 46
    )
    trace = scores_of(evaluate_source(memory_source([rec], [log]), PROFILE)).records[0]
    # TRACE matches the trigger's answer only: the accepted fact scores 0.
    assert [w["score"] for w in trace.proactive["windows"]] == [0.0, 1.0, 0.0, 1.0]
    extended = scores_of(evaluate_source(memory_source([rec], [log]), EXTENDED)).records[0]
    assert [w["score"] for w in extended.proactive["windows"]] == [1.0, 1.0, 0.0, 1.0]


def test_failed_records_stay_in_every_denominator() -> None:
    good = record((point(10, "3"), point(20, "4")), "p1", video="v1")
    broken = record((point(10, "3"), point(20, "4"), point(30, "5")), "p2", video="v2")
    never = record((point(10, "3"),), "p3", video="v3")
    log = steps_log(good, {11: "3", 21: "4"})
    failed = SessionLog("run", "p2").start()
    failed.frame(0.0)
    failed.instruction(broken)
    failed.step()
    failed.fail("response", "no decision at step 0 within 60s")
    scores = scores_of(
        evaluate_source(memory_source([good, broken, never], [log, failed]), PROFILE)
    )
    proactive = scores.overall["proactive"]
    assert proactive["in_window_accuracy"].value == pytest.approx(2 / 6)
    assert proactive["in_window_accuracy"].population == 6
    assert proactive["miss_rate"].value == pytest.approx(4 / 6)
    assert proactive["completion_rate"].value == pytest.approx(1 / 3)
    assert scores.sessions.model_dump() == {
        "finished": 1,
        "failed": 1,
        "incomplete": 0,
        "not_run": 1,
        "failed_infrastructure": 1,  # a response timeout is not a model outcome
    }
    statuses = {r.record_id: (r.status, r.failure_stage) for r in scores.records}
    assert statuses == {
        "p1": ("finished", None),
        "p2": ("failed", "response"),
        "p3": ("not_run", None),
    }


def test_an_episode_cut_off_by_a_failure_is_not_an_answer() -> None:
    rec = record((point(10, "3"),))
    log = SessionLog("run", "p1").start()
    for t in range(12):
        log.frame(float(t))
        if t == 0:
            log.instruction(rec)
        log.step()
        if t < 11:
            log.silent()
    log.respond("3", close=False)
    log.fail("streaming", "adapter disconnected without a close frame")
    result = evaluate_proactive(assemble_one("p1", log.rows()), rec, PROFILE)
    assert result.answered == []
    assert result.windows[0].assignment == NO_OUTPUT


def test_wall_clock_delay_runs_from_the_first_frame_at_or_after_the_window_start() -> None:
    rec = record((point(10.5, "3"),))
    log = SessionLog("run", "p1", pacing="wall_clock").start()
    base = 5_000_000_000
    for t in range(15):
        log.frame(float(t), ns=base + t * 1_000_000_000, scheduled_ns=base + t * 1_000_000_000)
        if t == 0:
            log.instruction(rec)
    # Onset mapped to video 12.2 s; the first frame at or after 10.5 s (t = 11) was sent at
    # base + 11 s, the response's first token arrived at base + 12.2 s.
    log.respond("3", onset_ns=base + 12_200_000_000, onset_t=12.2, final_ns=base + 12_300_000_000)
    log.finish()
    result = evaluate_proactive(assemble_one("p1", log.rows()), rec, PROFILE)
    assert result.windows[0].delay_runtime_s == pytest.approx(1.2)
    assert result.windows[0].delay_video_s == pytest.approx(12.2 - 10.5)


def test_a_first_token_before_that_frame_gives_no_runtime_delay() -> None:
    rec = record((point(10.5, "3"), point(20.5, "4")))
    log = SessionLog("run", "p1", pacing="wall_clock").start()
    base = 5_000_000_000
    for t in range(11):
        log.frame(float(t), ns=base + t * 1_000_000_000, scheduled_ns=base + t * 1_000_000_000)
        if t == 0:
            log.instruction(rec)
    # The first token arrives at video 10.7 s, before frame 11 (the first at or after 10.5 s)
    # was sent; no frame at all was sent at or after 20.5 s.
    log.respond("3", onset_ns=base + 10_700_000_000, onset_t=10.7, final_ns=base + 10_800_000_000)
    for t in range(11, 21):
        log.frame(float(t), ns=base + t * 1_000_000_000, scheduled_ns=base + t * 1_000_000_000)
    log.respond("4", onset_ns=base + 20_900_000_000, onset_t=20.9, final_ns=base + 21_000_000_000)
    log.finish()
    result = evaluate_proactive(assemble_one("p1", log.rows()), rec, PROFILE)
    assert [o.assignment for o in result.windows] == [IN_WINDOW, IN_WINDOW]
    assert [o.delay_runtime_s for o in result.windows] == [None, None]
    assert [o.delay_video_s for o in result.windows] == [
        pytest.approx(0.2),
        pytest.approx(0.4),
    ]


def test_per_task_type_and_source_slices() -> None:
    a = record((point(10, "3"),), "p1", task_type="REC", video="v1")
    b = record((point(10, "3"),), "p2", task_type="SSR", video="v2")
    logs = [steps_log(a, {11: "3"}, 12), steps_log(b, {3: "3"}, 12)]
    scores = scores_of(evaluate_source(memory_source([a, b], logs), PROFILE))
    assert scores.by_task_type["REC"]["proactive"]["in_window_accuracy"].value == 1.0
    assert scores.by_task_type["SSR"]["proactive"]["in_window_accuracy"].value == 0.0
    assert scores.by_task_type["SSR"]["proactive"]["false_alarm_rate"].value == 1.0
    assert scores.overall["proactive"]["in_window_accuracy"].value == 0.5
    assert list(scores.by_source_benchmark) == ["handwritten"]
