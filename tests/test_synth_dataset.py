"""Stage 5 of `streameval synth`: hand-made trajectories written as an ms-swift dataset
(checked against a schema of its documented format), summarised in summary.json and shown
in report.html."""

from __future__ import annotations

import hashlib
import json
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
from PIL import Image

from streameval.adapters.chat_prompts import FRAME_LABEL
from streameval.synth.dataset import DATASET_FILE, dataset_row, write_dataset
from streameval.synth.filters import SilentShareBounds
from streameval.synth.models import Action, Segment, SynthQuestion, Trajectory
from streameval.synth.summary import REPORT_FILE, SUMMARY_FILE, Summary, write_stage5

SCHEMA = json.loads(
    (Path(__file__).parent / "schemas" / "ms_swift_dataset.schema.json").read_text()
)
SEGMENT_S = 4.0


def make_frames(folder: Path, video: str, segments: int, per_segment: int) -> list[list[str]]:
    """Real JPEG files, `per_segment` per segment, named after the video."""
    folder.mkdir(parents=True, exist_ok=True)
    frames = []
    for t in range(segments):
        paths = []
        for i in range(per_segment):
            path = folder / f"{video}-{t}-{i}.jpg"
            Image.new("RGB", (8, 8), (40 * t, 10 * i, 0)).save(path, format="JPEG")
            paths.append(str(path))
        frames.append(paths)
    return frames


def make_trajectory(
    folder: Path,
    *,
    video: str = "kitchen",
    category: str = "AM",
    questions: tuple[str, ...] = ("What colour is the kettle?", "Who enters the room?"),
    relevance: tuple[tuple[bool, ...], ...] = ((False, False), (True, False), (False, False)),
    responses: dict[int, tuple[int, str]] | None = None,
    per_segment: int = 2,
) -> Trajectory:
    """A trajectory as the roll-out makes it: Silent where nothing is relevant, else a
    response (by default "Answer to q<k>." for the first relevant question)."""
    frames = make_frames(folder, video, len(relevance), per_segment)
    actions = []
    for t, row in enumerate(relevance):
        if responses is not None and t in responses:
            question, text = responses[t]
            actions.append(Action(segment=t, decision="respond", question=question, response=text))
        elif any(row):
            k = row.index(True)
            actions.append(
                Action(segment=t, decision="respond", question=k, response=f"Answer to q{k}.")
            )
        else:
            actions.append(Action(segment=t, decision="silent"))
    return Trajectory(
        video=f"/videos/{video}.mp4",
        duration_s=SEGMENT_S * len(relevance) + 1.5,
        category=category,
        questions=tuple(SynthQuestion(index=k, text=text) for k, text in enumerate(questions)),
        segments=tuple(
            Segment(
                index=t,
                start_s=SEGMENT_S * t,
                end_s=SEGMENT_S * (t + 1),
                frames=tuple(paths),
                times_s=tuple(SEGMENT_S * t + 2.0 * i for i in range(len(paths))),
            )
            for t, paths in enumerate(frames)
        ),
        relevance=relevance,
        actions=tuple(actions),
    )


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_row_is_one_conversation_per_video_with_a_turn_per_step(tmp_path: Path) -> None:
    trajectory = make_trajectory(tmp_path / "frames")
    result = write_dataset([trajectory], tmp_path / "out")

    frames = [
        str((tmp_path / "frames" / f"kitchen-{t}-{i}.jpg").resolve())
        for t in range(3)
        for i in range(2)
    ]
    assert read_rows(tmp_path / "out" / DATASET_FILE) == [
        {
            "messages": [
                {
                    "role": "user",
                    # Question 1 has no relevant segment: unanswerable, not asked.
                    "content": "<image><image>Questions about this live video:\n"
                    "1. What colour is the kettle?",
                },
                {"role": "assistant", "content": "Silent"},
                {"role": "user", "content": "<image><image>"},
                {"role": "assistant", "content": "Answer to q0."},
                {"role": "user", "content": "<image><image>"},
                {"role": "assistant", "content": "Silent"},
            ],
            "images": frames,
        }
    ]
    assert (result.rows, result.steps, result.images) == (1, 3, 6)
    assert result.path == tmp_path / "out" / DATASET_FILE
    data = (tmp_path / "out" / DATASET_FILE).read_bytes()
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [DATASET_FILE]


