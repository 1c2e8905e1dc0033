"""The synthetic benchmark with sound (`synthetic-av`, issue 37): the silent edition's
records and bytes kept, soundtracks whose decoded tones lie where the records say, sound
questions whose answers a listener finds exactly and a viewer only guesses."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from streameval.adapters.reference_audio import find_tones
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord
from streameval.core.benchmark.synthetic import (
    AUDIO_VISUAL,
    BEEP_FRAMES,
    FPS,
    PITCH_FRAMES,
    UNABLE,
    load_or_generate,
    write_video,
)
from streameval.core.benchmark.synthetic_sound import (
    BEEP_HZ,
    PITCHES_HZ,
    SAMPLE_RATE,
    Soundtrack,
    Tone,
    render_pcm,
)
from streameval.core.frames.audio_track import decode_audio
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind
from tests.test_cli import streameval
from tests.test_core_run import events_by_session

GUIDE = (Path(__file__).resolve().parent.parent / "docs" / "adapter-guide.md").read_text()
SECTION = GUIDE.split("## What synthetic-av adds: sound")[1].split("\n## ")[0]
SOUND_VIDEOS = ("videos/v7_beeps.mp4", "videos/v8_pitches.mp4", "videos/v9_beep_digits.mp4")
SOUND_TASKS = ("beep_count", "pitch_order", "beep_digit", "beep_onset")
ONSET_TOLERANCE_S = 0.002


@pytest.fixture(scope="module")
def silent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Benchmark]:
    # The folder test_synthetic.py generates into: one generation per test session.
    out = tmp_path_factory.getbasetemp() / "synthetic-seed-0"
    return out, load_or_generate(out, seed=0)


@pytest.fixture(scope="module")
def audio_visual(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Benchmark]:
    out = tmp_path_factory.getbasetemp() / "synthetic-av-seed-0"
    return out, load_or_generate(out, seed=0, edition=AUDIO_VISUAL)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _heard(video: Path) -> list[tuple[float, float]]:
    """(onset, pitch) of every tone the Core's decoding of `video` holds."""
    track = decode_audio(video, SAMPLE_RATE)
    pcm = np.frombuffer(track.pcm, dtype="<i2")
    return [(tone.onset_s, tone.hz) for tone in find_tones(pcm, SAMPLE_RATE)]


# ----------------------------------------------------------------------------- records


def test_the_silent_edition_is_kept_record_for_record_and_byte_for_byte(silent, audio_visual):
    silent_out, plain = silent
    av_out, with_sound = audio_visual
    assert (plain.name, with_sound.name) == ("synthetic", "synthetic-av")
    assert len(plain.records) == 20 and len(with_sound.records) == 29
    assert [r.model_dump() for r in with_sound.records[:20]] == [
        r.model_dump() for r in plain.records
    ]
    shared = {r.video_path for r in plain.records}
    assert {p: _sha(av_out / p) for p in shared} == {p: _sha(silent_out / p) for p in shared}
    assert {r.video_path for r in with_sound.records} - shared == set(SOUND_VIDEOS)
    assert not any(r.needs_audio for r in with_sound.records[:20])
    assert "needs_audio" not in plain.records[0].model_dump()  # dumps as before the field
    assert all(r.needs_audio for r in with_sound.records[20:])


def test_sound_questions_offer_four_answers_each_label_right_twice(audio_visual):
    _, benchmark = audio_visual
    sound = [r for r in benchmark.records if r.needs_audio]
    assert Counter(r.task_type for r in sound) == {
        "beep_onset": 1,
        "beep_count": 3,
        "pitch_order": 2,
        "beep_digit": 3,
    }
    questions = [r for r in sound if isinstance(r, QARecord)]
    for record in questions:
        labels = [option.split(". ", 1)[0] for option in record.options]
        texts = [option.split(". ", 1)[1] for option in record.options]
        assert labels == ["A", "B", "C", "D"] and len(set(texts)) == 4, record.record_id
        assert UNABLE not in texts
        assert record.evidence_anchor_s <= record.evidence_spans[0].end_s < record.question_time_s
    # A viewer who always picks one label scores exactly 1/4.
    assert Counter(r.answer for r in questions) == {"A": 2, "B": 2, "C": 2, "D": 2}
    pitches = [r for r in questions if r.task_type == "pitch_order"]
    assert {o.split(". ", 1)[1] for r in pitches for o in r.options} == {
        f"{hz} Hz" for hz in PITCHES_HZ
    }


def test_the_beep_onset_task_has_a_window_at_every_beep(audio_visual):
    _, benchmark = audio_visual
    (task,) = [r for r in benchmark.records if r.task_type == "beep_onset"]
    assert isinstance(task, ProactiveRecord) and task.video_path == SOUND_VIDEOS[0]
    tones = task.metadata["video"]["audio"]["tones"]
    assert [t.point_s for t in task.triggers] == [tone["onset_s"] for tone in tones]
    assert [t.point_s for t in task.triggers] == [5.0, 10.6, 18.0, 24.7, 32.1, 38.6]
    assert {t.answer for t in task.triggers} == {"beep"}
    points = [t.point_s for t in task.triggers]
    assert task.instruction_time_s + 3.0 <= points[0]
    assert min(b - a for a, b in zip(points, points[1:], strict=False)) >= 5.0  # windows apart


