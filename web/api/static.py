"""Headers for the browser bundle: cross-origin isolation (COOP/COEP) so performance.now() is precise
and SharedArrayBuffer is allowed, MIME types for wasm/modules/shaders, and caching — the versioned Pyodide
files never change (cached for a year), everything else is revalidated by ETag."""

from __future__ import annotations

import mimetypes

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

mimetypes.add_type("application/wasm", ".wasm")
mimetypes.add_type("text/javascript", ".mjs")
mimetypes.add_type("text/javascript", ".js")
mimetypes.add_type("text/plain", ".wgsl")
mimetypes.add_type("application/zip", ".whl")

IMMUTABLE_PREFIXES = ("/pyodide/",)


class IsolationHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["cross-origin-opener-policy"] = "same-origin"
                headers["cross-origin-embedder-policy"] = "require-corp"
                headers["cross-origin-resource-policy"] = "same-origin"
                if "cache-control" not in headers:
                    immutable = path.startswith(IMMUTABLE_PREFIXES)
                    headers["cache-control"] = "public, max-age=31536000, immutable" if immutable else "no-cache"
            await send(message)

        await self.app(scope, receive, send_with_headers)
