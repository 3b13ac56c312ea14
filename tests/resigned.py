"""A measured profile re-signed for another key against a relay's current beacon, and posted there: how tests and
benches register identities of this machine (tests/test_tokens_identities.py, tests/test_operator_failures.py,
bench/tokens_identities.py)."""

from __future__ import annotations

import json
import time
from typing import Any

from capsule.signing import sign
from common.keys import NodeKey
from host_runner.relay_client import fetch_beacon, post_profile


def register(relay_url: str, profile: dict[str, Any], key: NodeKey | None = None,
             llm: dict[str, Any] | None = None, cpu: dict[str, Any] | None = None) -> NodeKey:
    """Posts `profile` (its `llm` and `cpu` fields updated by those given) as `key`'s (a fresh one by default),
    measured now, on the relay's latest beacon round; returns the key."""
    key = key or NodeKey.generate()
    body = {k: v for k, v in json.loads(json.dumps(profile)).items() if k != "sig"}
    body["llm"].update(llm or {})
    body["cpu"].update(cpu or {})
    beacon = fetch_beacon(relay_url)  # once: rounds change every second
    body.update(node_id=key.node_id, measured_at=int(time.time()),
                beacon={k: beacon[k] for k in ("relay", "round", "value")})
    post_profile(relay_url, sign("NodeProfile", body, key))
    return key
