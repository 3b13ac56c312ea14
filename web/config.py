"""Every relay default in one place, with its unit and why (Serf's coordinate/config.go is the model)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from web.jobs.config import JobsConfig


@dataclass(frozen=True)
class RelayConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("ce-relay-data")
    # NATS server URL for a relay cluster (None: this relay stands alone on its SQLite store).
    nats_url: str | None = None
    # The NATS user this relay connects as (web/cluster/nats_auth.py): a user of the nats-server's authorization block,
    # its password read from nats_password_file (one line, mode 0600) or the CE_NATS_PASSWORD environment
    # variable, never from the command line (`ps` shows that to every local user). None: no credentials, which
    # only a server without authorization accepts, and there anyone who connects may publish records on the
    # relays' subjects.
    nats_user: str | None = None
    nats_password_file: Path | None = None
    # A relay refuses to start on a nats-server that admits a client without credentials (web/cluster/nats_auth.py
    # check(): it tries one), unless told so: there one relay's anonymous neighbour can forge the cluster's view.
    nats_insecure: bool = False
    # A relay starting while its NATS server cannot be reached tries again this long, saying so, then exits with a
    # one-line error (before, it logged "Connection refused" twice a second forever and ignored SIGTERM). Long
    # enough for a compose file or systemd to bring the server up beside it.
    nats_connect_wait_s: float = 30.0
    # Where nodes reach this relay (http[s]://HOST:PORT), announced in its live digests: the nodes of the
    # other relays of the cluster probe it as a landmark (WS /v1/probe). None: not announced.
    public_url: str | None = None
    # Landmark probes (web/map/probe_endpoint.py): pings this far apart, each step answered within the timeout.
    probe_ping_gap_s: float = 0.1
    probe_step_timeout_s: float = 5.0
    # The relays of a cluster probe each other (WS /v1/probe of each peer's public_url) this often: the
    # landmarks' own mesh, on which the coordinate fit places every node (web/map/links.py).
    landmark_mesh_interval_s: float = 60.0
    nats_bucket: str = "ce-atlas"
    # Dispatched work (web/jobs/config.py: submitters, quotas, audit share, deadlines)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    # A cluster that grows by region (web/cluster/regions.py, docs/manual.md "Sizing a cluster"): this relay's
    # region. Its liveness digests, link samples and challenge transcripts stay on the region's subjects (NATS forwards
    # them over a leaf connection only where someone subscribes), and its roll-call totals are published for
    # the other regions to sum. None: one flat cluster, every subject shared.
    region: str | None = None
    # The JetStream domain of the cluster's key-value buckets (the hub's `jetstream { domain: ... }`) when this
    # relay's nats-server is a leaf node of that hub; None: the server's own JetStream.
    nats_domain: str | None = None
    # The relay's libp2p host (docs/mesh.md): TCP + Noise + Yamux, identify, ping, gossipsub on the mesh's
    # topics, with the relay's key (PeerId = relay id). Where it listens, a multiaddr: port 0 is one the OS
    # picks, announced at GET /v1/libp2p (give a fixed port where other peers keep the relay in a bootstrap
    # list); the CLI's default is the --host address (loopback unless the operator opens the relay up);
    # None: no libp2p host (--no-libp2p). libp2p_announce: multiaddrs announced instead of the listening ones
    # (a public address in front of NAT or a port forward).
    libp2p_listen: str | None = "/ip4/127.0.0.1/tcp/0"
    libp2p_announce: tuple[str, ...] = ()
    # Reverse proxies whose X-Forwarded-For is believed (addresses); none by default: the peer address counts.
    trusted_proxies: tuple[str, ...] = ()
    # The other relays of this cluster (their relay ids, `ce-bench relay --cluster-peer ID`): their challenge
    # transcripts, beacon rounds and live digests are believed (after re-checking the work); anyone else's
    # are not. The relay with the lowest id among those heard from leads: its beacon rounds draw roll calls.
    cluster_peers: tuple[str, ...] = ()

    # Processes that verify posted profiles (JSON, schema, signature) beside the event loop; 0 verifies
    # in-process. BENCHMARKS.md ("Relay") has the measured effect on a 2-core machine.
    verify_workers: int = 0

    # Ingest. A NodeProfile with full evidence is ~6 KiB; 64 KiB leaves room for many GPUs.
    max_body_bytes: int = 64 * 1024
    # A profile's measured_at may be this far ahead of the relay's clock (NTP-less phones drift).
    clock_skew_s: float = 60.0
    # A profile must cite a beacon round issued at most this long before it arrives: a full run with
    # start jitter takes ~15 s; 15 min covers slow phones and a retry from the outbox soon after.
    beacon_window_s: float = 900.0

    # Beacon: a new chained, signed round this often; rounds kept for this many intervals (1 day).
    beacon_interval_s: float = 10.0
    beacon_keep_rounds: int = 8640

    # Liveness (seed 003's heartbeat): a node is offline after missing this many heartbeat intervals.
    heartbeat_interval_s: float = 10.0
    offline_after_missed: int = 3
    # Liveness a phone can afford (issue 32): the relay pings every session each heartbeat interval anyway
    # (its RTT), and a pong on the session proves the node that bound it with its first signed heartbeat is
    # still there. True: the welcome says so ("liveness": "pongs") and clients send that one heartbeat only,
    # instead of one every interval / 2: a phone's frames per hour fall from 1,440 to 720 (a ping and its pong
    # every 10 s) and its bytes from ~250 KB to ~30 KB; the relay parses and acks no heartbeats. False: clients
    # keep signing a heartbeat every interval / 2 (the protocol before 2026-12-06; relays accept both).
    liveness_by_pongs: bool = True
    # Cluster liveness (web/cluster/digests.py): each relay publishes, once per heartbeat interval and only on change,
    # a signed digest of the nodes that came and went on it, and the whole set every this many intervals
    # (60 s by default), so a relay that starts or missed a digest is current within that time.
    digest_full_every: int = 6
    # Mean time between bandwidth probes on a live session (a 256 KiB frame the node acknowledges), after the
    # first one right after the node's first heartbeat. Each probe costs a phone 256 KiB of its data plan:
    # every 10 min is ~1.5 MB/h; a probe also delays that session's next frames by its transfer time.
    bw_probe_interval_s: float = 600.0
    # Relay-wide ceiling on probe traffic, Mbit/s: probes beyond it wait for a later ping. 64 Mbit/s is 32
    # probes/s, evenly spaced: the steady state of ~19,000 sessions at the interval above.
    bw_probe_budget_mbps: float = 64.0

    # How often the relay looks for nodes that went silent.
    sweep_interval_s: float = 1.0
    # Garbage collection (web/gc_policy.py says why): objects alive are frozen every gc_freeze_interval_s, so
    # automatic collections scan only what is newer; everything is collected once every gc_full_interval_s.
    gc_freeze_interval_s: float = 10.0
    gc_full_interval_s: float = 300.0  # cycles that were pending at a freeze wait until then

    # Rate limits (token buckets). Per client IP: requests per second and burst.
    ip_rate_per_s: float = 50.0
    ip_burst: int = 100
    # Per node: profiles per minute and burst; a node re-benchmarks rarely.
    node_rate_per_min: float = 6.0
    node_burst: int = 3
    # WS /v1/live, per source address (an IPv6 /64 counts as one address: web/sessions/live_guard.py). Live sessions
    # open at once: far above one household, since a carrier-grade NAT puts many phones behind one IPv4 address.
    live_sessions_per_address: int = 256
    # Bytes per second an address may send over all its live sessions, and their burst (bytes). The largest
    # legitimate frame is a 64-instance SGEMM opening, 1.64 MB (web/sessions/live_guard.py max_opening_bytes): the
    # burst holds five, and the rate pays one back in 13 s (roll calls are >= 100 s apart). Over it, the
    # session is closed (1013) and new ones are refused (HTTP 429) until the debt is paid back.
    live_bytes_per_s_per_address: float = 128 * 1024
    live_bytes_burst_per_address: int = 8 * 1024 * 1024

    # Links between two nodes are checked against the relay's own RTT to each (the triangle inequality):
    # refused above factor * (rtt_a + rtt_b) + slack; unconfirmed below (|rtt_a - rtt_b| - slack) / factor
    # (web/map/links.py says why the sides differ). Internet paths do violate the inequality (a detour can beat
    # a congested direct route), rarely by more than 2x; the slack covers timer and event-loop noise (ms).
    link_tiv_factor: float = 2.0
    link_slack_ms: float = 5.0
    # Coordinates are refitted from every sample held (web/map/links.py refit: deterministic, so every relay of a
    # cluster serves the same) this often when samples changed, within a budget of Vivaldi updates per refit
    # (200 passes over up to 250 confirmed edges; fewer passes beyond: ~0.3 s of CPU here).
    link_refit_interval_s: float = 10.0
    link_refit_updates: int = 50_000
    # Share of the time refits may take (web/relay.py refit_links): after a refit that took T, the next waits
    # T x (1 / duty - 1). A refit is pure Python in a thread, so while it runs the event loop gets about half
    # of its core; at 10,000 sessions (a refit every 10 s) that was 21% of the relay's samples (py-spy) and
    # seconds on the heartbeat ack p99.
    link_refit_max_duty: float = 0.05
    # A relay's own edge (its sessions measure one every 3 pings) goes to the cluster only when its RTT moved
    # by more than link_gossip_change (a share) and link_gossip_min_ms since the one last sent, at most once
    # per link_gossip_min_interval_s, or link_gossip_every_s later: every edge of every session was 150 NATS
    # messages/s at 1,000 sessions (bench/cluster_traffic.py); a loaded relay's RTTs move by more than 20%
    # and 2 ms between samples, so the interval.
    link_gossip_change: float = 0.2
    link_gossip_min_ms: float = 2.0
    link_gossip_min_interval_s: float = 60.0
    link_gossip_every_s: float = 300.0

    # Node-to-node probes (web/map/peer_probes.py): a node offers a probe at most once per interval and answers
    # others' (so ~2 probes a minute per node at 60 s: ~20 KB/min of a phone's plan at the ~10 KB a WebRTC
    # probe costs with its DTLS handshake, BENCHMARKS.md); a probe not measured within the timeout ends; a pair
    # is measured again at most once per repeat interval; the share of offers that go to the predicted nearest
    # idle node (the rest go to a random one: Vivaldi's neighbour rule); probes in flight at once per relay.
    peer_probe_interval_s: float = 60.0
    peer_probe_timeout_s: float = 30.0
    peer_probe_pair_repeat_s: float = 600.0
    peer_probe_nearest_share: float = 0.5
    peer_probe_max_active: int = 500
    # STUN/TURN servers handed to both ends of a probe (stun:host:port): needed where nodes are behind NAT
    # (phones on carrier networks); none by default, so only host candidates (same LAN, public addresses).
    peer_ice_servers: tuple[str, ...] = ()

    # Challenges (web/proof/challenges.py): the relay measures each node itself. A session opts in with a hello
    # (clients that cannot answer stay unverified rather than failing). The work is sized so the node's
    # claimed speed needs challenge_target_s: long enough that the session's RTT and the capsule's
    # instantiation (~50 ms measured) are small beside it, short enough to cost a phone little.
    challenge_target_s: float = 0.5
    challenge_first_after_s: float = 5.0          # after the hello of a node with a profile here
    challenge_interval_unverified_s: float = 60.0  # mean gap while a node is not yet verified
    challenge_spread: float = 0.5                  # gaps are mean x (1 +- spread), drawn from the beacon
    # The commitment must arrive within this (s): a node 40x slower than its claim is late, not slow.
    challenge_commit_timeout_s: float = 20.0
    challenge_open_timeout_s: float = 10.0         # rows are opened from memory: only transfer time
    challenge_rows_per_instance: int = 2           # rows opened per instance (each ~4n bytes on the wire)
    # Entries of each opened row the relay recomputes, at columns drawn after the opening: a row that is
    # wrong in a fraction w of its entries passes with probability (1 - w)^64 (a garbage row: never).
    challenge_entries_per_row: int = 64
    challenge_max_instances: int = 64              # a claim of more concurrent instances is challenged at 64
    # What a challenge's time may be reduced by for the network: the session's *median* RTT (pings of the
    # last few minutes), never more than this share of the measured time. A node that delays its pongs to
    # inflate its RTT gains at most 1 / (1 - share): 1.11x at 0.1 (the minimum RTT once let a node that held
    # its pongs 15 s shrink a 5 s answer to the 1 us floor: 68.7 million GFLOP/s observed).
    challenge_rtt_share_max: float = 0.1
    # A core counts on the verified scoreboard only where its share of the observed GFLOP/s reaches this:
    # the slowest SIMD128 core worth scheduling (an old phone core does ~2 GFLOP/s). Cores are an
    # upper-bound claim nobody can prove below this floor (20 identities once claimed 2^32-1 cores each).
    core_floor_gflops: float = 2.0
    # A GPU counts on the verified scoreboard only where its share of the fp32 TFLOP/s its GPU challenge
    # showed reaches this. Nothing in a GPU challenge needs a GPU, so the floor is what keeps a CPU from
    # answering as many "GPUs" as it likes (16 "GPUs" of 0.000005 TFLOP/s per identity were once counted,
    # answered with numpy): software rasterizers show 0.0003-0.001 (lavapipe here: 0.00027), a whole
    # 2-vCPU machine natively ~0.08 (numpy SGEMM, AMD EPYC / Intel Xeon VMs here), a 16-core AVX-512 server
    # ~1-2; phone GPUs show ~0.3-1 and laptop integrated GPUs 0.5-2 at their fp32 peak. 0.1: above this
    # machine's whole CPU, below the GPUs a scheduler would place work on. A CPU fast enough to pass it
    # answers its GPU challenge at the same moment as its SGEMM one (a roll call sends both together), so the
    # cores it spends on a "GPU" are cores its SGEMM answer does not show (docs/protocol.md). A GPU claim below
    # the floor in all is not challenged at roll calls: it could count nothing, and on a software adapter (the
    # CPU itself) its answer would take the SGEMM answer's cores.
    gpu_floor_tflops: float = 0.1
    # Every third round of a session that answers "llm" is a reference-model challenge (tokens/s). The relay
    # checks one token of every answer, drawn after it arrived (web/proof/llm_checks.py: a prefill and one pass on
    # its own reactor); a wrong token flags at once.
    challenge_llm_every: int = 3
    # Share of a peer relay's passed SGEMM and GPU transcripts this relay re-checks (proofs and entries: ~4 ms
    # of CPU each, measured by bench/capacity.py); the rest are believed on the peer's signature until one
    # check fails, after which all of that peer's are re-checked (web/transcripts.PeerAudit). 1.0 re-checks
    # every one, which costs each relay the whole network's roll calls: ~1.4 cores per relay at 100,000
    # nodes (BENCHMARKS.md, "Capacity model"). Name only relays you run when lowering it.
    transcript_audit_fraction: float = 1.0
    # Share of a peer's passed reference-model transcripts whose checked token this relay checks again (on its
    # reactor: 35-250 ms, ~10% of the node's decode, BENCHMARKS.md): one such check is decisive (the peer said
    # that token was equal), so a peer passing guesses is caught within ~1 / fraction of them, after which all
    # of its transcripts are re-checked. Separate from the SGEMM share: at 1.0 every relay would pay ~10% of
    # every node's decode in its region.
    transcript_llm_audit_fraction: float = 0.05
    # A peer's transcript is taken once (by relay and challenge nonce) and only this soon after its `at`
    # (plus clock_skew_s): a relay publishes it the moment the challenge ends, so anything older is a replay.
    transcript_max_age_s: float = 60.0
    reactor_wasm: Path = Path(__file__).resolve().parents[1] / "build" / "capsule-reactor.wasm"

    # Roll calls (web/proof/rollcall.py): at moments drawn from the beacon, every live session that answers
    # challenges is challenged at once (SGEMM, and in the same sends the GPU of a node that claims one and
    # answers "gpu": answered side by side, so one piece of silicon is never counted twice), and again, all at
    # once, for the reference model roll_call_llm_offset_s later (after every SGEMM and GPU answer is due).
    # The verified scoreboard is what the latest roll call proved: one machine cannot answer for several
    # identities at the same moment (Douceur 2002, lemma 4). Every round whose number is a multiple of
    # roll_call_min_gap_s / beacon_interval_s may start one, with the chance that gives roll_call_interval_s
    # on average, roll_call_delay_s after the round is issued (nobody knows the moment before the round
    # exists). The work is sized to the claim for roll_call_target_s, the same for every node, and an answer
    # counts only if it arrives within roll_call_deadline_factor x that (net of the RTT allowance). A common
    # deadline is what makes simultaneity hold: identities of one machine answered one after another finish
    # one after another, and all but the first miss it (with throughput alone, the k-th of them would still
    # count 1/k of the machine: 4 identities counted 2.1x). Whatever a machine does, what it counts at one
    # roll call is at most deadline x cap_factor-bounded (web/proof/rollcall.py has the bound). 1 s: ten times a
    # 100 ms RTT.
    # Credit for the work done by the deadline: a roll call's SGEMM challenge names more products than the
    # claim needs (roll_call_work_headroom x the deadline's worth at the claim) and tells the node to stop
    # roll_call_stop_share x the deadline after it arrived (its own clock; the rest is for the product in
    # progress, the commitment and the network); the node commits the products it finished and the relay
    # counts their work (web/proof/rollcall.py shown): a busy node counts what it still does instead of nothing.
    # 200 s: a phone on the join page is counted during a visit of a few minutes (each eligible moment, every
    # roll_call_min_gap_s = 100 s, starts one with chance 0.5: the first count ~50-100 s after joining at the
    # median, within 5 min 7 times in 8), for about 1% of its CPU time and ~0.5 MB/h (docs/protocol.md,
    # "Roll-call pace"); at 600 s the median wait was ~6 min and a 3-minute visit counted ~1 time in 4. A
    # chance below 1 keeps the moments unknown in advance (1.0 would be every 100 s, predictable).
    roll_call_interval_s: float = 200.0
    roll_call_delay_s: float = 1.0
    roll_call_target_s: float = 1.0
    roll_call_deadline_factor: float = 1.25
    roll_call_stop_share: float = 0.9          # of the deadline (1.125 s at the defaults)
    roll_call_work_headroom: float = 1.25      # work for 1.5625 s at the claim: a node up to 1.39x its claim
    #                                            never runs out before it stops
    roll_call_llm_offset_s: float = 32.0   # > challenge_commit_timeout_s + challenge_open_timeout_s
    roll_call_min_gap_s: float = 100.0     # > the llm offset + its answers: one roll call at a time
    roll_calls_kept: int = 1000            # GET /v1/roll-calls, in memory and in the store
    # the send loop's SCHED_FIFO priority where the OS allows it (web/sessions/send_priority.py); 0: off
    roll_call_send_priority: int = 1
    # The relay's own event-loop lag never counts against a node (web/sessions/loop_lag.py: a task wakes every
    # loop_lag_interval_s, s, and records how late it woke). Where the longest stall during an answer's window
    # exceeds loop_lag_allowance_min_s (timer noise is ~1 ms), the answer's timeouts are extended by it, and a
    # roll-call answer after the deadline by no more than it counts as arriving at the deadline
    # (web/sessions/loop_lag.py lag_forgiven). At most loop_lag_allowance_max_s is forgiven: 40% of the 1.25 s
    # deadline, so a node that could make the relay stall gains at most that much time.
    loop_lag_interval_s: float = 0.05
    loop_lag_allowance_min_s: float = 0.05
    loop_lag_allowance_max_s: float = 0.5

    # Trust (web/proof/trust.py). Counters halve every trust_half_life_s.
    trust_half_life_s: float = 6 * 3600.0
    trust_min_passes: int = 2            # passed challenges before a node counts as verified
    # Flagged when the claim exceeds the best observed throughput by more than this factor. Identical runs
    # on a shared 2-vCPU VM differ by up to 40%, and a challenge also pays for hashing its output (~5%):
    # 2x leaves room for both, and still flags a 3x overstatement.
    trust_flag_factor: float = 2.0
    # The verified scoreboard counts min(claim, median observed x this): an overstatement below the flag
    # factor still counts only what was seen (plus the challenge's known overhead).
    # 1.15: a challenge pays ~5% for its inputs and commitment; with the RTT share above, a node that lies about
    # everything it can still counts at most 1.11 x 1.15 = 1.28x what it did.
    trust_cap_factor: float = 1.15
    trust_flag_failures: float = 1.0        # decayed failure weight that flags: one wrong answer
    # A wrong answer flags for this long whatever the decay (a decayed weight of exactly 1.0 once unflagged
    # a node 0.25 s after its wrong rows).
    trust_flag_hold_s: float = 24 * 3600.0
    # verified needs a passed challenge this recent: verification is not permanent (a node that stops
    # answering becomes unverified again); 3 roll calls at the default interval.
    trust_fresh_s: float = 1800.0
    trust_soft_failure_weight: float = 0.34  # a late or unknown reply: three within a half-life flag
    trust_failure_penalty: float = 4.0      # score = passes - penalty x failures (both decayed)
    # Observed figures remembered per node: the recent ones only, so a machine's share follows who else on
    # it is being challenged now (8 rounds: ~2 h at the verified interval).
    trust_observed_kept: int = 8
    history_kept: int = 500                 # profile and challenge entries kept per node for /history

    # The scoreboard over time (GET /stats/history, the network page's chart): one sample this often, this
    # many kept (24 h), in memory (a restarted relay starts a new series).
    stats_history_interval_s: float = 60.0
    stats_history_kept: int = 1440

    # /atlas paging, in nodes per page.
    atlas_page_default: int = 100
    atlas_page_max: int = 1000

    # perf_score = sum over weights of (figure / reference): 1.0 is one reference node, a 2-core wasm
    # SIMD128 server without GPU (75 GFLOP/s, 200 tokens/s) plus a 10 TFLOP/s fp16 GPU counted apart.
    perf_reference: dict[str, float] = field(default_factory=lambda: {
        "cpu_gflops": 75.0, "gpu_tflops": 10.0, "tokens_per_sec": 200.0})
    perf_weights: dict[str, float] = field(default_factory=lambda: {
        "cpu_gflops": 0.4, "gpu_tflops": 0.4, "tokens_per_sec": 0.2})

    @property
    def bw_probe_chance(self) -> float:
        """Probability per ping (one ping per heartbeat interval) that gives bw_probe_interval_s on average."""
        return min(1.0, self.heartbeat_interval_s / self.bw_probe_interval_s)

    @property
    def bw_probes_per_s(self) -> float:
        return self.bw_probe_budget_mbps * 1e6 / 8 / (256 * 1024)

    @property
    def offline_after_s(self) -> float:
        return self.heartbeat_interval_s * self.offline_after_missed
