"""The query contract against brute force on seeded random graphs, and its errors."""

from __future__ import annotations

import dataclasses
import heapq
import random
from typing import Any

import pytest

from capsule.model import LinkSample, NodeProfile
from capsule.typed import parse
from fabric.graph import FabricMap, UnknownNode
from fabric.vivaldi import Coordinate
from tests.samples import sample_profile

TEMPLATE = parse(NodeProfile, sample_profile()[1])


def typed(links: list[dict[str, Any]]) -> list[LinkSample]:
    """Edges as the map takes them (signatures are not the map's business: from_relay's input is verified by
    the relay, and tests/test_links.py reads a real relay)."""
    return [LinkSample(**{"jitter_ms": 0.0, "loss": 0.0, "bw_mbps": None, **link, "sig_a": "", "sig_b": ""})
            for link in links]

MapParts = tuple[FabricMap, dict[str, Coordinate], list[dict[str, Any]]]


def random_map(seed: int, n: int = 60, edges: int = 150) -> MapParts:
    rng = random.Random(seed)
    ids = [f"n{i:03d}" for i in range(n)]
    coords = {i: Coordinate([rng.uniform(-80, 80) for _ in range(8)], 0.2, rng.uniform(-1, 1), rng.uniform(0.01, 5))
              for i in ids}
    links = []
    for t in range(edges):
        a, b = rng.sample(ids, 2)
        links.append({"a": a, "b": b, "rtt_ms": rng.uniform(1, 200), "jitter_ms": 0.5, "loss": 0.0,
                      "bw_mbps": rng.choice([None, rng.uniform(10, 1000)]), "measured_at": 1000 + t})
    profiles = [dataclasses.replace(TEMPLATE, node_id=i) for i in ids]
    return FabricMap(profiles, coords, typed(links), {"nodes": n}), coords, links


def brute_dijkstra(links: list[dict[str, Any]], a: str, b: str) -> float | None:
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for link in links:
        for key in ((link["a"], link["b"]), (link["b"], link["a"])):
            if key not in latest or latest[key]["measured_at"] <= link["measured_at"]:
                latest[key] = link
    adj: dict[str, list[tuple[str, float]]] = {}
    for (x, y), link in latest.items():
        adj.setdefault(x, []).append((y, float(link["rtt_ms"])))
    dist, heap = {a: 0.0}, [(0.0, a)]
    while heap:
        d, x = heapq.heappop(heap)
        if x == b:
            return d
        for y, w in adj.get(x, []):
            if d + w < dist.get(y, float("inf")):
                dist[y] = d + w
                heapq.heappush(heap, (d + w, y))
    return None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_contract_matches_brute_force(seed: int) -> None:
    fmap, coords, links = random_map(seed)
    ids = sorted(coords)
    for node in ids[:15]:
        brute = sorted((coords[node].distance(coords[o]), o) for o in ids if o != node)
        assert fmap.k_nearest(node, 7) == [o for _, o in brute[:7]]
        for other in ids[:10]:
            assert fmap.predicted_rtt(node, other) == pytest.approx(coords[node].distance(coords[other]))
    for a, b in [(ids[0], ids[-1]), (ids[5], ids[17]), (ids[2], ids[40])]:
        path = fmap.shortest_path(a, b)
        expected = brute_dijkstra(links, a, b)
        if expected is None:
            assert path == []
        else:
            assert path[0] == a and path[-1] == b
            total = sum(fmap.measured_rtt(x, y) or 0 for x, y in zip(path, path[1:], strict=False))
            assert total == pytest.approx(expected)
    last = {}
    for link in links:
        last[(link["a"], link["b"])] = last[(link["b"], link["a"])] = link
    (x, y), link = next(iter(last.items()))
    assert fmap.measured_rtt(x, y) == link["rtt_ms"] and fmap.bandwidth(x, y) == link["bw_mbps"]
    assert fmap.profile(ids[0]).node_id == ids[0] and fmap.profile(ids[0]).cpu.cores == 2


def test_regions_split_two_distant_clusters() -> None:
    rng = random.Random(5)
    coords = {}
    for c, center in enumerate((-200.0, 200.0)):
        for i in range(10):
            coords[f"c{c}-{i}"] = Coordinate([center + rng.uniform(-3, 3)] + [rng.uniform(-3, 3) for _ in range(7)],
                                             0.1, 0.0, 0.5)
    regions = FabricMap([], coords).regions()
    assert sorted(map(len, regions)) == [10, 10]
    assert {n[:2] for n in regions[0]} in ({"c0"}, {"c1"})


def test_mesh_fields() -> None:
    links = [{"a": "x", "b": "y", "rtt_ms": 10.0, "measured_at": 1},
             {"a": "y", "b": "z", "rtt_ms": 30.0, "measured_at": 1}]
    coords = {n: Coordinate([float(i * 100)] + [0.0] * 7, 0.1) for i, n in enumerate("xyzw")}
    mesh = FabricMap([], coords, typed(links)).mesh()
    assert mesh["median_rtt_ms"] == 20.0
    assert mesh["reachable_frac"] == pytest.approx(6 / 12)  # x,y,z reach each other; w reaches nobody
    assert mesh["regions"] == 4
    assert FabricMap([], coords).mesh() == {"median_rtt_ms": None, "reachable_frac": None, "regions": None}


def test_unknown_nodes_and_bad_k() -> None:
    fmap, coords, _ = random_map(1, n=5, edges=3)
    with pytest.raises(UnknownNode, match="unknown node 'nope'"):
        fmap.predicted_rtt("nope", "n000")
    with pytest.raises(UnknownNode):
        fmap.k_nearest("nope", 3)
    with pytest.raises(UnknownNode):
        fmap.profile("nope")
    with pytest.raises(ValueError, match="k must be >= 1"):
        fmap.k_nearest("n000", 0)
    assert len(fmap.k_nearest("n000", 99)) == 4
    assert fmap.measured_rtt("n000", "nope") is None


def test_from_relay_refuses_a_profile_that_is_not_a_node_profile() -> None:
    """A relay is a peer: what it serves is parsed, and a bad record is named. A real relay never serves one,
    so a stand-in HTTP server on 127.0.0.1 injects it (failure injection)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from capsule.typed import ValidationError

    bad = sample_profile()[1]
    bad["cpu"]["cores"] = -3
    answers = {"/atlas?limit=1000&cursor=": {"nodes": [sample_profile()[1], bad], "next_cursor": None},
               "/netgraph": {"nodes": [], "edges": []}, "/stats": {"nodes": 2}}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = json.dumps(answers[self.path]).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ValidationError) as info:
            FabricMap.from_relay(f"http://127.0.0.1:{server.server_address[1]}")
        assert info.value.path == "$.nodes[1].cpu.cores", info.value.path
        assert "got -3" in str(info.value)
    finally:
        server.shutdown()
