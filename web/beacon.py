"""The relay's beacon: a chain of signed random rounds. value(n) = sha256(value(n-1) || n || 32 fresh
random bytes), so each round commits to the whole chain before it and nobody, the relay included, can
compute a round before it is issued. A profile cites a round; its inputs were drawn from that value."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from capsule.signing import Signer, node_id, sign


def next_round(prev: dict[str, Any] | None, signer: Signer, now: float | None = None) -> dict[str, Any]:
    round_no = 0 if prev is None else int(prev["round"]) + 1
    prev_value = "" if prev is None else str(prev["value"])
    value = hashlib.sha256(bytes.fromhex(prev_value) + round_no.to_bytes(8, "big") + os.urandom(32)).hexdigest()
    body = {"relay": node_id(signer), "round": round_no, "value": value, "prev": prev_value,
            "issued_at": int(now if now is not None else time.time())}
    return sign("Beacon", body, signer)
