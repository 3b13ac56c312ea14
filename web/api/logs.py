"""Structured logs: one JSON object per line on stderr, with the `extra` fields of each record."""

from __future__ import annotations

import json
import logging
import time

_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(time.time(), 3), "level": record.levelname.lower(), "logger": record.name,
               "event": record.getMessage()}
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(level: str = "info") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("ce")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


class ClientJunkFilter(logging.Filter):
    """uvicorn logs a client's text frame that is not UTF-8 with a stack trace (logger.exception): client
    junk, not a relay fault, so one warning line without the trace."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.getMessage().startswith("Invalid UTF-8"):
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_client_junk() -> None:
    logging.getLogger("uvicorn.error").addFilter(ClientJunkFilter())
