"""RealStreamEval score (EvoStreaming Eq. 3-4) on hand-computed cases."""

from __future__ import annotations

import pytest

from streameval.core.benchmark.records import ProactiveRecord, QARecord, Trigger
from streameval.scorer.episodes import assemble_one
from streameval.scorer.eventlog import SessionLog, memory_source
from streameval.scorer.judging.judges import ExactJudge
from streameval.scorer.metrics.realstream import evaluate_realstream, verbosity_multiplier
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import evaluate_source, scores_of

PROFILE = SCORING_PROFILES["realstream"]


@pytest.mark.parametrize(
    ("responses", "expected"),
    [
        (0, 1.0),
        (20, 1.0),
        (39, 1.0),  # R = 0.39 < 0.4
        (40, 0.6),  # R = 0.4: 1 - 0.2 * floor(2.0)
        (59, 0.6),
        (60, 0.4),  # R = 0.6: 1 - 0.2 * 3
        (79, 0.4),
        (80, 0.2),
        (99, 0.2),  # R = 0.99: 1 - 0.2 * 4
        (100, 0.2),  # R = 1: max(1 - 1.0, 0.2)
    ],
)
def test_verbosity_multiplier_steps(responses: int, expected: float) -> None:
    assert verbosity_multiplier(responses, 100, PROFILE) == expected


def record(task_type: str, *points: tuple[float, str], record_id: str = "p1") -> ProactiveRecord:
    return ProactiveRecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="handwritten",
        task_type=task_type,
        video_path=f"{record_id}.mp4",
        instruction="Count the jumps.",
        instruction_time_s=0.0,
        triggers=tuple(
            Trigger(trigger_type="event_onset", answer=answer, point_s=t) for t, answer in points
        ),
    )


def half_fps(rec: ProactiveRecord, answers: dict[int, str], steps: int = 20) -> SessionLog:
    """Frames at 0, 2, 4, ... s (0.5 fps) with a decision step after each; `answers` maps a
    step index to what the model said there."""
    log = SessionLog("run", rec.record_id).start()
    for step in range(steps):
        log.frame(2.0 * step)
        if step == 0:
            log.instruction(rec)
        log.step()
        if step in answers:
            log.respond(answers[step], output_tokens=len(answers[step].split()))
        else:
            log.silent()
    log.finish()
    return log


def scored(rec: ProactiveRecord, log: SessionLog, profile=PROFILE):
    result = evaluate_realstream(assemble_one(rec.record_id, log.rows()), rec, profile)
    requests = result.requests()
    scores, _ = ExactJudge().judge(requests)
    result.apply(scores, profile)
    return result


FAR = record("REC", (9.0, "1"), (21.0, "2"))  # ground-truth steps 5 (t=10) and 11 (t=22)


def test_far_matches_within_one_step() -> None:
    # "1" exactly at step 5, "2" one step late (step 12): both within δ = 1.
    result = scored(FAR, half_fps(FAR, {5: "1", 12: "2"}))
    assert (result.steps, result.truth_steps, result.response_steps) == (20, [5, 11], [5, 12])
    assert (result.quality, result.multiplier, result.early_penalty) == (1.0, 1.0, 0.0)
    assert result.answer_rate == pytest.approx(0.1)
    assert result.score == 1.0


def test_far_two_steps_late_is_no_match() -> None:
    result = scored(FAR, half_fps(FAR, {5: "1", 13: "2"}))
    assert result.best == [1.0, 0.0]
    assert result.score == pytest.approx(0.5)


def test_far_early_penalty_before_the_first_truth_step_minus_delta() -> None:
    # Step 4 is within δ of step 5: no penalty; step 3 is before 5 - 1: penalty 0.1.
    assert scored(FAR, half_fps(FAR, {4: "1", 11: "2"})).early is False
    result = scored(FAR, half_fps(FAR, {3: "what?", 5: "1", 11: "2"}))
    assert (result.early, result.early_penalty) == (True, 0.1)
    assert result.score == pytest.approx(0.9)


def test_far_verbosity_multiplier_at_rate_0_4() -> None:
    answers = {step: "1" if step < 8 else "2" for step in (0, 1, 2, 3, 4, 5, 11, 12)}
    result = scored(FAR, half_fps(FAR, answers))  # 8 of 20 steps: R = 0.4
    assert result.answer_rate == pytest.approx(0.4)
    assert result.multiplier == 0.6
    assert result.early  # steps 0..3 are before step 4
    assert result.score == pytest.approx(1.0 * 0.6 - 0.1)


