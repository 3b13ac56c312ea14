"""Talking to a relay over HTTP (stdlib only): the current beacon, and posting profiles. Profiles that
could not be delivered wait in an outbox on disk and are resent by the next `ce-bench run --relay`."""

from __future__ import annotations

import json
import secrets
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from capsule.signing import sign, verify_record
from capsule.typed import ValidationError
from common.files import write_atomic
from common.keys import NodeKey, config_dir

TIMEOUT_S = 10.0
_ssl_context: ssl.SSLContext | None = None


def trust_certificate(cafile: Path) -> ssl.SSLContext:
    """Trusts a relay's own (self-signed) certificate for the requests this process makes."""
    global _ssl_context
    _ssl_context = ssl.create_default_context(cafile=str(cafile))
    return _ssl_context


class RelayError(Exception):
    """The relay could not be reached or refused; the message is for the user."""

    def __init__(self, message: str, retryable: bool, code: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.code = code  # the relay's problem code, when it answered with one


# Refusals that say the profile's beacon is not (or no longer) this relay's: the figures may be fine, but only
# a measurement against the relay's current beacon can be accepted (web/api/ingest.py, the beacon checks).
BEACON_REFUSALS = frozenset({"unknown_beacon", "stale_beacon", "beacon_mismatch", "measured_before_beacon"})


def _request(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET",
                                 headers={"content-type": "application/json", "accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=_ssl_context) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RelayError(f"relay {url} unreachable: {reason}", retryable=True) from None


def _problem_code(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    code = data.get("code") if isinstance(data, dict) else None
    return code if isinstance(code, str) else None


def _problem(body: bytes) -> str:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body[:200].decode(errors="replace")
    if isinstance(data, dict):
        parts = [str(data.get(k)) for k in ("code", "title", "detail") if data.get(k)]
        return " - ".join(parts) or json.dumps(data)[:200]
    return json.dumps(data)[:200]


def fetch_beacon(relay: str) -> dict[str, Any]:
    """GET /beacon, verified: the relay's signature by its NodeId."""
    status, body = _request(relay.rstrip("/") + "/beacon")
    if status != 200:
        raise RelayError(f"relay {relay} answered {status} for /beacon: {_problem(body)}", retryable=status >= 500)
    try:
        beacon = json.loads(body)
        verify_record("Beacon", beacon)
    except (json.JSONDecodeError, ValidationError, ValueError) as exc:
        raise RelayError(f"relay {relay} sent an invalid beacon: {exc}", retryable=False) from None
    return dict(beacon)


def local_beacon(key: NodeKey) -> dict[str, Any]:
    """A beacon this node issues itself when no relay is given: round 0, fresh randomness. It proves
    nothing about timing to others; the profile's evidence says it was local."""
    return sign("Beacon", {"relay": key.node_id, "round": 0, "value": secrets.token_hex(32), "prev": "",
                           "issued_at": int(time.time())}, key)


def post_profile(relay: str, profile: dict[str, Any]) -> int:
    """POST /v1/profiles; returns the 2xx status or raises RelayError (retryable for network/5xx)."""
    return post_profile_told(relay, profile)[0]


def post_profile_told(relay: str, profile: dict[str, Any]) -> tuple[int, list[str]]:
    """post_profile, with what the relay said about the profile it took (its "warnings": figures below the
    profile it replaced)."""
    status, body = _request(relay.rstrip("/") + "/v1/profiles", json.dumps(profile).encode())
    if 200 <= status < 300:
        try:
            said = json.loads(body).get("warnings") if body else None
        except (ValueError, AttributeError):
            said = None
        return status, [str(w) for w in said] if isinstance(said, list) else []
    raise RelayError(f"relay {relay} refused the profile ({status}): {_problem(body)}",
                     retryable=status >= 500 or status == 429, code=_problem_code(body))


def outbox_dir() -> Path:
    return config_dir() / "outbox"


def save_to_outbox(profile: dict[str, Any]) -> Path:
    path = outbox_dir() / f"{profile['measured_at']}-{profile['node_id'][-8:]}.json"
    write_atomic(path, json.dumps(profile).encode())
    return path


def forget_superseded(accepted: dict[str, Any]) -> list[str]:
    """Once the relay accepted `accepted`, an outbox profile kept as NAME.superseded of the same node and
    measured before it has nothing left to deliver (the relay holds a newer measurement of that node): it is
    removed. Returns one line per removed file, for the user; unreadable files are left alone."""
    said = []
    for path in sorted(outbox_dir().glob("*.superseded")) if outbox_dir().exists() else []:
        try:
            kept = json.loads(path.read_text())
            if (not isinstance(kept, dict) or kept.get("node_id") != accepted["node_id"]
                    or not isinstance(kept.get("measured_at"), int) or kept["measured_at"] >= accepted["measured_at"]):
                continue
            path.unlink()
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        said.append(f"{path.name}: removed; the relay accepted a newer profile of this node "
                    f"(measured_at {accepted['measured_at']}), so it has nothing left to deliver")
    return said


def resend_outbox(relay: str) -> tuple[int, list[str]]:
    """Resends every waiting profile; delivered ones leave the outbox. Nothing is deleted unsent: a profile
    the relay refuses for its beacon (measured with a local beacon while the relay was unreachable, or too
    long ago) is kept as NAME.superseded, and the run that called this measures again against the relay's
    current beacon (once the relay accepts a newer profile of the node, forget_superseded removes it); any
    other permanent refusal is kept as NAME.refused. Each case is reported."""
    sent, problems = 0, []
    for path in sorted(outbox_dir().glob("*.json")) if outbox_dir().exists() else []:
        try:
            profile = json.loads(path.read_text())
            post_profile(relay, profile)
            path.unlink()
            sent += 1
            problems += forget_superseded(profile)
        except RelayError as exc:
            if exc.retryable:
                problems.append(f"{path.name}: {exc}")
                break  # the relay is down: keep the rest for later
            if exc.code in BEACON_REFUSALS:
                kept = path.with_suffix(".superseded")
                path.rename(kept)
                problems.append(f"{path.name}: the relay cannot accept its beacon ({exc.code}); kept as {kept.name}, "
                                "and this run measures again against the relay's current beacon")
            else:
                kept = path.with_suffix(".refused")
                path.rename(kept)
                problems.append(f"{path.name}: {exc}; kept as {kept.name}")
        except (OSError, json.JSONDecodeError) as exc:
            problems.append(f"{path.name}: unreadable ({exc}); left in place")
    return sent, problems
