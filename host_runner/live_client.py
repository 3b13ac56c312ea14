"""A node's live session with its relay (WS /v1/live, protocol in web/sessions/live.py): signed heartbeats at
the interval the relay asks for, answers to RTT pings, and, given the reactor wasm, answers to the relay's
challenges (web/proof/challenges.py) computed by the capsule on a worker thread so pings are answered meanwhile;
given a GpuContext, answers to GPU challenges too (kind "gpu": host_runner/gpu_answer.py, the probe's WGSL), on
their own thread: a roll call sends the SGEMM and GPU challenges at the same moment and both are answered side
by side, so committed answers are kept by challenge id until the relay's verdict. Runs in a background thread."""

from __future__ import annotations

import contextlib
import json
import math
import random
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from capsule.challenge import LLM_ANSWER, LLM_MAX_TOKENS
from capsule.cpu_challenge import leaf_form_offered
from capsule.model import LINK_RTT_MAX_MS, LINK_RTT_MIN_MS
from capsule.signing import Signer, check_signature, default_verify, node_id, sign
from host_runner.challenge_answer import ReactorPool, SgemmAnswer, llm_answer, llm_streams_answer, warm_llm
from host_runner.wasm import CapsuleError

if TYPE_CHECKING:
    from host_runner.gpu_answer import GpuAnswer, GpuContext
    from host_runner.peer_probe import PeerProber
    from host_runner.task_worker import TaskWorker

AnswerFactory = Callable[[Path, list[int], int, int, ReactorPool], SgemmAnswer]
# (pool, seed, decode, stop_at, halt) -> tokens
LLM_MAX_STREAMS = 256  # the most decode streams a profile names (capsule/model.py Llm.streams)
LlmAnswer = Callable[[ReactorPool, int, int, float | None, threading.Event | None], list[int]]
GpuAnswerFactory = Callable[[list[int], int, int, "GpuContext"], "GpuAnswer"]


class _Answer(Protocol):
    """A committed answer kept until the relay opens it (SgemmAnswer, GpuAnswer)."""

    def open(self, rows: list[Any]) -> list[dict[str, Any]]: ...

    def release(self) -> None: ...


def _gpu_answer(seeds: list[int], n: int, reps: int, context: GpuContext) -> GpuAnswer:
    from host_runner.gpu_answer import GpuAnswer  # wgpu only where a GPU answers

    return GpuAnswer(seeds, n, reps, context)


# Reconnecting (seconds): the first wait after a lost session is RECONNECT_FIRST_S, doubling for each attempt
# in a row that fails up to RECONNECT_MAX_S, each drawn uniformly from 0.5x-1.5x of that. Without the draw the
# sessions of a relay that died arrived at its first peer all at once, 2 s later (tests/test_failover.py);
# spread over a second, the peer takes them as they come.
RECONNECT_FIRST_S = 2.0
RECONNECT_MAX_S = 30.0
RECONNECT_STABLE_S = 10.0  # a session held this long resets the backoff
# A peer's URL reaches a relay with the peer's first view, seconds after both start, so the relays a session
# learns at welcome may lack one, and a node whose relay then dies has nowhere to go (CI, 2026-12-07: two of
# three nodes stayed with a killed relay). While its relay names a cluster peer without a URL, a session asks
# again after RELAYS_RELEARN_FIRST_S, doubling up to RELAYS_RELEARN_MAX_S (a peer that never comes costs a
# relay of 10,000 sessions ~33 requests/s); once every peer has a URL it stops asking (--cluster-peer is fixed
# for the life of a relay process, so nothing new can appear until the session reconnects).
RELAYS_RELEARN_FIRST_S = 2.0
RELAYS_RELEARN_MAX_S = 300.0


def reconnect_wait_s(failures: int, u: float) -> float:
    """The pause before the next attempt after `failures` failed attempts in a row (0: the session had been
    up for RECONNECT_STABLE_S); u is uniform in [0, 1)."""
    base = min(RECONNECT_MAX_S, RECONNECT_FIRST_S * 2.0 ** min(max(failures - 1, 0), 16))
    return base * (0.5 + u)