def test_the_score_is_not_floored_unless_the_profile_says_so() -> None:
    silent_then_early = half_fps(FAR, {0: "hello"})
    result = scored(FAR, silent_then_early)
    assert result.score == pytest.approx(-0.1)  # Eq. 3 as published
    floored = PROFILE.with_overrides(rs_floor_score_at_zero=True)
    assert scored(FAR, silent_then_early, floored).score == 0.0


def test_non_far_tasks_match_only_the_exact_step_and_penalise_repetition() -> None:
    rec = record("stream bench proactive", (9.0, "3"))  # ground-truth step 5
    exact_step = scored(rec, half_fps(rec, {5: "3"}))
    assert (exact_step.far, exact_step.delta, exact_step.score) == (False, 0, 1.0)
    assert scored(rec, half_fps(rec, {6: "3"})).score == 0.0
    # "3." normalises to "3.", another answer than "3": no repetition.
    assert scored(rec, half_fps(rec, {5: "3", 6: "3."})).repeated is False
    repeated = scored(rec, half_fps(rec, {5: "3", 6: " 3 "}))
    assert (repeated.repeated, repeated.multiplier, repeated.score) == (True, 0.5, 0.5)
    # No early penalty outside forward active responding.
    assert scored(rec, half_fps(rec, {0: "1", 5: "3"})).score == 1.0


def test_run_score_and_per_token_score() -> None:
    a = FAR
    b = record("SSR", (9.0, "stir"), record_id="p2")
    logs = [
        half_fps(a, {5: "1", 11: "2 jumps"}),  # quality 0.5 ("2 jumps" != "2"), tokens 1 + 2
        half_fps(b, {5: "stir the pot now"}),  # quality 0, tokens 4
    ]
    scores = scores_of(evaluate_source(memory_source([a, b], logs), PROFILE))
    rs = scores.overall["realstream"]
    assert rs["score"].value == pytest.approx(25.0)  # mean(0.5, 0) in percent
    assert rs["tokens_per_response_turn"].value == pytest.approx(7 / 3)
    assert rs["per_token_score"].value == pytest.approx(25.0 / (7 / 3))
    assert rs["answer_rate"].value == pytest.approx((2 / 20 + 1 / 20) / 2)
    assert scores.records[0].realstream["truth_steps"] == [5, 11]
    assert any("not floored" in note for note in scores.notes)


def test_autonomous_sessions_use_the_delivered_frames_as_steps() -> None:
    rec = record("REC", (9.0, "1"))
    log = SessionLog("run", "p1").start(initiation="autonomous")
    for step in range(10):
        log.frame(2.0 * step)
        if step == 0:
            log.instruction(rec)
        if step == 5:
            log.respond("1", onset_t=10.6)
    log.finish()
    result = scored(rec, log)
    assert (result.steps, result.response_steps, result.truth_steps) == (10, [5], [5])
    assert result.score == 1.0


# --- the frame-level protocol: steps before the instruction, QA records as turns ------------

REALSTREAM_RUN = {"profile": "realstream", "pacing": "logical"}


def test_steps_before_the_instruction_count_in_the_answer_rate() -> None:
    # The realstream protocol asks for a decision from the video's start: 10 steps at
    # 0, 2, ..., 18 s, the instruction after the frame at 6 s. The answer at step 1 comes
    # before the instruction; it is a response all the same: R = 2/10, and it is early.
    rec = record("REC", (9.0, "1")).model_copy(update={"instruction_time_s": 6.0})
    log = SessionLog("run", rec.record_id).start(protocol="realstream")
    for step in range(10):
        log.frame(2.0 * step)
        if step == 3:
            log.instruction(rec)
        log.step()
        if step in (1, 5):
            log.respond("1")
        else:
            log.silent()
    log.finish()
    result = scored(rec, log)
    assert (result.steps, result.response_steps, result.truth_steps) == (10, [1, 5], [5])
    assert result.answer_rate == pytest.approx(0.2)
    assert (result.multiplier, result.early) == (1.0, True)
    assert result.score == pytest.approx(0.9)


