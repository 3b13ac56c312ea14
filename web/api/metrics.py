"""Prometheus metrics in the text exposition format (no client library needed for a handful)."""

from __future__ import annotations

from collections import Counter

BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_S) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, seconds: float) -> None:
        self.n += 1
        self.total += seconds
        for i, bound in enumerate(BUCKETS_S):
            if seconds <= bound:
                self.counts[i] += 1
                return
        self.counts[-1] += 1

    def render(self, name: str) -> list[str]:
        lines, running = [], 0
        for bound, count in zip(BUCKETS_S, self.counts, strict=False):
            running += count
            lines.append(f'{name}_bucket{{le="{bound}"}} {running}')
        lines += [f'{name}_bucket{{le="+Inf"}} {self.n}', f"{name}_sum {self.total:.6f}", f"{name}_count {self.n}"]
        return lines


class Metrics:
    def __init__(self) -> None:
        self.ingest = Counter[str]()          # by result code ("stored", "replaced", problem codes)
        self.ingest_seconds = Histogram()
        self.heartbeats = 0
        self.pongs = 0  # pongs of a bound session: its signs of life (docs/protocol.md "Liveness a phone can afford")
        self.ws_sessions = 0
        self.superseded = 0  # live sessions closed by a newer session of the same node (one key is one node)
        self.probes = 0                       # landmark probes completed (WS /v1/probe)
        self.cluster_received = Counter[str]()  # records from NATS by result (profiles, digests, transcripts)
        self.cluster_sent = Counter[str]()      # records this relay published, by kind
        self.peer_probes = Counter[str]()       # node-to-node probes: brokered, measured, and why others ended
        self.transcripts_audited = 0            # peer relays' transcripts whose work this relay re-checked
        # WS /v1/live frames and sessions refused, by code (web/sessions/live_guard.py)
        self.live_refused = Counter[str]()
        # roll-call challenges by how they left: written straight to the socket, or through ASGI
        # (web/sessions/direct_frames.py)
        self.roll_call_sends = Counter[str]()
        self.withdrawn = 0  # solo challenges withdrawn for a roll call (web/proof/challenge_desk.py make_way)

    def render(self, gauges: dict[str, float]) -> str:
        lines = ["# HELP ce_relay_ingest_total Profiles posted, by result code.",
                 "# TYPE ce_relay_ingest_total counter"]
        lines += [f'ce_relay_ingest_total{{code="{code}"}} {n}' for code, n in sorted(self.ingest.items())]
        lines += ["# HELP ce_relay_ingest_seconds Time to verify and durably store a posted profile.",
                  "# TYPE ce_relay_ingest_seconds histogram", *self.ingest_seconds.render("ce_relay_ingest_seconds")]
        lines += ["# TYPE ce_relay_heartbeats_total counter", f"ce_relay_heartbeats_total {self.heartbeats}",
                  "# TYPE ce_relay_pongs_total counter", f"ce_relay_pongs_total {self.pongs}",
                  "# HELP ce_relay_sessions_superseded_total Live sessions closed by a newer one of the same node.",
                  "# TYPE ce_relay_sessions_superseded_total counter",
                  f"ce_relay_sessions_superseded_total {self.superseded}",
                  "# TYPE ce_relay_cluster_received_total counter"]
        lines += [f'ce_relay_cluster_received_total{{result="{r}"}} {n}'
                  for r, n in sorted(self.cluster_received.items())]
        lines += ["# TYPE ce_relay_probes_total counter", f"ce_relay_probes_total {self.probes}",
                  "# TYPE ce_relay_cluster_sent_total counter"]
        lines += [f'ce_relay_cluster_sent_total{{kind="{k}"}} {n}' for k, n in sorted(self.cluster_sent.items())]
        lines += ["# HELP ce_relay_transcripts_audited_total Peer relays' transcripts whose work was re-checked.",
                  "# TYPE ce_relay_transcripts_audited_total counter",
                  f"ce_relay_transcripts_audited_total {self.transcripts_audited}"]
        lines += ["# HELP ce_relay_peer_probes_total Node-to-node probes brokered, and how each ended.",
                  "# TYPE ce_relay_peer_probes_total counter"]
        lines += [f'ce_relay_peer_probes_total{{outcome="{k}"}} {n}' for k, n in sorted(self.peer_probes.items())]
        lines += ["# HELP ce_relay_live_refused_total Live frames refused unparsed and sessions refused or closed "
                  "for their address's limits, by code.", "# TYPE ce_relay_live_refused_total counter"]
        lines += [f'ce_relay_live_refused_total{{code="{k}"}} {n}' for k, n in sorted(self.live_refused.items())]
        lines += ["# HELP ce_relay_roll_call_sends_total Roll-call challenges sent, by path: direct (a frame built "
                  "beforehand, written to the socket) or asgi.", "# TYPE ce_relay_roll_call_sends_total counter"]
        lines += [f'ce_relay_roll_call_sends_total{{path="{k}"}} {n}' for k, n in sorted(self.roll_call_sends.items())]
        lines += ["# HELP ce_relay_challenges_withdrawn_total Solo challenges withdrawn, unjudged, so their node "
                  "answers a roll call.", "# TYPE ce_relay_challenges_withdrawn_total counter",
                  f"ce_relay_challenges_withdrawn_total {self.withdrawn}"]
        for name, value in gauges.items():
            lines += [f"# TYPE {name} gauge", f"{name} {value}"]
        return "\n".join(lines) + "\n"
