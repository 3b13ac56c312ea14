"""Data model v1: round trips, precise validation errors, signatures that break on any tampering, and the
shipped JSON Schemas in step with the code."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from capsule.canonical import canonical_bytes, signing_message
from capsule.model import LinkSample, NodeProfile
from capsule.peerid import PeerIdError
from capsule.schemas import SCHEMA_DIR, rendered
from capsule.signing import SignatureError, sign, verify_record
from capsule.typed import ValidationError, parse, to_json
from common.keys import NodeKey
from tests.samples import mutated, sample_profile


def test_round_trip() -> None:
    _, profile = sample_profile()
    record = verify_record("NodeProfile", profile)
    assert isinstance(record, NodeProfile)
    assert to_json(record) == profile
    assert canonical_bytes(to_json(record)) == canonical_bytes(profile)
    # JSON text round trip keeps the signature valid
    verify_record("NodeProfile", json.loads(json.dumps(profile, indent=3)))


@pytest.mark.parametrize(("path", "value", "message"), [
    ("cpu.cores", -3, "$.cpu.cores: expected an integer in [1, 4294967295], got -3"),
    ("cpu.cores", 2.5, "$.cpu.cores: expected an integer"),
    ("cpu.cores", True, "$.cpu.cores: expected an integer"),
    ("cpu.gflops_fp32", "fast", "$.cpu.gflops_fp32: expected a number >= 0, got a string 'fast'"),
    ("cpu.gflops_fp32", -1.0, "$.cpu.gflops_fp32: expected a number >= 0, got -1.0"),
    ("cpu.gflops_fp32", math.inf, "$.cpu.gflops_fp32: expected a finite number"),
    ("cpu.gflops_fp32", math.nan, "$.cpu.gflops_fp32: expected a finite number"),
    ("gpus.0.backend", "glide", "$.gpus[0].backend: expected one of webgpu, vulkan"),
    ("gpus.0.vram_mb", -1, "$.gpus[0].vram_mb: expected an integer in [0, 4294967295]"),
    ("gpus", {}, "$.gpus: expected an array, got an object"),
    ("runtime.kind", "phone", "$.runtime.kind: expected one of server, browser"),
    ("runtime.docker", "no", "$.runtime.docker: expected a boolean, got a string"),
    ("llm.tokens_per_sec", None, None),  # null is allowed: a figure that could not be measured
    ("storage.read_mbps", None, None),
    ("memory.total_mb", "-", "$.memory.total_mb: required field is missing"),
    ("node_id", "QmNotAnEd25519Key", "$.node_id: expected a string matching 12D3KooW"),
    ("node_id", "12D3KooW" + "1" * 44, "$.node_id: expected the identity multihash"),
    ("capsule.sha256", "XYZ", "$.capsule.sha256: expected a string matching [0-9a-f]{64}"),
    ("measured_at", 2**41, "$.measured_at: expected an integer in [0, 1099511627776]"),
    ("beacon.round", -1, "$.beacon.round: expected an integer >= 0"),
    ("sig", "short", "$.sig: expected a string matching"),
    ("v", 2, "$.v: expected an integer in [1, 1], got 2"),
    ("cpu.turbo", True, "$.cpu.turbo: unknown field (expected only: cores, threads, gflops_fp32, mem_bw_gbps)"),
])
def test_every_field_is_validated(path: str, value: Any, message: str | None) -> None:
    _, profile = sample_profile()
    bad = mutated(profile, path, value)
    if message is None:
        parse(NodeProfile, bad)  # schema-valid (the signature no longer matches, which is the next layer)
        with pytest.raises(SignatureError):
            verify_record("NodeProfile", bad)
        return
    with pytest.raises(ValidationError) as info:
        verify_record("NodeProfile", bad)
    assert str(info.value).startswith(message), str(info.value)


def test_not_an_object() -> None:
    with pytest.raises(ValidationError, match=r"^\$: expected an object, got an array"):
        parse(NodeProfile, [1, 2])


def test_tampering_any_byte_breaks_verification() -> None:
    """Change every byte of the signed JSON in turn: each result is refused (bad JSON, schema or signature),
    unless it still means exactly the same object (e.g. 1e-05 vs 1E-05)."""
    _, profile = sample_profile()
    text = json.dumps(profile, separators=(",", ":")).encode()
    original = canonical_bytes(profile)
    accepted_changes = 0
    for i in range(len(text)):
        for flip in (0x01, 0x20):
            changed = bytearray(text)
            changed[i] ^= flip
            try:
                candidate = json.loads(changed)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue  # no longer JSON
            try:
                verify_record("NodeProfile", candidate)
            except (ValidationError, SignatureError, PeerIdError):
                continue  # refused with the project's own errors; anything else is a bug (a 500 at a relay)
            assert canonical_bytes(candidate) == original, f"byte {i} changed the profile and still verified"
            accepted_changes += 1
    assert accepted_changes < len(text) // 50


def test_signature_from_another_key_is_refused() -> None:
    key, profile = sample_profile()
    forged = sign("NodeProfile", profile, NodeKey.generate())
    with pytest.raises(SignatureError, match=rf"\$.sig: signature does not verify for {key.node_id}"):
        verify_record("NodeProfile", forged)


def test_domain_separation() -> None:
    """A signature over the same bytes for another kind does not verify."""
    key, profile = sample_profile()
    assert signing_message("NodeProfile", profile) != signing_message("Heartbeat", profile)
    as_heartbeat = sign("Heartbeat", profile, key)
    with pytest.raises(SignatureError):
        verify_record("NodeProfile", as_heartbeat)


def test_link_sample_needs_both_signatures() -> None:
    a, b = NodeKey.generate(), NodeKey.generate()
    body = {"a": a.node_id, "b": b.node_id, "rtt_ms": 12.5, "jitter_ms": 0.8, "loss": 0.0, "bw_mbps": None,
            "measured_at": 1764680000}
    both = sign("LinkSample", sign("LinkSample", body, a, "sig_a"), b, "sig_b")
    assert isinstance(verify_record("LinkSample", both), LinkSample)
    one_sided = sign("LinkSample", sign("LinkSample", body, a, "sig_a"), a, "sig_b")
    with pytest.raises(SignatureError, match=r"\$.sig_b"):
        verify_record("LinkSample", one_sided)
    self_link = sign("LinkSample", sign("LinkSample", {**body, "b": a.node_id}, a, "sig_a"), a, "sig_b")
    with pytest.raises(ValidationError, match=r"^\$\.b: a LinkSample needs 2 different signers; b repeats a"):
        verify_record("LinkSample", self_link)
    with pytest.raises(ValidationError, match=r"\$.loss: expected a number in \[0, 1\]"):
        verify_record("LinkSample", {**both, "loss": 1.5})


def test_shipped_schemas_match_the_code() -> None:
    for name, text in rendered().items():
        assert (SCHEMA_DIR / name).read_text() == text, f"{name} drifted: run python -m capsule.schemas"


def test_schema_describes_units_and_nulls() -> None:
    schema = json.loads((SCHEMA_DIR / "NodeProfile.schema.json").read_text())
    gflops = schema["properties"]["cpu"]["properties"]["gflops_fp32"]
    assert {"type": "null"} in gflops["anyOf"]
    assert "GFLOP/s" in gflops["anyOf"][0]["description"]
    assert schema["additionalProperties"] is False


def test_a_name_is_signed_text_in_one_form() -> None:
    """The operator's name (issue 47): signed with the rest, absent or a string (never null: one signed form),
    and only what a page and a terminal show as text."""
    _, named = sample_profile(name="rack 7 – Küche")
    record = verify_record("NodeProfile", named)
    assert record.name == "rack 7 – Küche" and to_json(record) == named
    _, plain = sample_profile()
    assert "name" not in plain and "name" not in to_json(verify_record("NodeProfile", plain))  # as signed
    with pytest.raises(ValidationError, match=r"\$\.name: expected a value, or the field left out; got null"):
        parse(NodeProfile, {**plain, "name": None})
    for bad in (" lead", "trail ", "x" * 65, "a\nb", "a\u202eb", "esc\x1b[31m", "c1\x9b31m", "", "zero\u200bwidth",
                "rtl\u200fmark", "12D3KooWSomeoneElse"):
        with pytest.raises(ValidationError, match=r"\$\.name: expected (a string|at most 64)"):
            parse(NodeProfile, {**plain, "name": bad})
    forged = {**named, "name": "someone else"}  # the name is under the signature
    with pytest.raises(SignatureError):
        verify_record("NodeProfile", forged)