class LiveSession:
    def __init__(self, relay_url: str, signer: Signer, ssl_context: ssl.SSLContext | None = None,
                 reactor_wasm: Path | None = None, answer_factory: AnswerFactory = SgemmAnswer,
                 llm: LlmAnswer = llm_answer, connect_options: dict[str, Any] | None = None,
                 pong_delay_s: float = 0.0, say: Callable[[str], None] | None = None,
                 gpu: GpuContext | None = None, gpu_answer_factory: GpuAnswerFactory = _gpu_answer,
                 peer_probes: bool = False, warm: tuple[int, int, int] | None = None,
                 warm_llm: int = 0, libp2p: Any = None, job_slots: int = 0,
                 task_tamper: Any = None) -> None:
        # this node's libp2p host (common/libp2p_host.py): its multiaddrs are announced after the first heartbeat,
        # and brokered probes with another server go over libp2p ping
        self.libp2p = libp2p
        self.multiaddrs: list[str] = libp2p.multiaddrs[:8] if libp2p is not None else []
        self.ssl_context = ssl_context
        self.reactor_wasm = reactor_wasm  # None: this session does not offer to answer challenges
        self.answer_factory = answer_factory  # tests inject wrong answers through it (and through llm)
        self.superseded: str | None = None  # why a newer session of this node closed this one (it then stops)
        self.llm = llm
        self.gpu = gpu  # None: this session does not offer to answer GPU challenges
        self.gpu_answer_factory = gpu_answer_factory  # tests inject wrong GPU answers through it
        self.connect_options = connect_options or {}  # e.g. source_address (a host with several addresses)
        self.pong_delay_s = pong_delay_s  # tests play a node that holds its pongs back (failure injection)
        self._ws: Any = None
        self.say = say  # one line per roll call answered and per change of trust status (`ce-bench node` logs)
        self.results: list[dict[str, Any]] = []  # the relay's challenge_result messages
        # committed answers until the relay's verdict, by challenge id: (kind, answer), kind "cpu" (SGEMM, on the
        # pooled reactors) or "gpu"; at most one of each kind is open (the relay asks one of each at a time)
        self._answers: dict[str, tuple[str, _Answer]] = {}
        self._answers_lock = threading.Lock()
        self._pool = ReactorPool(reactor_wasm) if reactor_wasm is not None else None
        self.warm = warm  # (instances, n, reps) to compute once before the first hello (ReactorPool.warm)
        # make the reference model before the first hello (challenge_answer.warm_llm): ~60 MB of the first
        # reactor's memory, so only where the relay will ask for tokens (a claim of tokens/s)
        self.warm_llm = warm_llm
        self._reactor_lock = threading.Lock()  # the pooled reactors: one challenge's work at a time
        self._working = 0  # challenges being computed now (CPU, reference model or GPU)
        self.worked = 0    # challenges begun since the session started (a measurement they overlapped is redone)
        # the challenges being computed, by id, each with the event that stops it: a roll call's challenge may
        # withdraw a solo one ("withdraws"), whose work then stops after the product or token in progress
        self._halts: dict[str, threading.Event] = {}
        self._working_lock = threading.Lock()
        self._send_lock = threading.Lock()
        # the relays to keep the session with, in order of preference: this one, then the others of its
        # cluster as GET /v1/relays names them (asked on each connection, and again while a peer has no URL:
        # RELAYS_RELEARN_FIRST_S); one that fails is left for the next, so a node stays live when its relay dies
        self.relays: list[str] = [relay_url.rstrip("/")]
        self.relay_url = self.relays[0]
        self._relearn_wait_s = RELAYS_RELEARN_FIRST_S  # the next wait while a peer's URL is missing
        self._relearn_at = math.inf  # when to ask again (monotonic; inf: every peer has its URL, or asking now)
        self.signer = signer
        self.acks = 0
        self._welcomed_at: float | None = None  # when the current connection got the relay's welcome
        self.links = 0
        self.errors: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-session", daemon=True)
        # dispatched work (host_runner/task_worker.py): tasks in `job_slots` threads, 0 takes none
        self.tasks: TaskWorker | None = None
        if job_slots > 0:
            from host_runner.task_worker import BlobCache, TaskWorker, http_fetcher

            self.tasks = TaskWorker(signer, self._send_current,
                                    BlobCache(http_fetcher(lambda: self.relay_url, ssl_context)), job_slots, say,
                                    task_tamper, reactor_wasm.with_name("capsule.wasm") if reactor_wasm else None)
        # node-to-node probes the relay brokers (host_runner/peer_probe.py; aiortc), when taking part
        self.peers: PeerProber | None = None
        if peer_probes:
            from host_runner.peer_probe import PeerProber

            self.peers = PeerProber(signer, self._send_current, libp2p)

    def start(self) -> LiveSession:
        self._thread.start()
        return self

    @property
    def answering(self) -> bool:
        """Whether this node is computing a challenge's answer now: an RTT it takes part in now would include
        that work (a roll call asks every node at once), so its landmark probes wait (host_runner/agent.py)."""
        return self._working > 0

    @contextlib.contextmanager
    def _at_work(self) -> Iterator[None]:
        with self._working_lock:
            self._working += 1
            self.worked += 1
        try:
            yield
        finally:
            with self._working_lock:
                self._working -= 1

    def stop(self) -> None:
        """Ends the session (and stops reconnecting)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self.peers is not None:
            self.peers.stop()
        if self.tasks is not None:
            self.tasks.stop()

    def _send_current(self, message: dict[str, Any]) -> None:
        """Sends on whichever connection is current (the peer prober's thread outlives reconnects)."""
        if self._ws is not None:
            self._send(self._ws, message)

    @property
    def url(self) -> str:
        return self.relay_url.replace("http://", "ws://").replace("https://", "wss://") + "/v1/live"

    def _run(self) -> None:
        if self._pool is not None and self.warm is not None:
            instances, n, reps = self.warm
            try:
                with self._reactor_lock:
                    self._pool.warm(instances, n, reps)
                if self.say is not None:
                    self.say(f"warmed {instances} capsule instance(s) for challenges ({reps} product(s) of order {n} "
                             "each)")
            except (CapsuleError, OSError) as exc:  # a challenge will say the same; the session goes on
                self.errors.append({"type": "error", "code": "warm", "detail": str(exc)})
        if self._pool is not None and self.warm_llm:
            try:
                with self._reactor_lock:
                    warm_llm(self._pool, int(self.warm_llm))
            except (CapsuleError, OSError) as exc:  # a challenge will say the same; the session goes on
                self.errors.append({"type": "error", "code": "warm", "detail": str(exc)})
        failures = 0  # connection attempts in a row that did not hold a session for RECONNECT_STABLE_S
        while not self._stop.is_set():
            self._welcomed_at = None
            try:
                self._session()
            except (OSError, WebSocketException, ValueError, KeyError) as exc:
                self.errors.append({"type": "error", "code": "connection", "detail": f"{self.relay_url}: {exc}"})
                self._next_relay()
            held = self._welcomed_at is not None and time.monotonic() - self._welcomed_at >= RECONNECT_STABLE_S
            failures = 0 if held else failures + 1  # a relay that welcomes, then closes, is backed off too
            self._stop.wait(reconnect_wait_s(failures, random.random()))

    def _next_relay(self) -> None:
        """After a failure: the next relay of the cluster (the home relay again after the last)."""
        if len(self.relays) > 1:
            failed = self.relay_url
            self.relay_url = self.relays[(self.relays.index(failed) + 1) % len(self.relays)]
            if self.say is not None:
                self.say(f"relay {failed} unreachable; keeping the session with {self.relay_url}")

    def _learn_relays(self) -> None:
        """The other relays of the connected relay's cluster, with their URLs (best effort)."""
        try:
            with urllib.request.urlopen(self.relay_url + "/v1/relays", timeout=5, context=self.ssl_context) as r:
                rows = json.loads(r.read())["relays"]
            # (this relay's own row has no URL without --public-url: it is no peer to wait for)
            unheard = any(isinstance(row, dict) and not row.get("self") and not row.get("url") for row in rows)
        except (OSError, ValueError, KeyError, TypeError):
            unheard, rows = True, []
        self._relearn_at = time.monotonic() + (self._relearn_wait_s if unheard else math.inf)
        self._relearn_wait_s = min(2 * self._relearn_wait_s, RELAYS_RELEARN_MAX_S)
        known = list(self.relays)
        for row in rows:
            url = row.get("url") if isinstance(row, dict) else None
            if isinstance(url, str) and url.startswith(("http://", "https://")) and url.rstrip("/") not in known:
                known.append(url.rstrip("/"))
        self.relays = known

    def _cosign(self, ws: Any, sample: Any, relay_id: str) -> None:
        """Signs the relay's measurement of this node's link after checking it describes that link."""
        me = node_id(self.signer)
        if (not isinstance(sample, dict) or sample.get("a") != me or sample.get("b") != relay_id
                or not isinstance(sample.get("rtt_ms"), int | float)
                or not LINK_RTT_MIN_MS <= sample["rtt_ms"] <= LINK_RTT_MAX_MS):
            self.errors.append({"type": "error", "code": "refused_cosign", "detail": "not a sample of my link"})
            return
        try:  # the relay's half first: never co-sign what the relay did not sign
            check_signature("LinkSample", sample, "sig_b", relay_id, default_verify())
        except ValueError as exc:
            self.errors.append({"type": "error", "code": "refused_cosign", "detail": str(exc)})
            return
        self._send(ws, {"type": "cosigned", "sample": sign("LinkSample", sample, self.signer, "sig_a")})
        self.links += 1

    def _send(self, ws: Any, message: dict[str, Any]) -> None:
        """The one way to send: the challenge worker and the session loop share the socket."""
        with self._send_lock:
            ws.send(json.dumps(message))

    def _challenge(self, ws: Any, message: dict[str, Any]) -> None:
        """Computes and commits on a worker thread (seconds of work must not stall pongs and heartbeats); first
        stops the solo challenges a roll call's challenge withdraws."""
        self._withdraw(message.get("withdraws"))
        if self.reactor_wasm is None or self._pool is None:
            return
        if message.get("kind") == "llm":
            self._llm_challenge(ws, message)
            return
        if message.get("kind") == "gpu":
            self._gpu_challenge(ws, message)
            return
        try:
            seeds = [int(s, 16) for s in message["seeds"]]
            n, reps, cid = int(message["n"]), int(message.get("reps", 1)), str(message["id"])
            stop_after_s = message.get("stop_after_s")
            # the roll call's deadline on this clock, from the moment the challenge arrived (the relay allows
            # for the network: web/proof/challenges.py net_time_s)
            stop_at = None if stop_after_s is None else time.perf_counter() + float(stop_after_s)
        except (KeyError, TypeError, ValueError):
            self.errors.append({"type": "error", "code": "bad_challenge", "detail": str(message)[:200]})
            return
        answer = self.answer_factory(self.reactor_wasm, seeds, n, reps, self._pool)
        answer.leaf = leaf_form_offered(message.get("leaves"))
        self._drop_answers("cpu")  # a new SGEMM challenge supersedes one the relay gave up on (not a GPU one)
        halt = self._halt_for(cid)

        def work() -> None:
            try:
                with self._at_work(), self._reactor_lock:
                    roots = answer.commit(stop_at, halt)
                    if halt.is_set():  # withdrawn: judged neither way, so nothing is sent; freed before the
                        answer.release()  # roll call's answer takes the reactors (the lock is still held)
                        return
            except CapsuleError as exc:
                self.errors.append({"type": "error", "code": "challenge_failed", "detail": str(exc)})
                return
            finally:
                self._halts.pop(cid, None)
            self._keep(cid, "cpu", answer)
            with contextlib.suppress(OSError, WebSocketException):  # the loop sees a closed socket and reconnects
                self._send(ws, {"type": "commit", "id": cid, "roots": roots, "products": answer.products,
                                "leaf": answer.leaf})

        threading.Thread(target=work, name="challenge", daemon=True).start()

    def _gpu_challenge(self, ws: Any, message: dict[str, Any]) -> None:
        """Computes and commits a GPU challenge on its own worker thread, beside the SGEMM threads of the same
        roll call (the pipelines were compiled with the GpuContext, outside the timed window)."""
        context = self.gpu
        if context is None:
            self.errors.append({"type": "error", "code": "challenge_failed", "detail": "no GPU on this session"})
            return
        try:
            seeds = [int(s, 16) for s in message["seeds"]]
            n, reps, cid = int(message["n"]), int(message.get("reps", 1)), str(message["id"])
            stop_after_s = message.get("stop_after_s")  # a roll call: commit what is done by then, as SGEMM does
            stop_at = None if stop_after_s is None else time.perf_counter() + float(stop_after_s)
        except (KeyError, TypeError, ValueError):
            self.errors.append({"type": "error", "code": "bad_challenge", "detail": str(message)[:200]})
            return
        self._drop_answers("gpu")  # a new GPU challenge supersedes one the relay gave up on (not an SGEMM one)

        def work() -> None:
            from host_runner.gpu_answer import GpuError

            try:
                with self._at_work():
                    answer = self.gpu_answer_factory(seeds, n, reps, context)
                    roots = answer.commit(stop_at)
            except (GpuError, ValueError) as exc:
                self.errors.append({"type": "error", "code": "challenge_failed", "detail": str(exc)})
                return
            self._keep(cid, "gpu", answer)
            with contextlib.suppress(OSError, WebSocketException):
                self._send(ws, {"type": "commit", "id": cid, "roots": roots, "products": answer.products})

        threading.Thread(target=work, name="challenge-gpu", daemon=True).start()

    def _llm_challenge(self, ws: Any, message: dict[str, Any]) -> None:
        """Decodes and commits the token ids on a worker thread; at a roll call ("stop_after_s") it stops that
        long after the challenge arrived here and commits what it has, as the SGEMM answer does."""
        arrived = time.perf_counter()  # the roll call's deadline counts from here (web/proof/challenges.py net_time_s)
        pool = self._pool
        try:
            seeds, decode, cid = message["seeds"], message["decode"], message["id"]
            stop_after_s = message.get("stop_after_s")
            # strict types: int("12") or a float decode would answer a challenge the relay did not send, and
            # an unbounded decode would hold the reactors for as long as the relay likes
            if (not isinstance(seeds, list) or not 1 <= len(seeds) <= LLM_MAX_STREAMS
                    or not all(isinstance(s, str) for s in seeds) or not isinstance(cid, str)
                    or type(decode) is not int or not 1 <= decode <= LLM_MAX_TOKENS
                    or (stop_after_s is not None and (type(stop_after_s) not in (int, float)
                                                      or not 0 <= stop_after_s < float("inf")))):
                raise ValueError("malformed reference-model challenge")
            seeds_u64 = [int(s, 16) for s in seeds]
            if not all(0 <= s < 2**64 for s in seeds_u64):
                raise ValueError("a seed is not a u64")
            stop_at = None if stop_after_s is None else arrived + float(stop_after_s)
        except (KeyError, TypeError, ValueError):
            self.errors.append({"type": "error", "code": "bad_challenge", "detail": str(message)[:200]})
            return
        if pool is None:
            return
        halt = self._halt_for(cid)

        def work() -> None:
            try:
                with self._at_work(), self._reactor_lock:
                    # one stream: a flat list (the form every relay takes); several: one list per seed
                    tokens: list[int] | list[list[int]]
                    if len(seeds_u64) == 1:
                        tokens = self.llm(pool, seeds_u64[0], decode, stop_at, halt)
                    elif self.llm is llm_answer:
                        tokens = llm_streams_answer(pool, seeds_u64, decode, stop_at, halt)
                    else:  # an answer given to the session (a test's cheater): stream by stream
                        tokens = [self.llm(pool, s, decode, stop_at, halt) for s in seeds_u64]
            except (CapsuleError, ValueError) as exc:
                self.errors.append({"type": "error", "code": "challenge_failed", "detail": str(exc)})
                return
            finally:
                self._halts.pop(cid, None)
            if halt.is_set():  # withdrawn: nothing is sent
                return
            with contextlib.suppress(OSError, WebSocketException):
                self._send(ws, {"type": "commit", "id": cid, "tokens": tokens})

        threading.Thread(target=work, name="challenge-llm", daemon=True).start()

    def _halt_for(self, cid: str) -> threading.Event:
        """The event that stops challenge `cid`'s work (set by _withdraw)."""
        halt = self._halts[cid] = threading.Event()
        return halt

    def _withdraw(self, ids: object) -> None:
        """A roll call's challenge withdrew these solo challenges ("withdraws"): their work stops after the
        product or token in progress, and frees the reactors for the roll call, which waits for them."""
        if not isinstance(ids, list):
            return
        for cid in ids[:16]:
            halt = self._halts.get(cid) if isinstance(cid, str) else None
            if halt is not None:
                halt.set()

    def _tell_result(self, message: dict[str, Any]) -> None:
        """A roll call's verdict, or a failed answer, as one line for the operator."""
        if self.say is None or not (message.get("roll_call") or not message.get("passed")):
            return
        observed = (f"{message['observed_gflops']:.1f} GFLOP/s" if message.get("observed_gflops") is not None
                    else f"{message['observed_tokens_per_sec']:.1f} tokens/s"
                    if message.get("observed_tokens_per_sec") is not None
                    else f"{message['observed_tflops']:.4g} fp32 GPU TFLOP/s"
                    if message.get("observed_tflops") is not None else "nothing observed")
        where = f"roll call {message['roll_call']}" if message.get("roll_call") else "challenge"
        self.say(f"{where} ({message.get('kind', 'sgemm')}): {message.get('verdict') or message.get('code')}, "
                 f"observed {observed}" + ("" if message.get("passed") else f": {message.get('detail')}"))

    def _pong(self, ws: Any, ping_id: Any) -> None:
        if self.pong_delay_s <= 0:
            self._send(ws, {"type": "pong", "id": ping_id})
            return

        def late() -> None:
            with contextlib.suppress(OSError, WebSocketException):
                self._send(ws, {"type": "pong", "id": ping_id})

        threading.Timer(self.pong_delay_s, late).start()

    @property
    def answers(self) -> list[str]:
        """The kinds this session answers (its hello): "gpu" only with a GpuContext."""
        return ["sgemm", LLM_ANSWER] + (["gpu"] if self.gpu is not None else [])

    def hello(self, answers: list[str]) -> None:
        """Says hello again on the current connection: fewer answers opt out of those challenges (a hidden
        tab sends none)."""
        if self._ws is not None:
            self._send(self._ws, {"type": "hello", "answers": answers, "withdrawable": True})

    def _keep(self, cid: str, kind: str, answer: _Answer) -> None:
        with self._answers_lock:
            self._answers[cid] = (kind, answer)

    def _lock_for(self, kind: str) -> contextlib.AbstractContextManager[Any]:
        """What an answer's open and release must hold: the pooled reactors for an SGEMM answer; nothing here
        for a GPU one (GpuAnswer holds its device's own lock), so opening a GPU answer never waits for an SGEMM
        answer still computing on the reactors, nor the other way round."""
        return self._reactor_lock if kind == "cpu" else contextlib.nullcontext()

    def _drop_answers(self, kind: str | None = None, cid: str | None = None) -> None:
        """Frees committed products (the reactors stay in the pool, warm): the answer `cid`, or every answer of
        `kind`."""
        with self._answers_lock:
            ids = [i for i, (k, _) in self._answers.items() if i == cid or (cid is None and k == kind)]
            dropped = [self._answers.pop(i) for i in ids]
        for kind_, answer in dropped:
            with self._lock_for(kind_):
                answer.release()

    def _open(self, ws: Any, message: dict[str, Any]) -> None:
        cid = message.get("id")
        with self._answers_lock:
            kept = self._answers.get(cid) if isinstance(cid, str) else None
        if kept is None or not isinstance(cid, str):
            self.errors.append({"type": "error", "code": "bad_open", "detail": "no commitment of that id"})
            return
        kind, answer = kept
        try:
            with self._lock_for(kind):
                rows = answer.open(message.get("rows") or [])
        except (ValueError, RuntimeError) as exc:  # (GpuError: a device lost or not deterministic)
            self.errors.append({"type": "error", "code": "bad_open", "detail": str(exc)})
            return
        self._send(ws, {"type": "opening", "id": cid, "rows": rows})

    def _session(self) -> None:
        with connect(self.url, open_timeout=10, ssl=self.ssl_context, max_size=2**22, **self.connect_options) as ws:
            self._ws = ws
            welcome = json.loads(ws.recv(timeout=10))
            self._welcomed_at = time.monotonic()
            self._relearn_wait_s = RELAYS_RELEARN_FIRST_S
            self._learn_relays()
            if self.reactor_wasm is not None:  # withdrawable: it stops a solo challenge a roll call withdraws
                self._send(ws, {"type": "hello", "answers": self.answers, "withdrawable": True})
            interval = float(welcome["heartbeat_interval_s"])
            # "pongs": one signed heartbeat binds the session, the pongs keep it live (web/config.py
            # liveness_by_pongs); otherwise a heartbeat every interval / 2
            beat_every = float("inf") if welcome.get("liveness") == "pongs" else interval / 2
            seq, next_beat = 0, 0.0
            while not self._stop.is_set():
                if time.monotonic() >= next_beat:
                    beat = sign("Heartbeat", {"node_id": node_id(self.signer), "session": welcome["session"],
                                              "seq": seq, "sent_at": int(time.time())}, self.signer)
                    self._send(ws, {"type": "heartbeat", "heartbeat": beat})
                    seq += 1
                    if seq == 1 and self.multiaddrs:  # after the heartbeat that names this node
                        self._send(ws, {"type": "libp2p", "multiaddrs": self.multiaddrs})
                    if seq == 1 and self.tasks is not None:  # offers its slots for dispatched work
                        self._send(ws, self.tasks.hello())
                    if seq == 1 and self.peers is not None:
                        transports = ["libp2p", "webrtc"] if self.multiaddrs else ["webrtc"]
                        self._send(ws, {"type": "peers", "transports": transports})
                    next_beat = time.monotonic() + beat_every  # (two beats per interval: one may be late)
                if time.monotonic() >= self._relearn_at:  # off this loop: a slow answer must not hold back pongs
                    self._relearn_at = math.inf  # (the thread sets the next time when its answer is in)
                    threading.Thread(target=self._learn_relays, name="learn-relays", daemon=True).start()
                try:
                    frame = ws.recv(timeout=0.5)
                except TimeoutError:
                    continue
                if isinstance(frame, bytes):  # the relay's bandwidth probe: acknowledge at once
                    self._send(ws, {"type": "bw_ack", "n": len(frame)})
                    continue
                message = json.loads(frame)
                if message.get("type") == "ping":
                    self._pong(ws, message["id"])
                elif message.get("type") == "ack":
                    self.acks += 1
                elif message.get("type") == "cosign":
                    self._cosign(ws, message.get("sample"), welcome["relay"])
                elif message.get("type") == "challenge" and self.reactor_wasm is not None:
                    self._challenge(ws, message)
                elif message.get("type") == "open":
                    self._open(ws, message)
                elif message.get("type") == "challenge_result":
                    self.results.append(message)
                    self._tell_result(message)
                    if isinstance(message.get("id"), str):
                        self._drop_answers(cid=message["id"])
                elif message.get("type") == "trust":
                    if self.say is not None:
                        self.say(f"trust: {message.get('status')} ({message.get('reason')})")
                elif message.get("type") in ("peer_probe", "peer_answer", "peer_done") and self.peers is not None:
                    self.peers.handle(message)
                elif message.get("type") in ("task", "task_cancel") and self.tasks is not None:
                    self.tasks.handle(message)
                elif message.get("type") == "error":
                    self.errors.append(message)
                    if message.get("code") == "superseded":
                        # one key is one node: another process took this node's session; reconnecting would
                        # take it back and the two would take turns forever
                        self.superseded = str(message.get("detail") or "superseded by another session")
                        if self.say is not None:
                            self.say(f"stopped: {self.superseded}")
                        self._stop.set()
                elif message.get("type") == "notice" and self.say is not None:
                    self.say(str(message.get("detail") or message.get("code")))
