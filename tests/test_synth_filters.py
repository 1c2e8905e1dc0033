"""The audit of stage 5 (synth/filters.py) on hand-made trajectories: each filter, its
reason and detail, the order of the reasons and the exact counts."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from streameval.core.frames import digest as digest_module
from streameval.synth.filters import (
    SilentShareBounds,
    audit,
    duplicate_key,
    is_silence_token,
    malformed,
    normalise,
    temporally_inconsistent,
    video_identity,
)
from streameval.synth.models import Action, Segment, Trajectory
from tests.test_synth_dataset import make_trajectory
from tests.timeline_fixtures import write_video


def replace_action(trajectory: Trajectory, step: int, action: Action) -> Trajectory:
    actions = list(trajectory.actions)
    actions[step] = action
    return trajectory.model_copy(update={"actions": tuple(actions)})


def replace_segment(trajectory: Trajectory, step: int, **changes: object) -> Trajectory:
    segments = list(trajectory.segments)
    segments[step] = Segment(**{**segments[step].model_dump(), **changes})
    return trajectory.model_copy(update={"segments": tuple(segments)})


def test_audit_keeps_valid_trajectories_in_order(tmp_path: Path) -> None:
    inputs = [make_trajectory(tmp_path, video=name) for name in ("c", "a", "b")]
    result = audit(inputs)
    assert result.kept == tuple(inputs)
    assert result.dropped == ()
    assert result.counts() == {
        "no_relevant_segment": 0,
        "malformed": 0,
        "temporally_inconsistent": 0,
        "duplicate": 0,
    }


def test_each_reason_counted_once_per_video(tmp_path: Path) -> None:
    good = make_trajectory(tmp_path, video="good")
    silent = make_trajectory(tmp_path, video="silent", relevance=((False, False), (False, False)))
    empty = make_trajectory(tmp_path, video="empty", responses={1: (0, "")})
    early = make_trajectory(tmp_path, video="early", responses={0: (0, "Red.")})
    copy = make_trajectory(tmp_path, video="good")
    # All Silent *and* malformed: the first reason in the documented order wins.
    both = make_trajectory(
        tmp_path, video="both", relevance=((False, False),), responses={0: (0, "")}
    )
    result = audit([good, silent, empty, early, copy, both])

    assert result.kept == (good,)
    assert [(d.video, d.reason, d.detail) for d in result.dropped] == [
        ("/videos/silent.mp4", "no_relevant_segment", "no segment is relevant to any question"),
        ("/videos/empty.mp4", "malformed", "step 1: empty response"),
        (
            "/videos/early.mp4",
            "temporally_inconsistent",
            "step 0: responds to question 0, before its first relevant segment (1)",
        ),
        (
            "/videos/good.mp4",
            "duplicate",
            "a near-identical trajectory of this video was kept before",
        ),
        ("/videos/both.mp4", "no_relevant_segment", "no segment is relevant to any question"),
    ]
    assert result.counts() == {
        "no_relevant_segment": 2,
        "malformed": 1,
        "temporally_inconsistent": 1,
        "duplicate": 1,
    }


@pytest.mark.parametrize(
    ("response", "detail"),
    [
        ("   ", "step 1: empty response"),
        ("Silent", "step 1: the response is a silence token: 'Silent'"),
        (" silent. ", "step 1: the response is a silence token: ' silent. '"),
        ('"WAIT"', "step 1: the response is a silence token: '\"WAIT\"'"),
        ("<silent>!", "step 1: the response is a silence token: '<silent>!'"),
        # The tag counts are the whole row's: no step in the detail.
        ("See <video> here.", "1 <video> tags for 0 videos"),
        ("<image>", "7 <image> tags for 6 images"),
    ],
)
def test_malformed_responses(tmp_path: Path, response: str, detail: str) -> None:
    trajectory = make_trajectory(tmp_path, responses={1: (0, response)})
    assert malformed(trajectory) == detail
    assert [(d.reason, d.detail) for d in audit([trajectory]).dropped] == [("malformed", detail)]


def test_a_real_answer_is_not_a_silence_token() -> None:
    assert not is_silence_token("Silently, the cat leaves.")
    assert not is_silence_token("Wait for the second car.")
    assert is_silence_token("**Silent**")


def test_malformed_structure(tmp_path: Path) -> None:
    base = make_trajectory(tmp_path)
    assert malformed(base) is None
    assert (
        malformed(base.model_copy(update={"actions": base.actions[:2]}))
        == "2 actions for 3 segments"
    )
    assert (
        malformed(base.model_copy(update={"relevance": ((True, False), (False,), (False, False))}))
        == "relevance rows of [2, 1, 2] for 3 segments x 2 questions"
    )
    assert (
        malformed(
            replace_action(base, 1, Action(segment=1, decision="respond", question=2, response="x"))
        )
        == "step 1: a response to question 2 of 2"
    )
    assert (
        malformed(replace_action(base, 0, Action(segment=0, decision="silent", response="Hi")))
        == "step 0: a Silent action with a question or a response"
    )
    assert malformed(replace_segment(base, 2, frames=())) == "step 2: no frame"
    assert (
        malformed(replace_segment(base, 1, times_s=(4.0,))) == "step 1: 1 frame times for 2 frames"
    )
    assert malformed(base.model_copy(update={"segments": ()})) == "no segments"


def test_missing_frame_files(tmp_path: Path) -> None:
    trajectory = make_trajectory(tmp_path)
    gone = trajectory.segments[1].frames[1]
    assert malformed(trajectory, file_exists=lambda path: path != gone) == (
        f"step 1: frame file missing: {gone}"
    )
    Path(gone).unlink()  # the default looks at the file system
    result = audit([trajectory])
    assert [(d.reason, d.detail) for d in result.dropped] == [
        ("malformed", f"step 1: frame file missing: {gone}")
    ]


def test_temporally_inconsistent(tmp_path: Path) -> None:
    base = make_trajectory(tmp_path)  # relevant: q0 at step 1 only
    assert temporally_inconsistent(base) is None
    respond = Action(segment=2, decision="respond", question=0, response="Still red.")
    cases = {
        "step 2: responds to question 0, which is not relevant at this step": replace_action(
            base, 2, respond
        ),
        "step 1: Silent although question 0 is relevant": replace_action(
            base, 1, Action(segment=1, decision="silent")
        ),
        "step 0: the action is for segment 1": replace_action(
            base, 0, Action(segment=1, decision="silent")
        ),
        "step 1: responds to question 1, which no segment is relevant to": replace_action(
            base, 1, Action(segment=1, decision="respond", question=1, response="Nobody.")
        ),
        # Segment 1 reaching back into segment 0: its frames could come from step 0's time.
        "step 1: segment starts at 3s, before the last ends": replace_segment(base, 1, start_s=3.0),
        "step 2: segment ends at 8s, not after its start": replace_segment(base, 2, end_s=8.0),
        "step 1: segment numbered 2": replace_segment(base, 1, index=2),
        # A frame labelled with a later time than its step's: its label would lie.
        "step 1: frames at [8.0]s, outside its segment [4s, 8s)": replace_segment(
            base, 1, times_s=(4.0, 8.0)
        ),
    }
    for detail, trajectory in cases.items():
        assert malformed(trajectory) is None
        assert temporally_inconsistent(trajectory) == detail
    result = audit(list(cases.values()))
    assert result.counts()["temporally_inconsistent"] == len(cases) == len(result.dropped)


def test_near_identical_trajectories_are_duplicates(tmp_path: Path) -> None:
    first = make_trajectory(tmp_path, responses={1: (0, "The kettle is red.")})
    same_words = make_trajectory(
        tmp_path,
        questions=("what colour is the KETTLE", "Who enters the room?"),
        responses={1: (0, "the kettle is  red!")},
    )
    # Same video, different category and a different unasked question: still the same row.
    other_unasked = make_trajectory(
        tmp_path,
        category="IV",
        questions=("What colour is the kettle?", "Is the window open?"),
        responses={1: (0, "The kettle is red.")},
    )
    other_answer = make_trajectory(tmp_path, responses={1: (0, "The kettle is blue.")})
    other_timing = make_trajectory(
        tmp_path,
        relevance=((False, False), (False, False), (True, False)),
        responses={2: (0, "The kettle is red.")},
    )
    other_video = make_trajectory(tmp_path, video="hall", responses={1: (0, "The kettle is red.")})

    result = audit([first, same_words, other_unasked, other_answer, other_timing, other_video])
    assert result.kept == (first, other_answer, other_timing, other_video)
    assert [d.reason for d in result.dropped] == ["duplicate", "duplicate"]
    assert duplicate_key(first) == duplicate_key(same_words)


def test_same_video_by_another_path_is_a_duplicate(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = make_trajectory(tmp_path).model_copy(update={"video": str(tmp_path / "v.mp4")})
    second = first.model_copy(update={"video": "./sub/../v.mp4"})
    assert [d.reason for d in audit([first, second]).dropped] == ["duplicate"]


def test_a_dropped_trajectory_does_not_hide_a_later_copy(tmp_path: Path) -> None:
    broken = make_trajectory(tmp_path, responses={1: (0, "Silent.")})
    fixed = make_trajectory(tmp_path)
    assert audit([broken, fixed]).kept == (fixed,)


def test_normalise() -> None:
    assert normalise("  The KETTLE, is red!\n") == "the kettle is red"
    assert normalise("Two-thirds") == "two thirds"


def test_same_bytes_under_another_name_is_a_duplicate(tmp_path: Path) -> None:
    """A real copy (not a link: its own inode) of a PyAV video is the same video."""
    original, copy, other = tmp_path / "a.mp4", tmp_path / "copy of a.mp4", tmp_path / "b.mp4"
    write_video(original, seconds=4)
    shutil.copyfile(original, copy)
    write_video(other, seconds=5)
    assert os.stat(original).st_ino != os.stat(copy).st_ino
    digest = hashlib.sha256(original.read_bytes()).hexdigest()
    assert video_identity(str(copy)) == video_identity(str(original)) == f"sha256:{digest}"

    base = make_trajectory(tmp_path / "frames")
    named = [base.model_copy(update={"video": str(path)}) for path in (original, copy, other)]
    result = audit(named)
    assert [t.video for t in result.kept] == [str(original), str(other)]
    assert [(d.video, d.reason, d.detail) for d in result.dropped] == [
        (
            str(copy),
            "duplicate",
            f"a near-identical trajectory of {original}, the same video, was kept before",
        )
    ]
    assert result.counts()["duplicate"] == 1


def test_each_video_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest is remembered per version of the file (path, inode, size, times), as the
    frame cache's is: a second audit reads no video again."""
    monkeypatch.setattr(digest_module, "_digests", {})  # as in a new process
    monkeypatch.setattr(digest_module, "DIGEST_SETTLED_NS", -(10**12))  # seconds-old files
    read: list[str] = []
    hash_file = digest_module.file_sha256

    def counting(path: Path) -> str:
        read.append(Path(path).name)
        return hash_file(path)

    monkeypatch.setattr(digest_module, "file_sha256", counting)
    write_video(tmp_path / "a.mp4", seconds=4)
    shutil.copyfile(tmp_path / "a.mp4", tmp_path / "b.mp4")
    base = make_trajectory(tmp_path / "frames")
    named = [base.model_copy(update={"video": str(tmp_path / name)}) for name in ("a.mp4", "b.mp4")]
    first, second = audit(named), audit(named)
    assert first == second and [d.reason for d in first.dropped] == ["duplicate"]
    assert read == ["a.mp4", "b.mp4"]