def qa(record_id: str = "q1", answer: str = "A") -> QARecord:
    return QARecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="ovo_bench",
        task_type="EPM",
        video_path=f"{record_id}.mp4",
        question="Which?",
        options=("A. a", "B. b", "C. c", "D. d"),
        answer=answer,
        question_time_s=17.0,
        evidence_anchor_s=17.0,
    )


def frame_level_qa(rec: QARecord, at_steps: dict[int, str], answer: str | None) -> SessionLog:
    """The realstream QA timeline: frames at 0, 2, ..., 16 s, a decision step after each
    but the last, the question (t = 17 s) after the last frame, then `answer`."""
    log = SessionLog("run", rec.record_id).start(protocol="realstream")
    for step in range(9):
        log.frame(2.0 * step)
        if step == 8:
            break
        log.step()
        if step in at_steps:
            log.respond(at_steps[step])
        else:
            log.silent()
    log.question(rec)
    if answer is None:
        log.silent(task_id=rec.record_id)
    else:
        log.respond(answer)
    log.finish()
    return log


def realstream_qa(rec: QARecord, log: SessionLog):
    source = memory_source([rec], [log], config=REALSTREAM_RUN)
    return scores_of(evaluate_source(source, PROFILE)).records[0].realstream


def test_a_qa_question_is_judged_at_its_own_step() -> None:
    # T = 8 decision steps + the question's step; the answer at the question step (8).
    right = realstream_qa(qa(), frame_level_qa(qa(), {}, "A"))
    assert (right["steps"], right["truth_steps"], right["response_steps"]) == (9, [8], [8])
    assert (right["quality"], right["multiplier"], right["score"]) == (1.0, 1.0, 1.0)
    assert right["answer_rate"] == pytest.approx(1 / 9)
    wrong = realstream_qa(qa(), frame_level_qa(qa(), {}, "The answer is B"))
    assert wrong["score"] == 0.0
    declined = realstream_qa(qa(), frame_level_qa(qa(), {}, None))
    assert (declined["response_steps"], declined["score"]) == ([], 0.0)


def test_speaking_at_every_step_repeats_and_halves_a_qa_score() -> None:
    # "yes" at every step before the question: a repetition on consecutive turns (M = 0.5);
    # no early penalty outside forward active responding.
    log = frame_level_qa(qa(), dict.fromkeys(range(8), "yes"), "A")
    always = realstream_qa(qa(), log)
    assert (always["answer_rate"], always["repeated"]) == (1.0, True)
    assert (always["quality"], always["multiplier"], always["early_penalty"]) == (1.0, 0.5, 0.0)
    assert always["score"] == 0.5
    # A "yes" at the question's step is no option: the step's best answer is still "A".
    assert realstream_qa(qa(), frame_level_qa(qa(), {7: "D"}, "A"))["score"] == 1.0


def test_qa_records_join_the_realstream_score_only_in_frame_level_runs() -> None:
    records = [qa("q1", "A"), qa("q2", "B"), FAR]
    logs = [
        frame_level_qa(records[0], {}, "A"),  # 1
        frame_level_qa(records[1], {}, "A"),  # 0
        half_fps(FAR, {5: "1", 11: "2"}),  # 1
    ]
    frame_level = scores_of(
        evaluate_source(memory_source(records, logs, config=REALSTREAM_RUN), PROFILE)
    )
    assert frame_level.overall["realstream"]["score"].value == pytest.approx(200 / 3)
    assert frame_level.overall["realstream"]["score"].population == 3
    assert frame_level.protocol == "realstream"
    assert not any("protocol" in note for note in frame_level.notes)
    trace_run = scores_of(evaluate_source(memory_source(records, logs), PROFILE))
    assert trace_run.overall["realstream"]["score"].value == pytest.approx(100.0)
    assert trace_run.overall["realstream"]["score"].population == 1
    assert {r.record_id: r.realstream is None for r in trace_run.records} == {
        "p1": False,
        "q1": True,
        "q2": True,
    }
    assert (
        "QA records get a RealStreamEval score only in runs of a frame-level protocol "
        "(realstream); here the realstream metrics cover proactive records"
    ) in trace_run.notes
    assert any(note.startswith("scoring profile realstream is meant") for note in trace_run.notes)
