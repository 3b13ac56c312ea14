"""GET /api: the API reference as one page a person reads, rendered from the same document as /openapi.json (so the
two never disagree): each path, its methods, what each does, its parameters and its answers."""

from __future__ import annotations

import html
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from web.api.openapi import document


def render(doc: dict[str, Any]) -> str:
    rows = []
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            params = ", ".join(f"{p['name']} ({p['in']}{', required' if p.get('required') else ''})"
                               for p in op.get("parameters", []))
            answers = ", ".join(f"{code} {r.get('description', '')}" for code, r in op.get("responses", {}).items())
            rows.append(f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
                        f"<td>{html.escape(op.get('summary', ''))}</td><td>{html.escape(params) or '—'}</td>"
                        f"<td>{html.escape(answers)}</td></tr>")
    return ("<!doctype html><meta charset=utf-8><meta name=viewport content='width=device-width'>"
            f"<title>{html.escape(doc['info']['title'])} API</title>"
            "<style>body{font:14px system-ui,sans-serif;margin:1rem}table{border-collapse:collapse;width:100%}"
            "td{border-bottom:1px solid #ddd;padding:.3rem;vertical-align:top}</style>"
            f"<h1>{html.escape(doc['info']['title'])} API</h1><p>The machine-readable document: "
            "<a href=/openapi.json>/openapi.json</a> (OpenAPI 3.1, with the records' JSON Schemas). Errors are "
            "RFC 9457 problem details (application/problem+json).</p>"
            "<table><tr><th>method</th><th>path</th><th>what it does</th><th>parameters</th><th>answers</th></tr>"
            + "".join(rows) + "</table>")


async def api_page(request: Request) -> Response:
    return HTMLResponse(render(document()))
