"""Logs on stderr: one JSON object per line with the `extra` fields of each record (for a log collector: stderr
not a terminal, or --log-json), or one line a person reads (a terminal): time, level, the event, its fields."""

from __future__ import annotations

import json
import logging
import os
import sys
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


class HumanFormatter(logging.Formatter):
    """`19:04:05 warning  relay started  relay=12D3KooW... profiles_loaded=3`: the JSON's fields, read by eye."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD)
        line = (f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.levelname.lower():8} "
                f"{record.getMessage()}" + (f"  {fields}" if fields else ""))
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(level: str = "info", json_lines: bool | None = None) -> None:
    """json_lines: None chooses JSON unless stderr is a terminal (CE_LOG_JSON=1, set by --log-json: always)."""
    handler = logging.StreamHandler()
    if json_lines is None:
        json_lines = os.environ.get("CE_LOG_JSON") == "1" or not sys.stderr.isatty()
    as_json = json_lines
    handler.setFormatter(JsonFormatter() if as_json else HumanFormatter())
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
