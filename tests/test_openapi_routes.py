"""/openapi.json lists every route the relay serves (issue 46: it omitted /v1/links, /netgraph, /netgraph/rtt,
/v1/relays and the WebSocket routes), read from the app's own routing table, not from a list kept by hand."""

from __future__ import annotations

from pathlib import Path

from starlette.routing import Mount, Route, WebSocketRoute

from web.api.app import create_app
from web.api.openapi import document
from web.config import RelayConfig

PAGES = {"/", "/nodes/{node_id}", "/openapi.json"}  # HTML pages and the document itself


def test_every_route_is_documented_with_its_methods(tmp_path: Path) -> None:
    app = create_app(RelayConfig(data_dir=tmp_path / "relay", libp2p_listen=None))
    paths = document()["paths"]
    served = 0
    for route in app.routes:
        if isinstance(route, Mount) or not isinstance(route, Route | WebSocketRoute) or route.path in PAGES:
            continue
        assert route.path in paths, f"{route.path} is served but not in /openapi.json"
        if isinstance(route, Route):
            for method in (route.methods or set()) - {"HEAD"}:
                assert method.lower() in paths[route.path], (route.path, method)
        else:
            assert isinstance(route, WebSocketRoute)
        served += 1
    assert served >= 20


def test_the_api_page_lists_every_documented_path(tmp_path: Path) -> None:
    """GET /api (issue 47: an API reference page): rendered from the same document, so every path and method of
    /openapi.json is on it, with its summary."""
    from starlette.testclient import TestClient

    app = create_app(RelayConfig(data_dir=tmp_path / "relay", libp2p_listen=None))
    with TestClient(app) as client:
        page = client.get("/api")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for path, methods in document()["paths"].items():
        for method in methods:
            assert f"<code>{method.upper()}</code></td><td><code>{path}</code>" in page.text, (method, path)
