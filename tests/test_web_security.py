"""Browser-facing defences of the HTTP services (docs/security.md, "Browser-facing headers"):
every answer of the results API (JSON, the dashboard's HTML and static files, errors) and of
the Core's control API carries a Content-Security-Policy, frame denial and nosniff; the
results API answers only the Host names it is allowed (against DNS rebinding). Each server is
`streameval results-api` / `core-api` in its own process, as a user starts it.

That the dashboard and the API docs satisfy the policy is shown in a real browser:
tests/test_dashboard_browser.py and tests/test_offline_docs.py collect every violation.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streameval.core.store.store import Store
from streameval.web_security import (
    CSP_DIRECTIVES,
    SECURITY_HEADERS,
    AllowedHosts,
    host_name,
    split_host_list,
)
from tests.servers import Served, served, streameval_command

pytestmark = pytest.mark.timeout(120)
POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
REFUSED = (
    "Host {!r} is not one this server answers to; its operator allows more names with "
    "--allowed-host or STREAMEVAL_ALLOWED_HOSTS"
)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('web') / 'store.db'}"
    Store(url).close()  # the results API opens an existing store only
    return url


def results_api(store_url: str, *args: str, env: dict[str, str] | None = None):
    command = streameval_command("results-api", "--store", store_url, "--port", "0", *args)
    return served(command, {**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def loopback(store_url: str) -> Iterator[Served]:
    with results_api(store_url) as server:
        yield server


def port_of(server: Served) -> int:
    return int(server.url.rsplit(":", 1)[1])


def get(server: Served, path: str, host: str | None = None) -> httpx.Response:
    """`path` from the server on 127.0.0.1, with `host` as the Host header (default: its URL's)."""
    headers = {} if host is None else {"Host": host}
    local = f"http://127.0.0.1:{port_of(server)}{path}"
    return httpx.get(local, headers=headers, timeout=30, follow_redirects=False)


def assert_protected(response: httpx.Response, policy: str = POLICY) -> None:
    assert response.headers["content-security-policy"] == policy
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_the_policy_is_the_documented_one() -> None:
    assert SECURITY_HEADERS["content-security-policy"] == POLICY
    assert CSP_DIRECTIVES["frame-ancestors"] == "'none'"
    assert POLICY in (Path(__file__).parent.parent / "docs" / "security.md").read_text()


def test_every_results_api_answer_carries_the_headers(loopback: Served) -> None:
    answers = {
        "/runs": (200, "application/json"),
        "/": (307, None),  # to the dashboard
        "/ui/": (200, "text/html; charset=utf-8"),
        "/ui/js/util.js": (200, "text/javascript; charset=utf-8"),
        "/ui/style.css": (200, "text/css; charset=utf-8"),
        "/ui/favicon.svg": (200, "image/svg+xml"),
        "/runs/nope": (404, "application/json"),
        "/ui/missing.js": (404, "application/json"),
        "/no-such-route": (404, "application/json"),
        "/openapi.json": (200, "application/json"),
        "/healthz": (200, "application/json"),
    }
    for path, (status, content_type) in answers.items():
        response = get(loopback, path)
        assert response.status_code == status, (path, response.text)
        if content_type is not None:
            assert response.headers["content-type"] == content_type, path
        assert_protected(response)


def test_the_docs_pages_keep_their_own_policy_and_deny_framing(loopback: Served) -> None:
    """Swagger UI and ReDoc start from an inline script: their pages relax script-src and
    style-src, and keep the rest of the policy, frame denial included."""
    docs_policy = POLICY.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'").replace(
        "style-src 'self'", "style-src 'self' 'unsafe-inline'"
    ) + ("; worker-src 'self' blob:")
    for path in ("/docs", "/redoc"):
        response = get(loopback, path)
        assert response.status_code == 200, path
        assert_protected(response, docs_policy)
    assert_protected(get(loopback, "/docs-assets/swagger-ui.css"))


def test_a_loopback_bound_results_api_answers_loopback_names_alone(loopback: Served) -> None:
    port = port_of(loopback)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert get(loopback, "/healthz", host).json() == {"status": "ok"}, host
    for host in (
        f"attacker.example:{port}",  # a rebinding page's own name
        "localhost.attacker.example",
        "127.0.0.1.nip.io",
        "10.0.0.7",  # an address, but not a loopback one
        "",
    ):
        refused = get(loopback, "/runs", host)
        assert refused.status_code == 400, host
        assert refused.json() == {"detail": REFUSED.format(host)}
        assert_protected(refused)
        assert get(loopback, "/ui/", host).status_code == 400  # the dashboard too


