"""The relay's pure core with a controlled clock: beacon windows, liveness, exact incremental stats."""

from __future__ import annotations

import json
import random

import pytest

from common.keys import NodeKey
from tests.samples import sample_profile
from web.api.ingest import BeaconBook, Ingest
from web.api.problems import Problem
from web.api.ratelimit import TokenBuckets
from web.api.summary import ProfileSummary
from web.beacon import next_round
from web.config import RelayConfig
from web.map.atlas import Atlas
from web.map.stats import Contribution, FabricStats
from web.sessions.liveness import Liveness

CONFIG = RelayConfig()


def core() -> tuple[Ingest, Atlas, dict[str, object], NodeKey]:
    relay_key = NodeKey.generate()
    atlas = Atlas(CONFIG, relay_key.node_id)
    book = BeaconBook(relay_key.node_id, CONFIG.beacon_keep_rounds)
    beacon = next_round(None, relay_key, now=1_000_000)
    book.add(beacon)
    return Ingest(CONFIG, atlas, book), atlas, beacon, relay_key


def test_beacon_window() -> None:
    ingest, _, beacon, _ = core()
    _, profile = sample_profile(beacon=beacon, measured_at=1_000_010)
    body = json.dumps(profile).encode()
    ingest.check(body, now=1_000_020)  # fresh
    with pytest.raises(Problem) as info:
        ingest.check(body, now=1_000_000 + CONFIG.beacon_window_s + 1)
    assert (info.value.code, info.value.field) == ("stale_beacon", "$.beacon.round")


def test_expired_rounds_are_forgotten() -> None:
    key = NodeKey.generate()
    book = BeaconBook(key.node_id, keep=3)
    prev = None
    for _ in range(6):
        prev = next_round(prev, key)
        book.add(prev)
    assert sorted(book.rounds) == [3, 4, 5] and book.latest is prev


def test_beacon_chain_links_rounds() -> None:
    key = NodeKey.generate()
    r0 = next_round(None, key)
    r1 = next_round(r0, key)
    assert r1["prev"] == r0["value"] and r1["round"] == 1 and r0["prev"] == ""
    assert next_round(r0, key)["value"] != r1["value"]  # fresh randomness every round


def test_liveness_sweeps_in_order() -> None:
    live = Liveness(timeout_s=30)
    assert live.touch("a", 0) and live.touch("b", 10) and not live.touch("a", 20)
    assert live.sweep(35) == [] and live.sweep(41) == ["b"] and live.sweep(51) == ["a"] and len(live) == 0


def test_atlas_counts_each_node_once_and_only_while_live() -> None:
    _, atlas, beacon, _ = core()
    key, p1 = sample_profile(beacon=beacon, gflops=10.0)
    atlas.put(ProfileSummary.of_profile(p1), atlas.relay_id, now=0)
    _, p2 = sample_profile(key, beacon=beacon, gflops=30.0)
    atlas.put(ProfileSummary.of_profile(p2), atlas.relay_id, now=1)
    assert atlas.global_stats.snapshot()["nodes"] == 1 and atlas.global_stats.snapshot()["cpu_gflops"] == 30.0
    assert atlas.sweep(now=1 + CONFIG.offline_after_s + 1) == [key.node_id]
    assert atlas.global_stats.snapshot()["nodes"] == 0 and atlas.live_sorted() == []
    assert atlas.heartbeat(key.node_id, now=100)
    assert atlas.global_stats.snapshot()["cpu_gflops"] == 30.0
    assert not atlas.heartbeat(NodeKey.generate().node_id, now=100)  # unknown nodes are not counted


def test_incremental_stats_have_no_drift() -> None:
    stats = FabricStats(CONFIG.perf_reference, CONFIG.perf_weights)
    rng = random.Random(7)
    live: dict[str, Contribution] = {}
    for _step in range(20_000):
        node = f"n{rng.randrange(300)}"
        if rng.random() < 0.3:
            stats.set_offline(node)
            live.pop(node, None)
        else:
            c = Contribution(cores=rng.randrange(1, 64), cpu_mgflops=round(rng.uniform(0, 5000) * 1000),
                             mtokens_per_sec=round(rng.uniform(0, 900) * 1000))
            stats.set_live(node, c)
            live[node] = c
    snap = stats.snapshot()
    assert snap["nodes"] == len(live)
    assert snap["cpu_cores"] == sum(c.cores for c in live.values())
    assert snap["cpu_gflops"] == sum(c.cpu_mgflops for c in live.values()) / 1000


def test_token_buckets() -> None:
    buckets = TokenBuckets(rate_per_s=2, burst=3, max_keys=2)
    assert [buckets.take("a", 0) for _ in range(3)] == [0, 0, 0]
    assert buckets.take("a", 0) == pytest.approx(0.5)
    assert buckets.take("a", 0.6) == 0
    buckets.take("b", 1)
    buckets.take("c", 1)  # evicts "a", the least recently used
    assert buckets.take("a", 1) == 0


def test_the_atlas_keeps_a_typed_summary_of_each_profile() -> None:
    _, profile = sample_profile(gflops=64.5, tps=120.0)
    # unsigned edit: the summary reads, not verifies
    profile["evidence"]["cpu"]["gflops_fp32"] = {"n": 1024, "instances": [{"seed": "a"}, {"seed": "b"}, {"seed": "c"}]}
    summary = ProfileSummary.of_profile(profile)
    assert summary.contribution == Contribution(cores=2, cpu_mgflops=64_500, gpus=1, gpu_vram_mb=0, gpu_utflops=2_000,
                                                mtokens_per_sec=120_000, storage_free_gb=80)
    assert (summary.claimed_gflops, summary.instances, summary.sgemm_n, summary.claimed_tps) == (64.5, 3, 1024, 120.0)
    assert summary.figures() == {"measured_at": profile["measured_at"], "cpu_gflops": 64.5, "mem_bw_gbps": 29.25,
                                 "tokens_per_sec": 120.0, "gpu_fp16_tflops": 0.002, "storage_read_mbps": 1700.0}
    assert ProfileSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary
    older = json.loads(json.dumps(summary.to_json()))  # stored before GPU TFLOP/s were micro-units
    older["contribution"]["gpu_mtflops"] = older["contribution"].pop("gpu_utflops") // 1000
    assert ProfileSummary.from_json(older) == summary
    # evidence is an open object: an odd shape there yields no SGEMM order, never an error
    profile["evidence"]["cpu"] = ["not", "an", "object"]
    odd = ProfileSummary.of_profile(profile)
    assert odd.sgemm_n is None and odd.instances == 2  # cpu.cores