def test_time_labels_precede_each_frame_when_asked(tmp_path: Path) -> None:
    """The harness's frame label, each frame's time in the video: off by default."""
    trajectory = make_trajectory(tmp_path / "frames")  # frames at 0 2 | 4 6 | 8 10 s
    labelled = write_dataset([trajectory], tmp_path / "labelled", frame_label=FRAME_LABEL)
    plain = write_dataset([trajectory], tmp_path / "plain")

    (row,) = read_rows(labelled.path)
    assert [m["content"] for m in row["messages"] if m["role"] == "user"] == [
        "Frame at 0s:<image>Frame at 2s:<image>Questions about this live video:\n"
        "1. What colour is the kettle?",
        "Frame at 4s:<image>Frame at 6s:<image>",
        "Frame at 8s:<image>Frame at 10s:<image>",
    ]
    (unlabelled,) = read_rows(plain.path)
    assert "Frame at" not in plain.path.read_text()
    assert row["images"] == unlabelled["images"]
    assert [m for m in row["messages"] if m["role"] == "assistant"] == [
        m for m in unlabelled["messages"] if m["role"] == "assistant"
    ]
    jsonschema.validate(row, SCHEMA)


def test_no_turn_sees_a_frame_after_its_step(tmp_path: Path) -> None:
    """The images before assistant turn t are exactly the frames of segments 0..t."""
    trajectory = make_trajectory(
        tmp_path, relevance=((False, True), (True, False), (False, False), (True, True))
    )
    row = dataset_row(trajectory)
    users = row["messages"][0::2]
    assert [m["role"] for m in users] == ["user"] * 4
    for step in range(4):
        seen = sum(m["content"].count("<image>") for m in users[: step + 1])
        before = [Path(image).name for image in row["images"][:seen]]
        allowed = [Path(f).name for s in trajectory.segments[: step + 1] for f in s.frames]
        assert before == allowed
    assert seen == len(row["images"]) == 8


def test_every_row_validates_against_the_ms_swift_schema(tmp_path: Path) -> None:
    trajectories = [
        make_trajectory(tmp_path, video="a"),
        make_trajectory(
            tmp_path, video="b", per_segment=1, relevance=((True, True), (False, True))
        ),
    ]
    write_dataset(trajectories, tmp_path / "out", system_prompt="You watch a live video.")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    validator.check_schema(SCHEMA)
    rows = read_rows(tmp_path / "out" / DATASET_FILE)
    assert len(rows) == 2
    for row in rows:
        validator.validate(row)
        assert row["messages"][0] == {"role": "system", "content": "You watch a live video."}
        text = "".join(message["content"] for message in row["messages"])
        assert text.count("<image>") == len(row["images"])
        assert all(Path(image).is_absolute() and Path(image).is_file() for image in row["images"])
    assert [m["role"] for m in rows[1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda row: row.update(label=True), "Additional properties"),
        (
            lambda row: row["messages"].append({"role": "system", "content": "late"}),
            "'system' is not one of",
        ),
        (lambda row: row["messages"][1].update(content=None), "None is not of type 'string'"),
        (lambda row: row.update(images=["/a.jpg", 3]), "3 is not of type 'string'"),
        (lambda row: row.pop("messages"), "'messages' is a required property"),
    ],
)
def test_schema_rejects_rows_outside_the_documented_format(
    tmp_path: Path, change, error: str
) -> None:
    row = dataset_row(make_trajectory(tmp_path))
    jsonschema.validate(row, SCHEMA)
    change(row)
    with pytest.raises(jsonschema.ValidationError, match=error):
        jsonschema.validate(row, SCHEMA)


def test_write_dataset_refuses_a_media_tag_in_a_models_text(tmp_path: Path) -> None:
    trajectory = make_trajectory(tmp_path, responses={1: (0, "It is red <image>")})
    with pytest.raises(ValueError, match=r"kitchen.mp4: 7 <image> tags for 6 images"):
        write_dataset([trajectory], tmp_path / "out")
    assert not (tmp_path / "out" / DATASET_FILE).exists()


# ----------------------------------------------------------------------- summary and report


# stage5_inputs' kept videos respond at 5 of their 9 steps: below the default bounds.
BOUNDS = SilentShareBounds(min=0.4, max=0.95)


