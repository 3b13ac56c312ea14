"""Peer relays' transcripts re-checked on a secret draw (`--transcript-audit-fraction`): the draw follows the
fraction and cannot be told from the transcript; a peer whose checked transcript fails is re-checked on every
transcript afterwards. The desk is a real in-process Relay (its store on disk), the transcripts are genuine
answers of the capsule's reactor, signed by a peer's key; the cheater here is that peer relay, which signs
work it altered."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from capsule.signing import sign
from common.keys import NodeKey
from tests.samples import sample_profile
from tests.threaded import in_thread
from tests.transcripts import answered_transcript
from web.api.summary import ProfileSummary
from web.config import RelayConfig
from web.proof.transcripts import PeerAudit, TranscriptError, audit_drawn
from web.relay import Relay


def test_the_draw_follows_the_fraction_and_the_relays_secret() -> None:
    bodies = [{"sig": secrets.token_urlsafe(64)} for _ in range(4000)]
    one, other = secrets.token_bytes(32), secrets.token_bytes(32)
    for fraction in (0.05, 0.5):
        drawn = [audit_drawn(one, b, fraction) for b in bodies]
        expected, sd = 4000 * fraction, (4000 * fraction * (1 - fraction)) ** 0.5
        assert abs(sum(drawn) - expected) < 5 * sd, (fraction, sum(drawn))  # 5 sd: fails once in 1.7 million
        assert drawn == [audit_drawn(one, b, fraction) for b in bodies]  # the same transcript, the same draw
        overlap = sum(a and audit_drawn(other, b, fraction) for a, b in zip(drawn, bodies, strict=True))
        assert abs(overlap - expected * fraction) < 5 * (expected * fraction) ** 0.5 + 5  # another relay: independent
    assert not any(audit_drawn(one, b, 0.0) for b in bodies) and all(audit_drawn(one, b, 1.0) for b in bodies)
    audit = PeerAudit(0.0)
    assert not audit.due(one, "peer", bodies[0])
    audit.failed("peer", "entries off")
    assert audit.due(one, "peer", bodies[0]) and not audit.due(one, "other", bodies[0])


def run(coroutine: Any) -> None:
    """On a loop of its own thread: a browser test before this one leaves playwright's loop in this thread."""
    in_thread(asyncio.run, coroutine)


def altered(body: dict[str, Any]) -> dict[str, Any]:
    """The same answer with every value of the first opened row changed (the work is no longer the product)."""
    out: dict[str, Any] = json.loads(json.dumps(body))
    row = out["challenge"]["opened"][0]
    values = np.frombuffer(base64.b64decode(row["values"]), "<f4").copy()
    values[:] += 1.0
    row["values"] = base64.b64encode(values.tobytes()).decode()
    return out


def own_nonce(body: dict[str, Any], i: int) -> dict[str, Any]:
    """The transcript of another challenge (its nonce changed: the seeds, and so the work, differ)."""
    out: dict[str, Any] = json.loads(json.dumps(body))
    out["challenge"]["nonce"] = out["challenge"]["nonce"][:-4] + f"{i:04x}"
    return out


@pytest.fixture
def desk_of(tmp_path: Path) -> Any:
    relays: list[Relay] = []

    def make(peer: NodeKey, node: NodeKey, fraction: float) -> Relay:
        relay = Relay(RelayConfig(data_dir=tmp_path / f"relay{len(relays)}", cluster_peers=(peer.node_id,),
                                  transcript_audit_fraction=fraction))
        _, profile = sample_profile(node)
        relay.atlas.put(ProfileSummary.of_profile(profile), peer.node_id, 0.0)
        relays.append(relay)
        return relay

    yield make
    for relay in relays:
        relay.store.close()


def test_a_peer_signing_altered_work_is_caught_then_checked_every_time(desk_of: Any, artifacts: Any) -> None:
    peer, node = NodeKey.generate(), NodeKey.generate()
    genuine = answered_transcript(artifacts.reactor, peer.node_id, node.node_id, 20.0, 1, 0.2)

    # every transcript checked (the default): the genuine one is recorded, the altered one refused
    strict = desk_of(peer, node, 1.0)
    run(strict.challenges.apply_transcript(sign("Transcript", genuine, peer)))
    assert strict.metrics.transcripts_audited == 1 and strict.challenges.trust[node.node_id].passes_total == 1
    with pytest.raises(TranscriptError) as refused:
        run(strict.challenges.apply_transcript(sign("Transcript", own_nonce(altered(genuine), 1), peer)))
    assert refused.value.code == "wrong_transcript" and strict.challenges.trust[node.node_id].passes_total == 1
    # the genuine one again (re-published by anyone, signed by the peer): taken once, a replay changes nothing
    for _ in range(3):
        with pytest.raises(TranscriptError) as replayed:
            run(strict.challenges.apply_transcript(sign("Transcript", genuine, peer)))
        assert replayed.value.code == "replayed"
    assert strict.challenges.trust[node.node_id].passes_total == 1
    stale = sign("Transcript", {**own_nonce(genuine, 2), "at": genuine["at"] - 3600}, peer)
    with pytest.raises(TranscriptError) as old:
        run(strict.challenges.apply_transcript(stale))
    assert old.value.code == "stale" and strict.challenges.trust[node.node_id].passes_total == 1

    # half checked: altered transcripts (each signed afresh, so each is a new draw) pass unchecked until the
    # first one drawn fails; from then on every one is checked and refused
    sampled = desk_of(peer, node, 0.5)
    # a challenge of its own each (a peer's transcript is taken once per challenge nonce)
    transcripts = [sign("Transcript", own_nonce(altered(genuine), 16 + i), peer) for i in range(40)]
    # the relay's secret chosen so that the first one is not drawn: the "believed until caught" path always
    # runs (with a random secret it did not in about half the runs); the draws after it are the secret's own
    sampled.challenges.peers.secret = next(s for s in (bytes([i]) * 32 for i in range(256))
                                     if not audit_drawn(s, transcripts[0], 0.5))
    outcomes = []
    for fresh in transcripts:
        try:
            run(sampled.challenges.apply_transcript(fresh))
            outcomes.append("believed")
        except TranscriptError as exc:
            outcomes.append(exc.code)
    first = outcomes.index("wrong_transcript")
    assert first >= 1, outcomes  # the precondition: at least one was believed unchecked before the catch
    assert set(outcomes[:first]) <= {"believed"} and set(outcomes[first:]) == {"wrong_transcript"}, outcomes
    assert peer.node_id in sampled.challenges.peers.audit.caught
    assert sampled.metrics.transcripts_audited == 0  # none of the checked ones passed
    believed = sampled.challenges.trust.get(node.node_id)
    assert (believed.passes_total if believed else 0) == first  # what was believed before the catch
    assert first < 20  # a check at one chance in two: 20 misses in a row have odds 1 in a million


