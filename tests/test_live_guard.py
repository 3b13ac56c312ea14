"""What WS /v1/live lets in before parsing (web/sessions/live_guard.py), the relay's loop-lag record
(web/sessions/loop_lag.py) and
what an answer is forgiven for it (web/proof/challenges.py), as pure functions: no relay process."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import replace

import pytest

from web.api.ratelimit import TokenBuckets
from web.config import RelayConfig
from web.sessions.live import MAX_MESSAGE_BYTES, LiveError
from web.sessions.live_guard import AddressGuard, address_key, close_reason, frame_type, max_opening_bytes, screen
from web.sessions.loop_lag import LoopLag, lag_allowance, lag_forgiven

CONFIG = RelayConfig()


def largest_opening() -> str:
    """An opening as a client writes it (host_runner/live_client.py: json.dumps) at every limit at once: 64
    instances, 2 rows each of order 2048 (random fp32 in base64), proofs of 2048 rows x 65,536 products."""
    rows = [{"instance": i, "row": 2048 * 65536 - 1 - j, "values": base64.b64encode(os.urandom(4 * 2048)).decode(),
             "proof": [os.urandom(32).hex() for _ in range(11 + 16)]} for i in range(64) for j in range(2)]
    return json.dumps({"type": "opening", "id": os.urandom(8).hex(), "rows": rows})


def test_the_largest_legitimate_opening_passes_and_a_byte_more_than_the_limit_does_not() -> None:
    opening = largest_opening()
    limit = max_opening_bytes(CONFIG)
    assert len(opening) <= limit <= len(opening) + 2048, (len(opening), limit)
    screen(opening, True, limit)
    screen(opening.encode(), True, limit)  # a binary frame is read alike
    with pytest.raises(LiveError) as refused:
        screen(opening + " " * (limit - len(opening) + 1), True, limit)
    assert refused.value.code == "message_too_large" and f"at most {limit}" in refused.value.detail
    with pytest.raises(LiveError) as unexpected:
        screen(opening, False, limit)
    assert unexpected.value.code == "unexpected_opening" and "none is due" in unexpected.value.detail
    # fewer instances asked of this relay: a smaller limit, still above its own largest opening
    assert max_opening_bytes(replace(CONFIG, challenge_max_instances=8)) < limit


def test_large_frames_are_judged_by_their_first_characters() -> None:
    big = " " * MAX_MESSAGE_BYTES
    screen('{"x": [1], "type": "heartbeat"}', False, 0)  # small: parsed whatever the key order
    # a commit may carry a reference-model answer's token ids: 32,768 (all streams) of 5 digits in Python's
    # separators + 4 KiB for a list per stream
    for kind, limit in (("heartbeat", MAX_MESSAGE_BYTES), ("commit", 233528), ("peer_offer", 8192)):
        screen(f'{{"type": "{kind}", "x": "{"a" * (limit - 40)}"}}', False, 0)
        with pytest.raises(LiveError) as refused:
            screen(f'{{ "type" : "{kind}", "x": "{"a" * limit}"}}', False, 0)
        assert refused.value.code == "message_too_large", refused.value.detail
        assert refused.value.detail.startswith(f"a '{kind}' message of ") and f"at most {limit}" in refused.value.detail
    with pytest.raises(LiveError) as late:
        screen('{"x": "' + big + '", "type": "heartbeat"}', False, 0)
    assert late.value.code == "message_too_large" and "must begin with its type" in late.value.detail
    assert "begins '{\"x\": \"" in late.value.detail  # what arrived
    assert frame_type(b'\n {"type":"opening","rows": []}') == "opening"
    assert frame_type(b'\xff\xfe{"type": "x"}') is None  # not UTF-8: no type, refused unparsed when large


def test_addresses_count_an_ipv6_64_as_one() -> None:
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("::ffff:192.0.2.7") == address_key("192.0.2.7") == "192.0.2.7"
    assert address_key("testclient") == "testclient"  # not an address (test clients): kept as it is


def test_sessions_and_bytes_per_address() -> None:
    guard = AddressGuard(replace(CONFIG, live_sessions_per_address=2, live_bytes_per_s_per_address=1000,
                                 live_bytes_burst_per_address=10_000))
    assert guard.admit("a", 0.0) is None and guard.admit("a", 0.0) is None
    refused = guard.admit("a", 0.0)
    assert refused is not None and refused.code == "too_many_sessions" and "at most 2" in refused.detail
    assert guard.admit("b", 0.0) is None  # another address
    guard.leave("a")
    assert guard.admit("a", 0.0) is None
    assert guard.charge("a", 9_000, 0.0) is None
    over = guard.charge("a", 3_000, 0.0)  # 2,000 B in debt: 2 s at 1,000 B/s
    assert over is not None and over.code == "over_byte_budget" and over.retry_after_s == pytest.approx(2.0)
    guard.leave("a")
    late = guard.admit("a", 1.0)
    assert late is not None and late.code == "over_byte_budget" and late.retry_after_s == pytest.approx(1.0)
    assert guard.admit("a", 2.5) is None  # paid back


def test_a_charge_is_taken_even_beyond_what_is_left() -> None:
    buckets = TokenBuckets(100.0, 1000)
    assert buckets.charge("k", 600, 0.0) == 0.0 and buckets.debt_s("k", 0.0) == 0.0
    assert buckets.charge("k", 600, 0.0) == pytest.approx(2.0)  # 200 in debt at 100/s
    assert buckets.charge("k", 10**9, 0.0) == pytest.approx(10.0)  # the debt is held to one burst
    assert buckets.debt_s("k", 5.0) == pytest.approx(5.0) and buckets.take("k", 5.0) > 0
    assert buckets.debt_s("k", 10.5) == 0.0


def test_close_reasons_fit_a_close_frame() -> None:
    assert len(close_reason("é" * 100).encode()) <= 123 and close_reason("short") == "short"


def test_the_lag_of_a_window_includes_the_stall_in_progress() -> None:
    lag = LoopLag(0.05)
    lag.record(10.0, 0.001)
    lag.record(12.0, 0.8)  # the loop stalled over [11.2, 12.0]
    lag.record(13.0, 0.002)
    assert lag.worst_between(9.0, 11.0) == 0.001  # the stall began after this window
    assert lag.worst_between(11.5, 11.9) == 0.8
    assert lag.worst_between(12.5, 13.5) == 0.002
    lag.due = 14.0  # the monitor was due at 14.0 and has not woken yet
    assert lag.worst_between(13.5, 14.3) == pytest.approx(0.3)  # a frame read at 14.3 waited up to that long
    summary = lag.summary(13.0)
    assert summary["samples"] == 3 and summary["max_s"] == 0.8 and summary["p50_s"] == 0.002


def test_the_relays_lag_is_forgiven_up_to_the_deadline_and_no_further() -> None:
    deadline = CONFIG.roll_call_deadline_factor * CONFIG.roll_call_target_s
    assert lag_allowance(0.04, CONFIG) == 0.0  # noise: nothing forgiven
    assert lag_allowance(0.3, CONFIG) == 0.3 and lag_allowance(5.0, CONFIG) == CONFIG.loop_lag_allowance_max_s
    assert lag_forgiven(deadline + 0.2, 0.3, True, CONFIG) == deadline  # late only by the relay's stall: on time
    assert lag_forgiven(deadline + 0.4, 0.3, True, CONFIG) == deadline + 0.4  # later than the stall explains
    assert lag_forgiven(deadline - 0.5, 0.3, True, CONFIG) == deadline - 0.5  # on time: the relay's clock stands
    assert lag_forgiven(deadline + 0.2, 0.3, False, CONFIG) == deadline + 0.2  # a solo challenge: no deadline
