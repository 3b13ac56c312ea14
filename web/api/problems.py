"""RFC 9457 problem details with a stable `code`, and the field at fault when there is one."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse


class Problem(Exception):
    """A refusal the client can act on: HTTP status, stable code, human title and detail."""

    def __init__(self, status: int, code: str, title: str, detail: str = "", field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{code}: {detail or title}")
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.field = field
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": f"https://ce-bench.dev/problems/{self.code}", "title": self.title,
                               "status": self.status, "code": self.code}
        if self.detail:
            out["detail"] = self.detail
        if self.field:
            out["field"] = self.field
        return out

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers,
                            media_type="application/problem+json")
