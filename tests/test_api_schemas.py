"""The OpenAPI schemas of both APIs (issue 30): every operation under a named tag (none left
under ReDoc's "default") and every success response typed by a model; the control API says
on start-up where its docs are or how to serve them; the results API answers HEAD where a
browser or a link checker opens it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from streameval.core.launch.control_api import create_app as core_app
from streameval.core.store.store import Store
from streameval.scorer.service.api import create_app as results_app
from tests.servers import served, streameval_command
from tests.test_scorer_report import mixed_run

TOKEN = "schema-test-token-0123456789"
BINARY = {"type": "string", "format": "binary"}


def schema_of(app: Any) -> dict[str, Any]:
    with TestClient(app) as client:
        answer = client.get("/openapi.json")
        assert answer.status_code == 200
        return answer.json()


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    ]


def typed(schema: dict[str, Any]) -> bool:
    """A model ($ref), a list or union of models, or binary content (an image)."""
    if "$ref" in schema:
        return True
    if schema.get("type") == "array":
        return typed(schema["items"])
    if "oneOf" in schema:
        return all(typed(option) for option in schema["oneOf"])
    return schema == BINARY


def untyped_successes(schema: dict[str, Any]) -> list[str]:
    return [
        f"{method} {path} {code} {media}"
        for method, path, operation in operations(schema)
        for code, response in operation["responses"].items()
        if code.startswith("2")
        for media, content in response.get("content", {"": {}}).items()
        if not typed(content.get("schema", {}))
    ]


@pytest.fixture
def core_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("STREAMEVAL_API_DOCS", "1")
    return schema_of(core_app(f"sqlite:///{tmp_path / 'core.db'}", TOKEN))


@pytest.fixture
def results_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with Store(url) as store:
        mixed_run(store, "run-a")
    return url


def test_every_control_api_operation_has_a_tag_and_typed_responses(core_schema) -> None:
    tags = {(method, path): op.get("tags") for method, path, op in operations(core_schema)}
    assert tags == {
        ("GET", "/healthz"): ["service"],
        ("GET", "/readyz"): ["service"],
        ("GET", "/adapters"): ["adapters"],
        ("POST", "/adapters"): ["adapters"],
        ("POST", "/runs"): ["runs"],
        ("GET", "/runs/{run_id}"): ["runs"],
    }
    assert untyped_successes(core_schema) == []
    health = core_schema["paths"]["/healthz"]["get"]["responses"]["200"]
    assert health["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Health"
    }
    assert core_schema["components"]["schemas"]["Health"]["properties"]["status"]["const"] == "ok"
    ready = core_schema["paths"]["/readyz"]["get"]["responses"]
    assert sorted(ready) == ["200", "503"]
    assert core_schema["components"]["schemas"]["Ready"]["properties"]["status"]["const"] == "ready"
    # Every operation says what it does: ReDoc shows the docstring under the summary.
    assert all(op.get("description") for _, _, op in operations(core_schema))


def test_every_results_api_operation_has_a_tag_and_typed_responses(results_url) -> None:
    schema = schema_of(results_app(results_url))
    tags = [op.get("tags") for _, _, op in operations(schema)]
    assert all(tags) and all(len(t) == 1 for t in tags), tags
    assert {t[0] for t in tags} == {"service", "profiles", "runs", "metrics", "records", "frames"}
    assert untyped_successes(schema) == []
    frame = schema["paths"]["/runs/{run_id}/records/{record_id}/frames/{index}"]["get"]
    assert frame["responses"]["200"]["content"] == {"image/jpeg": {"schema": BINARY}}
    annotation = schema["paths"]["/runs/{run_id}/records/{record_id}/annotation"]["get"]
    assert annotation["responses"]["200"]["content"]["application/json"]["schema"]["oneOf"] == [
        {"$ref": "#/components/schemas/QARecord"},
        {"$ref": "#/components/schemas/ProactiveRecord"},
    ]


def test_a_record_annotation_is_served_as_stored_through_its_model(results_url) -> None:
    with Store(results_url) as store:
        stored = {data["record_id"]: data for data in store.records("run-a")}
    with TestClient(results_app(results_url)) as client:
        for record_id, data in stored.items():
            answer = client.get(f"/runs/run-a/records/{record_id}/annotation")
            assert answer.status_code == 200
            assert answer.json() == data
        assert client.get("/healthz").json() == {"status": "ok"}


def test_head_is_answered_where_a_browser_opens_the_results_api(results_url) -> None:
    with TestClient(results_app(results_url), follow_redirects=False) as client:
        home = client.head("/")
        assert (home.status_code, home.headers["location"], home.content) == (307, "ui/", b"")
        page = client.head("/ui/")
        assert page.status_code == 200 and page.content == b""
        assert page.headers["content-type"].startswith("text/html")
        assert int(page.headers["content-length"]) == len(client.get("/ui/").content)
        icon = client.head("/favicon.ico")
        assert (icon.status_code, icon.headers["content-type"]) == (200, "image/svg+xml")
        assert client.head("/ui/js/runs.js").status_code == 200


@pytest.mark.parametrize(
    ("docs", "line", "status"),
    [
        (
            None,
            "control API docs are off (the schema maps what a token holder can do): set "
            "STREAMEVAL_API_DOCS=1 to serve /docs, /redoc and /openapi.json",
            404,
        ),
        ("1", "control API docs at /docs and /redoc (schema at /openapi.json)", 200),
    ],
)
def test_the_control_api_says_on_start_up_where_its_docs_are_or_how_to_serve_them(
    tmp_path: Path, docs: str | None, line: str, status: int
) -> None:
    env = {**os.environ, "STREAMEVAL_API_TOKEN": TOKEN}
    env.pop("STREAMEVAL_API_DOCS", None)
    if docs is not None:
        env["STREAMEVAL_API_DOCS"] = docs
    command = streameval_command("core-api", "--store", f"sqlite:///{tmp_path / 's.db'}")
    with served([*command, "--port", "0"], env) as api:
        assert api.process.stderr is not None
        assert api.process.stderr.readline().rstrip("\n") == line
        assert httpx.get(f"{api.url}/docs").status_code == status
        assert httpx.get(f"{api.url}/openapi.json").status_code == status