def stage5_inputs(folder: Path) -> list[Trajectory]:
    """Three kept videos (one with a question answered twice, one with an unanswerable
    question), one all-Silent, one malformed, one duplicate."""
    return [
        make_trajectory(folder, video="kitchen"),  # IV 3 steps, 1 response
        make_trajectory(
            folder,
            video="street",
            category="TA",
            relevance=((True, False), (True, True), (False, True), (False, False)),
            responses={1: (0, "Two cars.")},
        ),  # 4 steps: q0 at 0 and 1, q1 at 2
        make_trajectory(
            folder,
            video="garden",
            category="TA",
            relevance=((False,), (True,)),
            questions=("Is it raining?",),
        ),
        make_trajectory(folder, video="empty", relevance=((False, False),)),
        make_trajectory(folder, video="broken", responses={1: (0, "  ")}),
        make_trajectory(folder, video="kitchen"),
    ]


def test_summary_counts_are_exact(tmp_path: Path) -> None:
    summary = write_stage5(stage5_inputs(tmp_path / "frames"), tmp_path / "out", bounds=BOUNDS)

    written = Summary.model_validate_json((tmp_path / "out" / SUMMARY_FILE).read_text())
    assert written == summary
    data = json.loads((tmp_path / "out" / SUMMARY_FILE).read_text())
    dataset_path = tmp_path / "out" / DATASET_FILE
    assert data["dataset"] == {
        "path": str(dataset_path),
        "sha256": hashlib.sha256(dataset_path.read_bytes()).hexdigest(),
        "rows": 3,
        "steps": 9,
        "images": 18,
    }
    assert data["videos"] == {
        "received": 6,
        "kept": 3,
        "dropped": 3,
        "dropped_by_reason": {
            "no_relevant_segment": 1,
            "malformed": 1,
            "temporally_inconsistent": 0,
            "duplicate": 1,
        },
    }
    assert data["categories"] == {"IV": 0, "MD": 0, "TA": 2, "AM": 1, "DED": 0}
    # durations: 3, 4 and 2 segments of 4 s, each video 1.5 s longer than its segments
    assert data["video_duration_s"] == {
        "count": 3,
        "total": 40.5,
        "mean": 13.5,
        "min": 9.5,
        "max": 17.5,
    }
    assert data["trajectory_duration_s"] == {
        "count": 3,
        "total": 36.0,
        "mean": 12.0,
        "min": 8.0,
        "max": 16.0,
    }
    # Counts stay integers (as typed: json.dumps tells 9 from 9.0).
    assert json.dumps(data["trajectory_steps"]) == (
        '{"count": 3, "total": 9, "mean": 3.0, "min": 2, "max": 4}'
    )
    # actions: kitchen S R S, street R R R S, garden S R
    # Silent shares: kitchen 2/3, street 1/4, garden 1/2
    assert data["actions"] == {
        "steps": 9,
        "silent": 4,
        "respond": 5,
        "silent_share": 0.4444,
        "silent_share_min": 0.4,
        "silent_share_max": 0.95,
        "silent_share_per_trajectory": {
            "count": 3,
            "total": 1.417,
            "mean": 0.4722,
            "min": 0.25,
            "max": 0.667,
        },
    }
    assert (data["format"], data["refused"]) == ("streameval-synth-summary/2", None)
    # asked: kitchen q0 (1 response), street q0 (2) and q1 (1), garden q0 (1); kitchen's q1 left out
    assert data["questions"] == {
        "generated": 5,
        "asked": 4,
        "responses_per_question": {"count": 4, "total": 5, "mean": 1.25, "min": 1, "max": 2},
        "responses_histogram": {"1": 3, "2": 1},
    }
    assert data["dropped"] == [
        {
            "video": "/videos/empty.mp4",
            "reason": "no_relevant_segment",
            "detail": "no segment is relevant to any question",
        },
        {"video": "/videos/broken.mp4", "reason": "malformed", "detail": "step 1: empty response"},
        {
            "video": "/videos/kitchen.mp4",
            "reason": "duplicate",
            "detail": "a near-identical trajectory of this video was kept before",
        },
    ]
    assert len(read_rows(dataset_path)) == 3


def test_summary_of_nothing_kept(tmp_path: Path) -> None:
    summary = write_stage5(
        [make_trajectory(tmp_path, relevance=((False, False),))], tmp_path / "out"
    )
    assert (summary.videos.kept, summary.dataset.rows, summary.actions.silent_share) == (0, 0, None)
    assert summary.video_duration_s.model_dump() == {
        "count": 0,
        "total": 0,
        "mean": None,
        "min": None,
        "max": None,
    }
    assert (tmp_path / "out" / DATASET_FILE).read_text() == ""
    page = Page()
    page.feed((tmp_path / "out" / REPORT_FILE).read_text(encoding="utf-8"))
    assert ["kept", "0", "0.0%"] in page.rows
    assert ["Silent", "0", "0.0%"] in page.rows


