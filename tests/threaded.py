"""Runs a callable in a fresh thread and returns its result (or raises its exception). Browser tests leave
pytest-playwright's event loop running in the main thread for the session, so `asyncio.run` (nats-py,
websockets clients) and a second sync Playwright must run where no loop is running."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def in_thread(fn: Callable[..., T], *args: Any) -> T:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised in the caller's thread, with its traceback
            box["error"] = exc

    thread = threading.Thread(target=run, name="test-in-thread")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
