"""A node in the network-namespace harness: `python netns_node.py SECONDS URL...` registers a profile with
every relay URL (each reached through a delaying forwarder) and keeps a live session with each, so every
relay measures and co-signs this node's link to it. CE_BENCH_HOME holds its key."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.keys import load_or_create  # noqa: E402
from host_runner.live_client import LiveSession  # noqa: E402
from tests.samples import sample_profile  # noqa: E402


def main() -> None:
    seconds, urls = float(sys.argv[1]), sys.argv[2:]
    key = load_or_create()
    sessions = []
    for url in urls:
        beacon = json.loads(urllib.request.urlopen(url + "/beacon", timeout=20).read())
        _, profile = sample_profile(key, beacon=beacon)
        req = urllib.request.Request(url + "/v1/profiles", data=json.dumps(profile).encode(), method="POST",
                                     headers={"content-type": "application/json"})
        urllib.request.urlopen(req, timeout=20).read()
        sessions.append(LiveSession(url, key).start())
    time.sleep(seconds)
    for s in sessions:
        s.stop()
    print(json.dumps({"node_id": key.node_id, "links": [s.links for s in sessions],
                      "errors": [s.errors[:2] for s in sessions]}))


if __name__ == "__main__":
    main()