def test_a_video_no_longer_there_is_told_apart_by_its_path(tmp_path: Path) -> None:
    assert video_identity("/videos/gone.mp4") == "path:/videos/gone.mp4"


@pytest.mark.parametrize(
    ("silent", "steps", "refused"),
    [
        (
            0,
            6,
            "the dataset's Silent share is 0.0% (0 of 6 steps), below the minimum 0.6 "
            "(--min-silent-share)",
        ),
        (
            5,
            9,
            "the dataset's Silent share is 55.6% (5 of 9 steps), below the minimum 0.6 "
            "(--min-silent-share)",
        ),
        (3, 5, None),  # 60%: the bounds are inclusive
        (19, 20, None),  # 95%
        (
            20,
            21,
            "the dataset's Silent share is 95.2% (20 of 21 steps), above the maximum 0.95 "
            "(--max-silent-share)",
        ),
    ],
)
def test_silent_share_bounds(tmp_path: Path, silent: int, steps: int, refused: str | None) -> None:
    # One trajectory: Silent first, then a response at every step (relevant from there on).
    relevance = tuple((step >= silent, False) for step in range(steps))
    trajectory = make_trajectory(tmp_path, relevance=relevance, per_segment=1)
    result = audit([trajectory], bounds=SilentShareBounds())
    assert result.kept == (trajectory,)
    assert result.refused == refused


def test_bounds_are_over_the_kept_trajectories(tmp_path: Path) -> None:
    """All respond (0% Silent) in one, a dropped all-Silent one does not make up for it;
    without bounds nothing is refused."""
    always = make_trajectory(tmp_path, video="always", relevance=((True, False), (False, True)))
    never = make_trajectory(tmp_path, video="never", relevance=((False, False),) * 8)
    result = audit([always, never], bounds=SilentShareBounds(min=0.5, max=1.0))
    assert [d.reason for d in result.dropped] == ["no_relevant_segment"]
    assert result.refused == (
        "the dataset's Silent share is 0.0% (0 of 2 steps), below the minimum 0.5 "
        "(--min-silent-share)"
    )
    assert audit([always, never]).refused is None
    assert audit([never], bounds=SilentShareBounds()).refused is None  # no step kept
