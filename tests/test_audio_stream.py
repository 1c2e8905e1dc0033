"""The Core streams a video's sound (issue 37): real H.264 + AAC videos written with PyAV,
adapters in their own processes, a real SQLite store. The same PCM bytes under both
pacings, no chunk before its time, silence for a video without sound, and a run that needs
sound refusing an adapter that cannot take it in one line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from streameval.core.benchmark.records import Benchmark, QARecord
from streameval.core.frames.audio_track import audio_track, decode_audio
from streameval.core.frames.digest import video_digest
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.core.streams.timeline import Timeline, TimelineItem, with_audio
from streameval.events import EventKind
from tests.sound_fixtures import TONE_HZ, write_sound_video
from tests.test_cli import streameval
from tests.test_core_run import events_by_session

RATE = 16_000
CHUNK_S = 0.5


def _record(record_id: str, video: str, question_t: float) -> QARecord:
    return QARecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="test",
        task_type="sound",
        video_path=video,
        question="What did you hear?",
        options=("A. a tone", "B. nothing"),
        answer="A",
        question_time_s=question_t,
        evidence_anchor_s=question_t,
        needs_audio=True,
    )


@pytest.fixture(scope="module")
def sound_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sound")
    write_sound_video(root / "tone.mp4", seconds=4, tone=(1.0, 2.0))
    write_sound_video(root / "mute.mp4", seconds=4, tone=None)
    records = [_record("tone", "tone.mp4", 3.2), _record("mute", "mute.mp4", 2.0)]
    benchmark = Benchmark(name="sound", version="1", video_root=".", records=records)
    path = root / "benchmark.json"
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path


def _run(benchmark: Path, tmp_path: Path, url: str, *extra: str) -> tuple[dict, Store]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{tmp_path / 's.db'}"
    ran = streameval(
        "run", "--adapter-url", url, "--benchmark", str(benchmark), "--cache-dir",
        str(tmp_path / "cache"), "--store", store, "--json", *extra,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout), Store(store, read_only=True)


def _expected_pcm(video: Path, chunks: range) -> bytes:
    track = decode_audio(video, RATE)
    return b"".join(track.chunk(index, CHUNK_S)[0] for index in chunks)


# ------------------------------------------------------------------ decoding


def test_the_tone_decodes_at_its_time_on_the_videos_clock(sound_benchmark: Path) -> None:
    track = decode_audio(sound_benchmark.parent / "tone.mp4", RATE)
    samples = np.frombuffer(track.pcm, dtype="<i2")
    loud = np.flatnonzero(np.abs(samples) > 3000)
    # AAC's priming is undone by the file's edit list: the tone starts and ends within 2 ms.
    assert abs(loud[0] / RATE - 1.0) < 0.002 and abs(loud[-1] / RATE - 2.0) < 0.002
    spectrum = np.abs(np.fft.rfft(samples[RATE + 800 : 2 * RATE - 800]))
    peak_hz = np.argmax(spectrum) * RATE / (RATE - 1600)
    assert abs(peak_hz - TONE_HZ) < 2
    assert track.has_sound and abs(track.samples / RATE - 4.0) < 0.05


def test_a_video_without_sound_has_silent_chunks(sound_benchmark: Path) -> None:
    track = decode_audio(sound_benchmark.parent / "mute.mp4", RATE)
    assert (track.has_sound, track.samples) == (False, 0)
    assert track.chunk(3, CHUNK_S) == (bytes(2 * 8000), True)


def test_the_track_is_cached_once_under_the_videos_digest(
    sound_benchmark: Path, tmp_path: Path
) -> None:
    video = sound_benchmark.parent / "tone.mp4"
    digest = video_digest(video)
    decoded = decode_audio(video, RATE)
    first = audio_track(tmp_path, video, digest, RATE)
    entry = tmp_path / digest[:2] / f"{digest}-audio-{RATE}hz"
    assert sorted(p.name for p in entry.iterdir()) == ["audio.json", "audio.pcm"]
    assert (first.pcm[:], first.has_sound) == (decoded.pcm, True)
    again = audio_track(tmp_path, video, digest, RATE)  # read back, not decoded again
    assert again.pcm[:] == decoded.pcm and again.chunk(2, CHUNK_S) == decoded.chunk(2, CHUNK_S)
    (entry / "audio.pcm").write_bytes(b"\x00\x00")  # damaged: rebuilt, never served
    assert audio_track(tmp_path, video, digest, RATE).pcm[:] == decoded.pcm


# ------------------------------------------------------------------ the timeline


def test_each_chunk_goes_out_before_the_first_item_at_or_after_its_end() -> None:
    items = (
        TimelineItem("frame", 2.0),
        TimelineItem("frame", 3.0),
        TimelineItem("question", 3.7),
    )
    played = with_audio(Timeline("r", "qa", items), CHUNK_S).items
    assert [(item.kind, item.t, item.chunk) for item in played] == [
        ("frame", 2.0, None),
        ("audio", 2.5, 4),
        ("audio", 3.0, 5),
        ("frame", 3.0, None),
        ("audio", 3.5, 6),
        ("question", 3.7, None),
    ]


# ------------------------------------------------------------------ end to end


def _audio_events(events: list) -> list:
    return [e for e in events if e.kind == EventKind.AUDIO_SENT]


def _answer(events: list) -> str:
    (final,) = [e.payload.text for e in events if e.kind == EventKind.RESPONSE_FINAL]
    return final


def test_both_pacings_deliver_the_same_bytes_never_before_their_time(
    sound_benchmark: Path, tmp_path: Path
) -> None:
    heard: dict[str, dict[str, str]] = {}
    with AdapterProcess("tests.sound_fixtures:ListeningAdapter") as adapter:
        for pacing in ("logical", "wall_clock"):
            folder = tmp_path / pacing
            summary, store = _run(
                sound_benchmark, folder, adapter.url, "--pacing", pacing, "--speed", "4"
            )
            assert (summary["finished"], summary["failed"]) == (2, 0)
            with store:
                config = store.get_run(summary["run_id"]).config
                events = events_by_session(store, summary["run_id"])
            assert config["modalities"] == ["video", "audio"]  # what the benchmark needs
            heard[pacing] = {sid: _answer(evs) for sid, evs in events.items()}
            _check_sent(events, pacing)
    assert heard["logical"] == heard["wall_clock"]
    tone = hashlib.sha256(_expected_pcm(sound_benchmark.parent / "tone.mp4", range(6))).hexdigest()
    mute = hashlib.sha256(bytes(2 * 8000 * 4)).hexdigest()
    assert heard["logical"] == {
        "tone": f"chunks=6 sha={tone} late=0",
        "mute": f"chunks=4 sha={mute} late=0",
    }


def _check_sent(events: dict[str, list], pacing: str) -> None:
    tone, mute = _audio_events(events["tone"]), _audio_events(events["mute"])
    assert [(e.payload.index, e.payload.start_t, e.payload.t) for e in tone] == [
        (k, k * CHUNK_S, (k + 1) * CHUNK_S) for k in range(6)
    ]
    assert {(e.payload.samples, e.payload.bytes, e.payload.sample_rate) for e in tone} == {
        (8000, 16000, RATE)
    }
    assert [e.payload.silent for e in tone] == [False] * 6
    assert [e.payload.silent for e in mute] == [True] * 4
    for session in events.values():
        _check_causal(session, pacing)
        workload = [e.payload for e in session if e.kind == EventKind.WORKLOAD]
        assert {(w.audio_seconds, w.audio_tokens) for w in workload} == {(0.5, 12)}
    if pacing == "logical":  # every chunk waited for its ack
        acks = [e.payload.index for e in events["tone"] if e.kind == EventKind.AUDIO_ACK]
        assert acks == list(range(6))


def _check_causal(session: list, pacing: str) -> None:
    """Each chunk went out after every item before its end and before the next one."""
    sent = [
        e
        for e in session
        if e.kind in (EventKind.AUDIO_SENT, EventKind.FRAME_SENT, EventKind.QUESTION_SENT)
    ]
    for position, event in enumerate(sent):
        if event.kind != EventKind.AUDIO_SENT:
            continue
        later = [e.payload.t for e in sent[position + 1 :] if e.kind != EventKind.AUDIO_SENT]
        assert later and event.payload.t <= later[0] + 1e-9
        if pacing == "wall_clock":
            assert event.payload.lag_ns >= 0 and event.payload.scheduled_ns is not None


def test_a_run_with_sound_refuses_a_deaf_adapter_in_one_line(
    sound_benchmark: Path, tmp_path: Path
) -> None:
    with AdapterProcess("tests.sound_fixtures:DeafAdapter") as adapter:
        store = f"sqlite:///{tmp_path / 's.db'}"
        refused = streameval(
            "run", "--adapter-url", adapter.url, "--benchmark", str(sound_benchmark),
            "--cache-dir", str(tmp_path / "cache"), "--store", store,
        )  # fmt: skip
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines()[-1] == (
            f"error: adapter deaf at {adapter.url}: the run streams audio (--modalities "
            "video,audio) and adapter deaf does not take audio (its hello declares none); "
            "run it with --modalities video to evaluate it without sound"
        )
        summary, opened = _run(
            sound_benchmark, tmp_path / "video", adapter.url, "--modalities", "video"
        )
    with opened:
        events = events_by_session(opened, summary["run_id"])
        assert opened.get_run(summary["run_id"]).config.get("modalities") is None  # video alone
    assert summary["finished"] == 2
    assert not any(_audio_events(evs) for evs in events.values())
    assert _answer(events["tone"]) == f"chunks=0 sha={hashlib.sha256().hexdigest()} late=0"


def test_modalities_without_video_is_one_error_line(sound_benchmark: Path, tmp_path: Path) -> None:
    refused = streameval(
        "run", "--adapter-url", "ws://127.0.0.1:9/ws", "--benchmark", str(sound_benchmark),
        "--modalities", "audio", "--store", f"sqlite:///{tmp_path / 's.db'}",
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip() == "error: --modalities takes video or video,audio, not 'audio'"


# ------------------------------------------------------------------ StreamingBench omni


def test_streamingbench_omni_source_tasks_need_their_sound() -> None:
    from streameval.core.benchmark.loader import import_path
    from tests.test_import_streamingbench import question_file

    records = import_path(question_file("omni")).benchmark.records
    assert [(r.task_type, r.needs_audio) for r in records] == [
        ("Anomaly Context Understanding", False),
        ("Emotion Recognition", True),
        ("Source Discrimination", True),
        ("Scene Understanding", True),
    ]


def test_a_streamingbench_omni_record_streams_with_its_sound(tmp_path: Path) -> None:
    from tests.test_import_streamingbench import question_file

    questions = tmp_path / "questions_omni.json"
    questions.write_text(question_file("omni").read_text())
    clip = tmp_path / "videos" / "sample_913_Source_Discrimination.mp4"
    write_sound_video(clip, seconds=46, tone=(40.0, 42.0), fps=2)  # asked at 0:00:45
    with AdapterProcess("tests.sound_fixtures:ListeningAdapter") as adapter:
        summary, store = _run(
            questions, tmp_path, adapter.url, "--task-type", "Source Discrimination"
        )
    with store:
        (events,) = events_by_session(store, summary["run_id"]).values()
    sent = _audio_events(events)
    # trace: frames from 10 s before the question (35 s) to it (45 s), the sound with them.
    assert [e.payload.index for e in sent] == list(range(70, 90))
    assert not any(e.payload.silent for e in sent)
    heard = hashlib.sha256(_expected_pcm(clip, range(70, 90))).hexdigest()
    assert _answer(events) == f"chunks=20 sha={heard} late=0"


def test_data_validate_warns_of_a_sound_task_on_a_silent_video(sound_benchmark: Path) -> None:
    root = str(sound_benchmark.parent)
    checked = streameval("data", "validate", str(sound_benchmark), "--video-root", root, "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["warnings"] == [
        "mute: needs sound, and its video mute.mp4 has none (a run streams silence)"
    ]
