"""Reading a request's body within a limit, shared by every HTTP route that takes one."""

from __future__ import annotations

from starlette.requests import Request

from web.api.problems import Problem


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing past `limit` bytes without reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise Problem(413, "body_too_large", "the body is too large", f"{declared} bytes; at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Problem(413, "body_too_large", "the body is too large", f"more than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
