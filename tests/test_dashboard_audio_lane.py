"""The record timeline's audio lane in a real headless browser (tests/browser.py): the
results API served by `streameval results-api` (a real uvicorn process) over a SQLite store
holding a run with sound (tests/test_audio_timeline.py): one bar per audio chunk sent at its
span of video time, hollow and dashed for the silent ones, the record's sound events above
them; a record without sound has no audio lane. Screenshots land in tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from streameval.core.store.store import Store
from tests.browser import chromium, require_browser, watched_page
from tests.servers import served, streameval_command
from tests.test_audio_timeline import store_heard_run

require_browser()
pytestmark = pytest.mark.timeout(180)

from tests.test_dashboard_browser import axis_of, open_page, screenshot  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('audio-lane') / 'store.db'}"
    with Store(url) as store:
        store_heard_run(store)
    with served(streameval_command("results-api", "--store", url, "--port", "0")) as api:
        yield api.url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser, server: str) -> Iterator[object]:
    with watched_page(browser) as opened:  # a policy violation fails the test
        yield opened


def timeline_of(server: str, record_id: str) -> dict:
    return httpx.get(f"{server}/runs/run-a/records/{record_id}/timeline", timeout=60).json()


def test_the_audio_lane_draws_each_chunk_over_its_span_and_the_sound_events(page, server):
    timeline = timeline_of(server, "beeps")
    open_page(page, server, "#/runs/run-a/records/beeps")
    figure = page.locator("svg.timeline")
    x_of = axis_of(figure)
    assert figure.locator('rect.lane[data-lane="audio"]').count() == 1
    bars = figure.locator("rect.audio-chunk")
    assert bars.count() == len(timeline["audio"]) == 6
    for i, chunk in enumerate(timeline["audio"]):
        bar = bars.nth(i)
        assert float(bar.get_attribute("x")) == pytest.approx(x_of(chunk["start_t"]), abs=0.01)
        width = x_of(chunk["t"]) - x_of(chunk["start_t"]) - 1
        assert float(bar.get_attribute("width")) == pytest.approx(width, abs=0.01)
        assert bar.get_attribute("data-index") == str(chunk["index"])
        kind = "silent" if chunk["silent"] else "heard"
        assert bar.get_attribute("class") == f"audio-chunk {kind}"
        assert bar.get_attribute("data-silent") == str(chunk["silent"]).lower()
    # Silent chunks are hollow and dashed; heard ones filled.
    assert figure.locator("rect.audio-chunk.silent").count() == 2
    silent = figure.locator("rect.audio-chunk.silent").first
    assert (silent.get_attribute("fill"), silent.get_attribute("stroke-dasharray")) == (
        "#ffffff",
        "3 2",
    )
    assert figure.locator("rect.audio-chunk.heard").first.get_attribute("fill") == "#3949ab"
    assert "sent at 0.013 s" in figure.locator("rect.audio-chunk").nth(4).text_content()
    events = figure.locator("rect.sound-event")
    assert events.count() == 2
    for i, event in enumerate(timeline["sound_events"]):
        rect = events.nth(i)
        assert float(rect.get_attribute("x")) == pytest.approx(x_of(event["start_s"]), abs=0.01)
        width = x_of(event["end_s"]) - x_of(event["start_s"])
        assert float(rect.get_attribute("width")) == pytest.approx(width, abs=0.01)
    # The sound events sit above the chunks, inside the lane.
    lane = figure.locator('rect.lane[data-lane="audio"]')
    top = float(lane.get_attribute("y"))
    bottom = top + float(lane.get_attribute("height"))
    event_y = float(events.first.get_attribute("y"))
    bar_y = float(bars.first.get_attribute("y"))
    assert top < event_y < bar_y < bottom
    legend = figure.text_content()
    for label in (
        "audio chunk sent",
        "audio chunk sent (video without sound: zeros)",
        "sound event (ground truth)",
    ):
        assert label in legend
    screenshot(page.locator(".timeline-box"), "record-timeline-audio.png")


def test_chunks_without_named_sounds_and_a_record_without_sound(page, server):
    open_page(page, server, "#/runs/run-a/records/plain")
    figure = page.locator("svg.timeline")
    assert figure.locator("rect.audio-chunk.heard").count() == 2
    assert figure.locator("rect.sound-event").count() == 0
    assert "sound event" not in figure.text_content()
    open_page(page, server, "#/runs/run-a/records/mute")
    figure = page.locator("svg.timeline")
    assert figure.locator('rect.lane[data-lane="audio"]').count() == 0
    assert figure.locator("rect.audio-chunk").count() == 0
    assert figure.locator('rect.lane[data-lane="frames"]').count() == 1
