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
    return {"node_id": node_id, "name": profile.get("name"), "relay": relay,
            "online": node.get("status", {}).get("online"),
            "trust": node.get("trust", {}),
            "claimed": {"cpu_gflops": profile.get("cpu", {}).get("gflops_fp32"),
                        "cpu_cores": profile.get("cpu", {}).get("cores"),
                        "tokens_per_sec": (profile.get("llm") or {}).get("tokens_per_sec"),
                        "gpus": len(profile.get("gpus") or [])},
            "roll_calls": [{k: e.get(k) for k in ("roll_call", "kind", "at", "passed", "code", "observed_gflops",
                                                  "observed_tokens_per_sec", "observed_tflops")}
                           for e in answered[-roll_calls:]],
            "links": links}


def printable(name: Any) -> str:
    """A node's name for a terminal: the relay checked it (capsule.model.NODE_NAME), but a listing does not trust
    a relay either: anything a terminal would act on becomes '?'."""
    if not isinstance(name, str):
        return ""
    return "".join(c if c.isprintable() else "?" for c in name[:64])


def _num(value: Any, unit: str, digits: int = 1) -> str:
    return "unknown" if value is None else f"{float(value):.{digits}f} {unit}"


def render(status: dict[str, Any]) -> str:
    """The human-readable lines of `ce-bench status`, in the pages' vocabulary: claimed (the node's signed
    measurement), observed (what one challenge showed on the relay's clock), counted (what the latest roll call
    proved, capped at the claim); verified / unverified / flagged."""
    trust, claimed = status["trust"], status["claimed"]
    counted = trust.get("counted", {})
    gpus = counted.get("gpus", 0)
    named = f" (\"{printable(status['name'])}\")" if status.get("name") else ""
    lines = [f"node {status['node_id']}{named} at {status['relay']}: {'online' if status['online'] else 'offline'}",
             f"trust: {trust.get('status')} ({trust.get('reason')})",
             f"{'':16}{'counted':>18}{'claimed':>18}",
             f"{'CPU':16}{_num(counted.get('cpu_gflops'), 'GFLOP/s'):>18}"
             f"{_num(claimed['cpu_gflops'], 'GFLOP/s'):>18}",
             f"{'cores':16}{'(claim only)':>18}{claimed['cpu_cores'] or 'unknown':>18}",
             f"{'tokens/s':16}{_num(counted.get('tokens_per_sec'), 'tok/s'):>18}"
             f"{_num(claimed['tokens_per_sec'], 'tok/s'):>18}",
             f"{'GPUs':16}{gpus if counted else 'unknown':>18}{claimed['gpus']:>18}",
             "counted = what the latest roll call proved (every live node challenged at one moment), capped at the "
             "claim; claimed = the node's own signed measurement; cores are claimed, never proven; a GPU counts "
             "where its answer showed >= 0.1 fp32 TFLOP/s beside the CPU's at that roll call (docs/protocol.md: "
             "that can be a CPU's throughput)"]
    if status["roll_calls"]:
        lines.append("last roll calls (observed on the relay's clock):")
        for rc in reversed(status["roll_calls"]):
            seen = (_num(rc["observed_gflops"], "GFLOP/s") if rc["kind"] == "sgemm"
                    else _num(rc.get("observed_tflops"), "fp32 TFLOP/s", 4) if rc["kind"] == "gpu"
                    else _num(rc["observed_tokens_per_sec"], "tokens/s"))
            verdict = "passed" if rc["passed"] else f"FAILED ({rc['code']})"
            lines.append(f"  {rc['roll_call']} {rc['kind']:5} {verdict}, observed {seen}")
    else:
        lines.append("last roll calls: none answered yet")
    lines.append(f"measured links: {len(status['links'])}")
    for link in status["links"][:10]:
        other = link["b"] if link.get("a") == status["node_id"] else link.get("a")
        lines.append(f"  {other}: {_num(link.get('rtt_ms'), 'ms', 2)} RTT")
    return "\n".join(lines)
