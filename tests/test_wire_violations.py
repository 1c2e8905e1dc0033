"""An adapter that breaks the wire below the protocol's messages (RFC 6455 framing) or
lies in its hello: a real process speaking HTTP and WebSocket by hand (raw_ws_adapter.py)
against the Core's real run. Each is the adapter's fault, recorded once with a reason that
names it, and never retried as if the network had failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from streameval.adapters.sdk import MAX_CONDITIONS_BYTES
from streameval.child_process import module_command
from streameval.core.launch.adapter_process import AdapterProcess, AdapterProcessError
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.protocol import MAX_HELLO_BYTES, MAX_MESSAGE_BYTES
from tests.raw_ws_adapter import HELLOS, VIOLATIONS
from tests.test_core_run import execute, run_config
from tests.wire_adapters import HugeSettingsAdapter


class RawAdapterProcess(AdapterProcess):
    """tests/raw_ws_adapter.py as a child process, committing `behaviour`."""

    def command(self) -> list[str]:
        return module_command("tests.raw_ws_adapter", self.name)


def run_against(behaviour: str, benchmark_path: Path, tmp_path: Path, store: Store):
    with RawAdapterProcess(behaviour) as adapter:
        config = run_config(
            benchmark_path, tmp_path, adapter.url, tasks=["qa"], response_timeout_s=10.0
        )
        return execute(config, store)


def connections(log_dir: Path) -> int:
    return len((log_dir / "connections").read_text().splitlines())


@pytest.mark.parametrize("violation", sorted(VIOLATIONS))
def test_framing_violation_is_the_adapters_protocol_fault(
    violation, adapter_env, benchmark_path, tmp_path
):
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        summary = run_against(violation, benchmark_path, tmp_path, store)
        assert (summary.finished, summary.failed) == (0, 2)
        expected = (
            f"framing: adapter broke WebSocket framing (RFC 6455): {VIOLATIONS[violation][1]}"
        )
        for session in store.sessions(summary.run_id):
            assert (session.status, session.failure_stage) == ("failed", "protocol")
            assert session.failure_cause == "adapter"
            assert session.failure_reason == expected
            kinds = [e.kind for e in store.iter_events(summary.run_id, session.session_id)]
            assert kinds[0] == EventKind.ADAPTER_HELLO
            assert kinds[-1] == EventKind.SESSION_FAILED
    # One connection per session: none was retried as an infrastructure failure.
    assert connections(adapter_env) == 2


@pytest.mark.parametrize(
    ("behaviour", "named", "change"),
    [
        ("impostor", "someone-else 0", "adapter instant -> someone-else"),
        ("other_version", "instant 9.9", "adapter_version 0 -> 9.9"),
    ],
)
def test_a_hello_naming_another_adapter_than_its_info_is_refused(
    behaviour, named, change, adapter_env, benchmark_path, tmp_path
):
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        summary = run_against(behaviour, benchmark_path, tmp_path, store)
        assert (summary.finished, summary.failed) == (0, 2)
        expected = (
            f"identity: the hello names {named} (test) but the endpoint's /info named "
            f"instant 0 (test) ({change})"
        )
        for session in store.sessions(summary.run_id):
            assert (session.failure_stage, session.failure_cause) == ("handshake", "adapter")
            assert session.failure_reason == expected
            kinds = [e.kind for e in store.iter_events(summary.run_id, session.session_id)]
            assert EventKind.FRAME_SENT not in kinds  # refused before anything was streamed
    assert connections(adapter_env) == 2


def test_a_hello_over_its_size_limit_is_refused_before_it_is_stored(
    adapter_env, benchmark_path, tmp_path
):
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        summary = run_against("huge_settings", benchmark_path, tmp_path, store)
        assert (summary.finished, summary.failed) == (0, 2)
        size = len(HELLOS["huge_settings"])
        assert size > 7_000_000
        expected = (
            f"oversized: hello is {size} bytes, over the limit of {MAX_HELLO_BYTES} bytes "
            "(settings included)"
        )
        for session in store.sessions(summary.run_id):
            assert (session.failure_stage, session.failure_cause) == ("protocol", "adapter")
            assert session.failure_reason == expected
            assert session.adapter is None  # nothing of the hello is kept
            kinds = [e.kind for e in store.iter_events(summary.run_id, session.session_id)]
            assert kinds == [EventKind.SESSION_FAILED]
    assert connections(adapter_env) == 2


def test_an_sdk_adapter_with_oversized_conditions_does_not_start(adapter_env):
    with pytest.raises(AdapterProcessError) as refused:
        AdapterProcess("tests.wire_adapters:HugeSettingsAdapter").start()
    size = len(HugeSettingsAdapter.conditions.model_dump_json())
    assert (
        f"adapter HugeSettingsAdapter: its conditions are {size} bytes of JSON, over the limit "
        f"of {MAX_CONDITIONS_BYTES} (a hello carries at most {MAX_HELLO_BYTES} bytes"
    ) in str(refused.value)


def test_an_adapter_refusing_a_core_message_as_too_big_is_not_read_as_its_own(
    adapter_env, benchmark_path, tmp_path
):
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        summary = run_against("refuses_as_too_big", benchmark_path, tmp_path, store)
        assert (summary.finished, summary.failed) == (0, 2)
        expected = (
            "adapter refused a message of the Core as too big (code 1009); the protocol "
            f"allows {MAX_MESSAGE_BYTES} bytes"
        )
        for session in store.sessions(summary.run_id):
            assert (session.failure_stage, session.failure_cause) == ("streaming", "adapter")
            assert session.failure_reason == expected
    assert connections(adapter_env) == 2
