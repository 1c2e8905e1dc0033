"""Read-only means read-only: `streameval score`, `export` and the results API read a store on
read-only media (a chmod 0555 folder holding a chmod 0444 file, and a read-only frame cache)
and create nothing: no migration, no WAL or shared-memory file, no frame written.

As root, permission bits bind nobody; the readers then run without CAP_DAC_OVERRIDE
(setpriv), so the kernel enforces the bits on them as on any user.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.light import OlderSchema, schema_versions
from streameval.core.store.store import Store, StoreError
from tests.faults import cli, free_port, unprivileged

pytestmark = pytest.mark.timeout(240)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` with its size and modification time."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns)
    return found


def make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        mode = 0o555 if path.is_dir() else 0o444
        path.chmod(mode)


def make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.fixture
def stored_run(adapter_env: Path, benchmark_path: Path, tmp_path: Path) -> Iterator[dict]:
    """A finished run in tmp_path/media (store and frame cache), then made read-only."""
    media = tmp_path / "media"
    (media / "db").mkdir(parents=True)
    url = f"sqlite:///{media / 'db' / 's.db'}"
    with AdapterProcess("tests.wire_adapters:InstantAdapter") as adapter:
        done = subprocess.run(
            cli(
                "run",
                "--adapter-url",
                adapter.url,
                "--benchmark",
                str(benchmark_path),
                "--store",
                url,
                "--cache-dir",
                str(media / "cache"),
                "--json",
            ),
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    # What a read-write reader reports, to compare the read-only readers with.
    scored = subprocess.run(
        cli("score", run_id, "--json", "--store", url), capture_output=True, text=True
    )
    assert scored.returncode == 0, scored.stderr
    make_read_only(media)
    try:
        yield {"url": url, "run_id": run_id, "media": media, "scores": json.loads(scored.stdout)}
    finally:
        make_writable(media)


def test_score_and_export_read_a_store_on_read_only_media(stored_run: dict) -> None:
    media, url, run_id = stored_run["media"], stored_run["url"], stored_run["run_id"]
    before = tree(media)
    assert sorted(os.listdir(media / "db")) == ["s.db"]  # the Core closed it cleanly

    scored = subprocess.run(
        unprivileged(cli("score", run_id, "--json", "--store", url)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout) == stored_run["scores"]

    exported = subprocess.run(
        unprivileged(cli("export", run_id, "--store", url, "-o", "-")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert lines[0]["type"] == "run" and lines[0]["run_id"] == run_id
    assert sum(line["type"] == "event" for line in lines) > 0

    assert tree(media) == before  # nothing created, nothing written


def test_a_read_only_store_is_not_created_and_refuses_writes(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "s.db"
    scored = subprocess.run(
        cli("score", "r1", "--store", f"sqlite:///{missing}"), capture_output=True, text=True
    )
    assert scored.returncode == 2
    assert scored.stderr.strip().splitlines() == [
        f"error: no store at {missing} (the file does not exist; a read-only command does not "
        "create one: check the path, or run first)"
    ]
    assert not missing.parent.exists()

    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store(url) as store:
        store.create_run("r1", "synthetic", {"profile": "trace"})
    with Store(url, read_only=True) as store:
        assert store.read_only and store.get_run("r1").status == "created"
        with pytest.raises(StoreError, match="attempt to write a readonly database"):
            store.set_run_status("r1", "running")
    assert sorted(os.listdir(tmp_path)) == ["s.db"]


def test_a_read_only_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(f"sqlite:///{path}"):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    conn.close()
    older = r"has schema version 0001, older than this streameval's \d{4}; upgrade it once with"
    with pytest.raises(OlderSchema, match=older):
        Store(f"sqlite:///{path}", read_only=True)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.close()
    newer = "has schema version 9999, which this streameval .* does not know: a newer streameval"
    with pytest.raises(StoreError, match=newer) as refused:
        Store(f"sqlite:///{path}", read_only=True)
    assert not isinstance(refused.value, OlderSchema)
    # Not a store at all: one line, nothing written into it.
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    with pytest.raises(StoreError, match="is not a streameval store"):
        Store(f"sqlite:///{other}", read_only=True)
    assert other.stat().st_size == 0


def serve_results_api(url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        unprivileged(cli("results-api", "--store", url, "--port", str(port))),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, server.communicate()[1]
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return server, base
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the results API did not start"
        time.sleep(0.1)


def stop(server: subprocess.Popen) -> str:
    server.terminate()
    _, stderr = server.communicate(timeout=30)
    return stderr


def test_the_results_api_serves_read_only_media_and_never_writes_frames(
    stored_run: dict,
) -> None:
    media, url, run_id = stored_run["media"], stored_run["url"], stored_run["run_id"]
    record_id = "t:qa:1"
    before = tree(media)
    server, base = serve_results_api(url)
    try:
        assert httpx.get(f"{base}/runs").json()["total"] == 1
        metrics = httpx.get(f"{base}/runs/{run_id}/metrics", timeout=60)
        assert metrics.status_code == 200, metrics.text
        index = httpx.get(f"{base}/runs/{run_id}/records/{record_id}/frames").json()
        assert index["available"] is True and len(index["frames"]) > 0
        frame = httpx.get(f"{base}/runs/{run_id}/records/{record_id}/frames/0")
        assert frame.status_code == 200 and frame.content[:2] == b"\xff\xd8"  # a JPEG
    finally:
        stop(server)
    assert tree(media) == before

    # The cache lost its entries: the API says so and decodes nothing into the cache.
    make_writable(media)
    frames_dir = media / "cache" / "frames"
    for entry in frames_dir.iterdir():
        subprocess.run(["rm", "-rf", str(entry)], check=True)
    make_read_only(media)
    before = tree(media)
    server, base = serve_results_api(url)
    try:
        index = httpx.get(f"{base}/runs/{run_id}/records/{record_id}/frames").json()
        assert index["available"] is False and index["frames"] == []
        assert "not in the frame cache" in index["reason"]
        frame = httpx.get(f"{base}/runs/{run_id}/records/{record_id}/frames/0")
        assert frame.status_code == 404
        assert frame.json() == {"detail": f"frame 0 of record {record_id!r} is not available"}
    finally:
        stderr = stop(server)
    assert "Traceback" not in stderr
    assert tree(media) == before


def test_runs_lists_a_store_on_read_only_media(stored_run: dict) -> None:
    """`streameval runs` and `runs RUN_ID` read the store as `score` does: nothing written."""
    media, url, run_id = stored_run["media"], stored_run["url"], stored_run["run_id"]
    before, content = tree(media), (media / "db" / "s.db").read_bytes()

    listed = subprocess.run(
        unprivileged(cli("runs", "--store", url, "--json")), capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert [(run["run_id"], run["status"]) for run in json.loads(listed.stdout)] == [
        (run_id, "finished")
    ]
    sessions = subprocess.run(
        unprivileged(cli("runs", run_id, "--store", url, "--json")), capture_output=True, text=True
    )
    assert sessions.returncode == 0, sessions.stderr
    assert {row["status"] for row in json.loads(sessions.stdout)} == {"finished"}
    assert len(json.loads(sessions.stdout)) == stored_run["scores"]["sessions"]["finished"]
    table = subprocess.run(
        unprivileged(cli("runs", "--store", url)), capture_output=True, text=True
    )
    assert table.returncode == 0 and run_id in table.stdout, table.stderr

    assert sorted(os.listdir(media / "db")) == ["s.db"]  # no -wal, -shm or -journal file
    assert (media / "db" / "s.db").read_bytes() == content
    assert tree(media) == before


def test_runs_refuses_an_older_store_on_read_only_media_in_one_line(tmp_path: Path) -> None:
    """The listing never migrates on its own: an older store is one line, not a failed write."""
    from tests.test_runs_listing import alembic_upgrade

    media = tmp_path / "media"
    media.mkdir()
    alembic_upgrade(media / "old.db", schema_versions()[-2])
    content = (media / "old.db").read_bytes()
    make_read_only(media)
    try:
        for args in (["runs"], ["runs", "r1"]):
            refused = subprocess.run(
                unprivileged(cli(*args, "--store", str(media / "old.db"))),
                capture_output=True,
                text=True,
            )
            assert refused.returncode == 2
            assert refused.stderr.splitlines() == [
                f"error: store sqlite:///{media / 'old.db'} has schema version "
                f"{schema_versions()[-2]}, older than this streameval's {schema_versions()[-1]}; "
                "upgrade it once with `streameval runs --migrate` (which writes to it)"
            ]
        assert os.listdir(media) == ["old.db"] and (media / "old.db").read_bytes() == content
    finally:
        make_writable(media)