def test_allowed_hosts_come_from_the_option_and_the_environment(store_url: str) -> None:
    with results_api(
        store_url, "--allowed-host", "results", "--allowed-host", "dash.lab:8800"
    ) as server:
        for host in ("results:8800", "dash.lab", "localhost"):
            assert get(server, "/runs", host).status_code == 200, host
        assert get(server, "/runs", "other.lab").status_code == 400
    with results_api(store_url, env={"STREAMEVAL_ALLOWED_HOSTS": "results, dash.lab"}) as server:
        assert get(server, "/runs", "dash.lab:80").status_code == 200
        assert get(server, "/runs", "results").status_code == 200
        assert get(server, "/runs", "other.lab").status_code == 400
    with results_api(store_url, "--allowed-host", "*") as server:
        assert get(server, "/runs", "anything.example").status_code == 200


def test_bound_to_all_interfaces_it_also_answers_addresses_and_its_machines_names(
    store_url: str,
) -> None:
    """As compose runs it (`--host 0.0.0.0`): the host's browser sends 127.0.0.1:8800, the
    health check localhost:8800, a lab user the machine's address or name; a name the
    operator did not allow (a rebinding page's) is refused."""
    with results_api(store_url, "--host", "0.0.0.0") as server:
        port = port_of(server)
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            f"192.0.2.10:{port}",
            f"[2001:db8::1]:{port}",
            socket.gethostname(),
            socket.getfqdn(),
        ):
            assert get(server, "/healthz", host).status_code == 200, host
        refused = get(server, "/runs", f"attacker.example:{port}")
        assert refused.status_code == 400
        assert refused.json() == {"detail": REFUSED.format(f"attacker.example:{port}")}


def test_the_control_api_answers_carry_the_headers(tmp_path: Path) -> None:
    env = {**os.environ, "STREAMEVAL_API_TOKEN": "web-security-test-token-0123456789"}
    url = f"sqlite:///{tmp_path / 'core.db'}"
    with served(streameval_command("core-api", "--store", url, "--port", "0"), env) as server:
        answers = {"/healthz": 200, "/runs/x": 401, "/no-such-route": 404, "/docs": 404}
        for path, status in answers.items():
            response = get(server, path)
            assert response.status_code == status, path
            assert_protected(response)
        token = {"Authorization": f"Bearer {env['STREAMEVAL_API_TOKEN']}"}
        listed = httpx.get(f"{server.url}/adapters", headers=token, timeout=30)
        assert listed.status_code == 200
        assert_protected(listed)


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8800", "localhost"),
        ("[::1]:8800", "::1"),
        ("[::1]", "::1"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("results", "results"),
        ("", ""),
    ],
)
def test_host_names(header: str, name: str) -> None:
    assert host_name(header) == name


def test_default_allowed_hosts() -> None:
    for bind in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        loopback = AllowedHosts.for_bind(bind)
        assert loopback == AllowedHosts(frozenset({"localhost", "127.0.0.1", "::1"}))
    everywhere = AllowedHosts.for_bind("0.0.0.0", split_host_list(["a.lab,b.lab", "c.lab:1"]))
    assert everywhere.any_ip
    assert {"a.lab", "b.lab", "c.lab", socket.gethostname().lower()} <= everywhere.names
    named = AllowedHosts.for_bind("gpu-3.lab")
    assert named.allows("gpu-3.lab:8800") and not named.allows("gpu-4.lab:8800")


def test_compose_results_service_answers_its_health_check_and_the_published_url() -> None:
    """docker-compose.yml's `results` as configured (bound to 0.0.0.0, its environment with
    .env.example's values): the Host its health check sends (localhost:8800), the one a
    browser on the host sends (http://127.0.0.1:8800/), and its service name are allowed."""
    from tests.test_compose import SERVICES, env_example, interpolate

    service = SERVICES["results"]
    command = service["command"].split()
    bind = command[command.index("--host") + 1]
    names = interpolate(service["environment"]["STREAMEVAL_ALLOWED_HOSTS"], env_example())
    allowed = AllowedHosts.for_bind(bind, split_host_list([names]))
    (health,) = [part for part in service["healthcheck"]["test"] if "/readyz" in part]
    checked = httpx.URL(health.split("'")[1])
    published = interpolate(service["ports"][0], env_example()).rsplit(":", 1)[0]
    for host in (f"{checked.host}:{checked.port}", published, "results:8800"):
        assert allowed.allows(host), host
    assert not allowed.allows("attacker.example:8800")


def test_an_unhandled_errors_500_carries_the_headers_too() -> None:
    """The headers sit outside Starlette's error handling: a crash's 500 has them."""
    from fastapi.testclient import TestClient

    from streameval.web_security import ProtectedApp

    app = ProtectedApp()
    app.allowed_hosts = AllowedHosts.for_bind("127.0.0.1")

    @app.get("/crash")
    def crash() -> None:
        raise RuntimeError("boom")

    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        crashed = client.get("/crash")
        assert crashed.status_code == 500
        assert_protected(crashed)
        refused = client.get("/crash", headers={"Host": "attacker.example"})
        assert refused.status_code == 400
        assert_protected(refused)
