"""API docs that work offline: Swagger UI at /docs and ReDoc at /redoc, their JavaScript and
CSS served by the app itself from the installed `fastapi-offline` package, not from a CDN.

    app = FastAPI(docs_url=None, redoc_url=None)  # FastAPI's own pages load from a CDN
    add_offline_docs(app)

Only the package's asset files are used; the pages are FastAPI's own (`get_swagger_ui_html`,
`get_redoc_html`), sent with a Content-Security-Policy that lets them load nothing from
another origin: ReDoc's menu would fetch its logo from cdn.redoc.ly, a failed request offline
and a call home online.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from streameval.web_security import content_security_policy

ASSETS_PACKAGE = "fastapi_offline"
ASSETS_URL = "/docs-assets"
# Both pages start their bundle from an inline script and style themselves inline; ReDoc
# searches in a blob: worker. Everything else (frame denial included) is the apps' policy.
DOCS_CSP = content_security_policy(
    script_src="'self' 'unsafe-inline'",
    style_src="'self' 'unsafe-inline'",
    worker_src="'self' blob:",
)


class Health(BaseModel):
    """What `GET /healthz` of either API answers: that it serves, nothing about the server."""

    status: Literal["ok"] = "ok"


def assets_dir() -> Path:
    """The folder of swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png."""
    # Located, not imported: none of the package's code runs.
    spec = importlib.util.find_spec(ASSETS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{ASSETS_PACKAGE} is not installed: pip install fastapi-offline")
    return Path(spec.submodule_search_locations[0]) / "static"


def add_offline_docs(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Serve Swagger UI at `docs_url` and ReDoc at `redoc_url` for the app's OpenAPI schema."""
    assert app.openapi_url, "the app serves no OpenAPI schema to document"
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")

    @app.get(docs_url, include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        # root_path: behind a proxy that serves the app under a prefix, as FastAPI's own do.
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page

    @app.get(redoc_url, include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page
