"""`ce-bench status [NODE_ID] --relay URL`: the relay's view of a node (seed 003's node-status), read from its
public API: trust status and reason, proven vs claimed figures, the last roll calls it answered, and the
links the relay measured to it. Pure formatting over what `fetch_status` reads, so it is testable directly."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from host_runner.relay_client import RelayError, _problem, _request


def _get(relay: str, path: str) -> dict[str, Any]:
    status, body = _request(relay.rstrip("/") + path)
    if status != 200:
        raise RelayError(f"relay {relay} answered {status} for {path}: {_problem(body)}", retryable=status >= 500)
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RelayError(f"relay {relay} sent no JSON for {path}", retryable=False) from None
    if not isinstance(data, dict):
        raise RelayError(f"relay {relay} sent {type(data).__name__} for {path}, expected an object", retryable=False)
    return data


def fetch_status(relay: str, node_id: str, roll_calls: int = 5) -> dict[str, Any]:
    """One object: the node as the relay sees it, its last roll calls and its measured links."""
    quoted = urllib.parse.quote(node_id, safe="")
    node = _get(relay, f"/v1/nodes/{quoted}")
    events = _get(relay, f"/v1/nodes/{quoted}/history?limit=200").get("events", [])
    answered = [e for e in events if e.get("event") == "challenge" and e.get("roll_call")]
    graph = _get(relay, "/netgraph")
    links = [e for e in graph.get("edges", []) if isinstance(e, dict) and node_id in (e.get("a"), e.get("b"))]
    profile = node.get("profile", {})
    return {"node_id": node_id, "relay": relay, "online": node.get("status", {}).get("online"),
            "trust": node.get("trust", {}),
            "claimed": {"cpu_gflops": profile.get("cpu", {}).get("gflops_fp32"),
                        "cpu_cores": profile.get("cpu", {}).get("cores"),
                        "tokens_per_sec": (profile.get("llm") or {}).get("tokens_per_sec"),
                        "gpus": len(profile.get("gpus") or [])},
            "roll_calls": [{k: e.get(k) for k in ("roll_call", "kind", "at", "passed", "code", "observed_gflops",
                                                  "observed_tokens_per_sec")} for e in answered[-roll_calls:]],
            "links": links}


def _num(value: Any, unit: str, digits: int = 1) -> str:
    return "null" if value is None else f"{float(value):.{digits}f} {unit}"


def render(status: dict[str, Any]) -> str:
    """The human-readable lines of `ce-bench status`."""
    trust, claimed = status["trust"], status["claimed"]
    counted = trust.get("counted", {})
    lines = [f"node {status['node_id']} at {status['relay']}: {'online' if status['online'] else 'offline'}",
             f"trust: {trust.get('status')} ({trust.get('reason')})",
             f"{'':16}{'proven':>18}{'claimed':>18}",
             f"{'CPU':16}{_num(counted.get('cpu_gflops'), 'GFLOP/s'):>18}"
             f"{_num(claimed['cpu_gflops'], 'GFLOP/s'):>18}",
             f"{'cores':16}{counted.get('cpu_cores', 0):>18}{claimed['cpu_cores'] or 'null':>18}",
             f"{'tokens/s':16}{_num(counted.get('tokens_per_sec'), 'tok/s'):>18}"
             f"{_num(claimed['tokens_per_sec'], 'tok/s'):>18}",
             f"{'GPUs':16}{counted.get('gpus', 0):>18}{claimed['gpus']:>18}  (GPUs: claimed, not proven)",
             "proven = what the latest roll call showed (every live node challenged at one moment), capped at "
             "the claim"]
    if status["roll_calls"]:
        lines.append("last roll calls:")
        for rc in reversed(status["roll_calls"]):
            seen = (_num(rc["observed_gflops"], "GFLOP/s") if rc["kind"] == "sgemm"
                    else _num(rc["observed_tokens_per_sec"], "tokens/s"))
            lines.append(f"  {rc['roll_call']} {rc['kind']:5} {'passed' if rc['passed'] else 'FAILED'} {rc['code']}"
                         f", observed {seen}")
    else:
        lines.append("last roll calls: none answered yet")
    lines.append(f"measured links: {len(status['links'])}")
    for link in status["links"][:10]:
        other = link["b"] if link.get("a") == status["node_id"] else link.get("a")
        lines.append(f"  {other}: {_num(link.get('rtt_ms'), 'ms', 2)} RTT")
    return "\n".join(lines)