def test_the_guides_sound_section_is_what_the_generator_writes(audio_visual):
    _, benchmark = audio_visual
    sound = [r for r in benchmark.records if r.needs_audio]
    rows = re.findall(r"^\| `(\w+)` \| (\d+) \| (.*?) \|", SECTION, re.M)
    assert {task: int(count) for task, count, _ in rows} == dict(
        Counter(r.task_type for r in sound)
    )
    texts = {task: text for task, _, text in rows}
    for record in sound:
        text = record.question if isinstance(record, QARecord) else record.instruction
        assert text == texts[record.task_type]
    prose = " ".join(SECTION.split())
    windows = sum(len(r.triggers) for r in sound if isinstance(r, ProactiveRecord))
    assert f"(with seed 0, {windows} windows)" in prose
    assert "**beeps**: 1000 Hz, 0.3 s; **pitch tones**: 400, 800, 1600 or 3200 Hz, 0.4 s" in prose
    assert (BEEP_HZ, BEEP_FRAMES, PITCHES_HZ, PITCH_FRAMES) == (1000, 3, (400, 800, 1600, 3200), 4)


# ----------------------------------------------------------------------------- sound


def test_the_written_samples_decode_unchanged(tmp_path: Path):
    """PCM in MP4: the Core's decoding gives back every sample written, so a tone starts at
    its frame to the sample."""
    sound = Soundtrack((Tone(7, 3, 1000), Tone(13, 4, PITCHES_HZ[2])), noise_seed=5)
    pcm = render_pcm(sound, 20, FPS)
    path = tmp_path / "tones.mp4"
    write_video(path, 20, lambda frame: np.zeros((240, 320), np.uint8), pcm=pcm)
    track = decode_audio(path, SAMPLE_RATE)
    assert track.has_sound and track.pcm == pcm.astype("<i2").tobytes()
    heard = find_tones(pcm, SAMPLE_RATE)
    # The spectrum's peak bin: ~3 Hz wide over 0.3 s.
    assert np.abs(np.subtract([tone.hz for tone in heard], [1000, 1600])).max() < 5.0
    onsets = [tone.onset_s for tone in heard]
    assert np.abs(np.subtract(onsets, [0.7, 1.3])).max() < ONSET_TOLERANCE_S


def test_every_tone_is_heard_where_its_record_says(audio_visual):
    out, benchmark = audio_visual
    for video in SOUND_VIDEOS:
        (meta,) = {
            json.dumps(r.metadata["video"]) for r in benchmark.records if r.video_path == video
        }
        audio = json.loads(meta)["audio"]
        heard = _heard(out / video)
        assert len(heard) == len(audio["tones"]), video
        for (onset, hz), tone in zip(heard, audio["tones"], strict=True):
            assert abs(onset - tone["onset_s"]) < ONSET_TOLERANCE_S, (video, onset, tone)
            assert abs(hz - tone["hz"]) < 5.0, (video, hz, tone)
        track = decode_audio(out / video, SAMPLE_RATE)
        assert track.samples == round(json.loads(meta)["duration_s"] * SAMPLE_RATE)
    silent_video = out / "videos" / "v0_colours.mp4"
    assert not decode_audio(silent_video, SAMPLE_RATE).has_sound


# ----------------------------------------------------------------------------- end to end


def _scores(run: dict, store: str) -> tuple[tuple, tuple, float | None]:
    scored = streameval("score", run["run_id"], "--store", store, "--json")
    assert scored.returncode == 0, scored.stderr
    overall = json.loads(scored.stdout)["overall"]
    qa, proactive = overall["qa"]["accuracy"], overall["proactive"]
    window, miss = proactive["in_window_accuracy"], proactive["miss_rate"]
    return (
        (qa["value"], qa["population"]),
        (window["value"], miss["value"], window["population"]),
        proactive["false_alarm_rate"]["value"],
    )


def test_the_reference_adapter_hears_every_answer_and_guesses_without_sound(tmp_path: Path):
    store = f"sqlite:///{tmp_path / 's.db'}"
    tasks = [arg for task in SOUND_TASKS for arg in ("--task-type", task)]
    base = ["run", "--benchmark", "synthetic-av", *tasks, "--store", store, "--json"]
    with AdapterProcess("reference") as adapter:
        runs = {}
        for modalities in ("video,audio", "video"):
            ran = streameval(*base, "--adapter-url", adapter.url, "--modalities", modalities)
            assert ran.returncode == 0, ran.stderr
            runs[modalities] = json.loads(ran.stdout)
            assert (runs[modalities]["finished"], runs[modalities]["failed"]) == (9, 0)
    # Hearing: every sound question right, a "beep" in every beep's window and nowhere else.
    assert _scores(runs["video,audio"], store) == ((1.0, 8), (1.0, 0.0, 6), 0.0)
    with Store(store, read_only=True) as opened:
        sessions = events_by_session(opened, runs["video,audio"]["run_id"]).values()
    for events in sessions:
        chunks = [e.payload for e in events if e.kind == EventKind.AUDIO_SENT]
        heard = [e.payload.audio_seconds for e in events if e.kind == EventKind.WORKLOAD]
        assert chunks and not any(chunk.silent for chunk in chunks)
        assert [s for s in heard if s is not None] == [0.5] * len(chunks)
    # Frames alone: the first label of each question, right for 2 of the 8; never a beep.
    assert _scores(runs["video"], store) == ((0.25, 8), (0.0, 1.0, 6), None)