def test_a_dataset_out_of_bounds_is_refused_and_not_written(tmp_path: Path) -> None:
    """Every step responds (a model that calls every segment relevant): the summary and
    the report say so, train.jsonl is not written, and an earlier run's is removed."""
    out = tmp_path / "out"
    out.mkdir()
    (out / DATASET_FILE).write_text('{"earlier": "run"}\n')
    (out / "trajectories.jsonl").write_text("kept\n")
    always = [
        make_trajectory(tmp_path / "frames", video=name, relevance=((True, False), (True, True)))
        for name in ("a", "b")
    ]
    summary = write_stage5(always, out)

    refusal = (
        "the dataset's Silent share is 0.0% (0 of 4 steps), below the minimum 0.6 "
        "(--min-silent-share)"
    )
    assert (summary.refused, summary.dataset) == (refusal, None)
    assert (summary.videos.kept, summary.actions.steps, summary.actions.silent_share) == (2, 4, 0.0)
    assert (summary.actions.silent_share_min, summary.actions.silent_share_max) == (0.6, 0.95)
    assert not (out / DATASET_FILE).exists()
    assert (out / "trajectories.jsonl").read_text() == "kept\n"
    assert Summary.model_validate_json((out / SUMMARY_FILE).read_text()) == summary
    html = (out / REPORT_FILE).read_text(encoding="utf-8")
    assert f"<strong>Refused, not written:</strong> {escape(refusal)}." in html
    assert "<p>Silent share: 0.0% (bounds 60% to 95%)</p>" in html

    # Bounds that admit it write it.
    admitted = write_stage5(always, out, bounds=SilentShareBounds(min=0.0, max=0.95))
    assert admitted.refused is None and admitted.dataset is not None
    assert admitted.dataset.rows == len(read_rows(out / DATASET_FILE)) == 2


class Page(HTMLParser):
    """The report's headings and table rows as text, and every element's tag."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.headings: list[str] = []
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "h2":
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "h2" and self._heading is not None:
            self.headings.append("".join(self._heading))
            self._heading = None

    def handle_data(self, data: str) -> None:
        for part in (self._cell, self._heading):
            if part is not None:
                part.append(data)


def test_report_shows_the_summary(tmp_path: Path) -> None:
    inputs = stage5_inputs(tmp_path / "frames")
    # A file name with markup in it must come out as text.
    inputs[4] = inputs[4].model_copy(update={"video": "/videos/<b>broken</b> & co.mp4"})
    summary = write_stage5(inputs, tmp_path / "out", bounds=BOUNDS)

    html = (tmp_path / "out" / REPORT_FILE).read_text(encoding="utf-8")
    page = Page()
    page.feed(html)
    page.close()
    assert page.headings == [
        "Dataset",
        "Videos",
        "Categories (kept videos)",
        "Actions",
        "Durations",
        "Questions",
        "Dropped videos",
    ]
    rows = page.rows
    assert ["sha256", summary.dataset.sha256] in rows
    assert ["steps (assistant turns)", "9"] in rows
    assert ["received", "6", ""] in rows
    assert ["kept", "3", "50.0%"] in rows
    assert ["dropped: no relevant segment", "1", "16.7%"] in rows
    assert ["dropped: temporally inconsistent", "0", "0.0%"] in rows
    assert ["TA (Temporal Aggregation)", "2", "66.7%"] in rows
    assert ["DED (Dynamic Event Description)", "0", "0.0%"] in rows
    assert ["Silent", "4", "44.4%"] in rows
    assert ["respond", "5", "55.6%"] in rows
    assert "<p>Silent share: 44.4% (bounds 40% to 95%)</p>" in html
    assert ["Silent share per trajectory", "3", "1.417", "0.4722", "0.25", "0.667"] in rows
    assert ["video duration (s)", "3", "40.5", "13.5", "9.5", "17.5"] in rows
    assert ["steps per trajectory", "3", "9", "3.0", "2", "4"] in rows
    assert ["responses per asked question", "4", "5", "1.25", "1", "2"] in rows
    assert ["2", "1", "25.0%"] in rows
    assert ["/videos/<b>broken</b> & co.mp4", "malformed", "step 1: empty response"] in rows
    assert "b" not in page.tags  # escaped, not markup
    assert "script" not in page.tags and "http" not in html  # nothing to run or fetch