def test_a_transcript_refused_for_its_form_or_physics_catches_its_peer_unchecked(desk_of: Any,
                                                                               artifacts: Any) -> None:
    """Believed without a re-check (fraction 0), a transcript must still have the form of a passed answer and
    stay within physics; one that does not catches its peer, whose transcripts are all re-checked after."""
    peer, node = NodeKey.generate(), NodeKey.generate()
    genuine = answered_transcript(artifacts.reactor, peer.node_id, node.node_id, 20.0, 1, 0.2)
    no_roots = json.loads(json.dumps(genuine))
    no_roots["challenge"]["roots"] = []
    too_fast = json.loads(json.dumps(genuine))
    too_fast["challenge"]["commit_s"] = 1e-6  # the same work in a microsecond: beyond any CPU
    for bad, code in ((no_roots, "invalid_transcript"), (too_fast, "wrong_transcript")):
        relay = desk_of(peer, node, 0.0)
        with pytest.raises(TranscriptError) as refused:
            run(relay.challenges.apply_transcript(sign("Transcript", bad, peer)))
        assert refused.value.code == code and peer.node_id in relay.challenges.peers.audit.caught
        run(relay.challenges.apply_transcript(sign("Transcript", genuine, peer)))
        assert relay.metrics.transcripts_audited == 1  # caught: the genuine one after it was re-checked
        assert relay.challenges.trust[node.node_id].passes_total == 1


def llm_transcript(reactor: Path, relay_id: str, node_id: str, nonce: str) -> dict[str, Any]:
    """A passed reference-model transcript: the tokens decoded by the capsule, one drawn and checked."""
    import random
    import time

    from common.reactor import Reactor
    from web.proof.challenges import new_llm_challenge, on_commit
    from web.proof.transcripts import transcript_body

    config = RelayConfig()
    beacon: dict[str, Any] = {"round": 1, "value": "ab" * 32}
    ch = new_llm_challenge(node_id, 100.0, beacon, nonce, 1.0, time.perf_counter(), config, 0.3)
    node = Reactor(reactor)
    node.llm_begin(ch.seeds[0])
    tokens = [node.llm_next() for _ in range(ch.decode)]
    on_commit(ch, {"tokens": tokens}, time.perf_counter(), random.Random(2), config)
    return transcript_body(relay_id, ch, beacon["value"], True, "passed", None, True, time.time())


def test_a_peer_passing_a_guessed_token_is_caught_at_the_token_it_checked(desk_of: Any, artifacts: Any) -> None:
    """A reference-model transcript carries the tokens and the index its relay checked; an audit checks that
    token again on this relay's reactor: genuine tokens are recorded, a guess at the checked index is
    wrong_transcript, ids outside the vocabulary or an index outside the tokens are invalid_transcript."""
    peer, node = NodeKey.generate(), NodeKey.generate()
    genuine = llm_transcript(artifacts.reactor, peer.node_id, node.node_id, "ef" * 16)
    c = genuine["challenge"]
    assert c["tokens_checked"] is True and 0 <= c["checked_token"] < len(c["tokens"]) == c["decode"] == 30
    relay = desk_of(peer, node, 1.0)
    relay.challenges.peers.config = relay.config = dataclasses.replace(relay.config, transcript_llm_audit_fraction=1.0)
    run(relay.challenges.apply_transcript(sign("Transcript", genuine, peer)))
    assert relay.metrics.transcripts_audited == 1 and relay.challenges.trust[node.node_id].passes_total == 1

    guessed = own_nonce(genuine, 1)
    guessed = llm_transcript(artifacts.reactor, peer.node_id, node.node_id, guessed["challenge"]["nonce"])
    j = guessed["challenge"]["checked_token"]
    guessed["challenge"]["tokens"][j] = (guessed["challenge"]["tokens"][j] + 1) % 32000
    with pytest.raises(TranscriptError) as caught:
        run(relay.challenges.apply_transcript(sign("Transcript", guessed, peer)))
    assert caught.value.code == "wrong_transcript" and f"token {j}" in caught.value.detail
    assert relay.challenges.trust[node.node_id].passes_total == 1
    assert peer.node_id in relay.challenges.peers.audit.caught

    for i, change in enumerate(({"tokens": [32000] * 30}, {"checked_token": 30}, {"tokens": None},
                                {"tokens": [1] * 31})):
        bad = own_nonce(genuine, 10 + i)
        bad["challenge"].update(change)
        with pytest.raises(TranscriptError) as refused:
            run(relay.challenges.apply_transcript(sign("Transcript", bad, peer)))
        assert refused.value.code == "invalid_transcript", (change, refused.value.detail)
