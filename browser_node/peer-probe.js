// Node-to-node probes from the join page (issue 18, item 1; protocol: web/map/peer_probes.py; a server's side:
// host_runner/peer_probe.py, aiortc). The relay pairs this page with another live node and carries the WebRTC
// offer and answer over the live session; the two measure their RTT on a data channel ("ce-probe", unordered,
// no retransmits: a lost ping is loss, not a late RTT) and both sign the LinkSample with their own keys: the
// offerer proposes its lowest RTT (sig_a), the answerer co-signs only if its own pings agree (sig_b) and gives
// the sample to the relay. A phone's cost: ~10 KB per probe (DTLS handshake included), about 2 probes a minute
// at the relay's default interval, none while the tab is hidden (relay.js opts out).
import { b64url, unhex } from "./keys.js";
import { LINK_RTT_MAX_MS, LINK_RTT_MIN_MS, signedBy } from "./relay.js";

const PEER_PINGS = 5;
const PEER_PING_GAP_MS = 100;
const PONG_WAIT_MS = 2000;
const PROBE_DEADLINE_MS = 25000;
const AGREE_FACTOR = 1.5; // host_runner/peer_probe.py AGREE_FACTOR / AGREE_SLACK_MS
const AGREE_SLACK_MS = 3.0;

const round3 = (x) => Math.round(x * 1000) / 1000;

function summarize(rtts, sent) {
  if (!rtts.length) throw new Error("no pong came back");
  const lowest = Math.min(...rtts); // queueing and busy pages only add: the least delayed ping is the path's
  let jitter = 0;
  for (let i = 1; i < rtts.length; i++) jitter += Math.abs(rtts[i] - rtts[i - 1]);
  jitter /= Math.max(1, rtts.length - 1);
  return { rtt_ms: round3(Math.max(LINK_RTT_MIN_MS, lowest)), jitter_ms: round3(jitter),
           loss: round3(Math.max(0, 1 - rtts.length / Math.max(1, sent))) };
}

const agrees = (proposed, own) => own / AGREE_FACTOR - AGREE_SLACK_MS <= proposed && proposed <= own * AGREE_FACTOR + AGREE_SLACK_MS;

// One probe's data channel: answers the peer's pings, times its own, queues the other messages.
function channel(dc) {
  const ch = { dc, rtts: [], sent: 0, pings: new Map(), inbox: [], waiter: null };
  ch.opened = new Promise((resolve) => { if (dc.readyState === "open") resolve(); else dc.onopen = resolve; });
  dc.onmessage = (event) => {
    let m;
    try { m = JSON.parse(event.data); } catch { return; }
    if (!m || typeof m !== "object") return;
    if (m.t === "ping") dc.send(JSON.stringify({ t: "pong", i: m.i }));
    else if (m.t === "pong") {
      const sent = ch.pings.get(m.i);
      if (sent !== undefined) { ch.pings.delete(m.i); ch.rtts.push(performance.now() - sent); }
    } else if (ch.waiter) { const w = ch.waiter; ch.waiter = null; w(m); } else ch.inbox.push(m);
  };
  ch.measure = async () => {
    await ch.opened;
    for (let k = 0; k < PEER_PINGS; k++) {
      const i = crypto.getRandomValues(new Uint32Array(1))[0]; // unpredictable: no pong before its ping
      ch.pings.set(i, performance.now());
      ch.sent++;
      dc.send(JSON.stringify({ t: "ping", i }));
      await new Promise((r) => setTimeout(r, PEER_PING_GAP_MS));
    }
    const until = performance.now() + PONG_WAIT_MS;
    while (ch.pings.size && performance.now() < until) await new Promise((r) => setTimeout(r, 20));
    return summarize(ch.rtts, ch.sent);
  };
  ch.expect = async (kind) => {
    const m = ch.inbox.length ? ch.inbox.shift() : await new Promise((r) => { ch.waiter = r; });
    if (m.t !== kind) throw new Error(`expected ${kind} on the data channel, got ${String(m.t).slice(0, 40)}`);
    return m;
  };
  return ch;
}

// Every candidate gathered (the relay carries one offer and one answer: no trickle).
function gathered(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => pc.addEventListener("icegatheringstatechange", () => {
    if (pc.iceGatheringState === "complete") resolve();
  }));
}

// send(message) puts a message on the live session; report(text) tells the page what happened.
export function peerProber(nodeId, key, py, send, report) {
  const answers = new Map(); // probe id -> resolve(sdp of the answer)
  const measured = (window.cePeerSamples = []); // co-signed samples this page took part in (tests read them)
  const failures = (window.cePeerFailures = []);

  const signAs = async (sample, field) => ({ ...sample, [field]: b64url(await key.sign(unhex(py.message("LinkSample", sample)))) });

  const offer = async (pc, m) => {
    const ch = channel(pc.createDataChannel("ce-probe", { ordered: false, maxRetransmits: 0 }));
    const answered = new Promise((resolve) => answers.set(m.probe, resolve));
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    send({ type: "peer_offer", probe: m.probe, sdp: pc.localDescription.sdp });
    await pc.setRemoteDescription({ type: "answer", sdp: await answered });
    const own = await ch.measure();
    const body = { a: nodeId, b: m.peer, ...own, bw_mbps: null, measured_at: Math.floor(Date.now() / 1000) };
    ch.dc.send(JSON.stringify({ t: "cosign", sample: await signAs(body, "sig_a") }));
    const back = (await ch.expect("cosigned")).sample;
    if (!back || Object.keys(body).some((k) => back[k] !== body[k])) throw new Error("the peer co-signed something else than the proposed sample");
    if (!(await signedBy(back, "sig_b", m.peer, py))) throw new Error("the peer's co-signature does not verify");
    return back;
  };

  const answer = async (pc, m) => {
    const opened = new Promise((resolve) => { pc.ondatachannel = (event) => resolve(channel(event.channel)); });
    await pc.setRemoteDescription({ type: "offer", sdp: m.sdp });
    await pc.setLocalDescription(await pc.createAnswer());
    await gathered(pc);
    send({ type: "peer_answer", probe: m.probe, sdp: pc.localDescription.sdp });
    const ch = await opened;
    const own = await ch.measure();
    const s = (await ch.expect("cosign")).sample;
    if (!s || s.a !== m.peer || s.b !== nodeId) throw new Error("the peer proposed a sample that is not of our link");
    if (!(await signedBy(s, "sig_a", m.peer, py))) throw new Error("the peer's signature does not verify");
    if (typeof s.rtt_ms !== "number" || s.rtt_ms < LINK_RTT_MIN_MS || s.rtt_ms > LINK_RTT_MAX_MS) throw new Error("the peer proposed an RTT outside physics");
    if (!agrees(s.rtt_ms, own.rtt_ms)) throw new Error(`the peer proposed ${s.rtt_ms} ms; this side measured ${own.rtt_ms} ms`);
    const cosigned = await signAs(s, "sig_b");
    ch.dc.send(JSON.stringify({ t: "cosigned", sample: cosigned }));
    send({ type: "peer_sample", probe: m.probe, sample: cosigned });
    await new Promise((r) => setTimeout(r, 200)); // the cosigned message leaves before the connection closes
    return cosigned;
  };

  const run = async (m) => {
    const pc = new RTCPeerConnection({ iceServers: (m.ice_servers || []).filter((u) => typeof u === "string").map((urls) => ({ urls })) });
    let timer;
    try {
      const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no result within ${PROBE_DEADLINE_MS / 1000} s`)), PROBE_DEADLINE_MS); });
      const sample = await Promise.race([m.role === "offer" ? offer(pc, m) : answer(pc, m), late]);
      measured.push(sample);
      report(`measured ${sample.rtt_ms.toFixed(2)} ms to node ${m.peer.slice(-8)} (${measured.length} node-to-node probes)`);
    } catch (err) {
      failures.push(String(err.message));
      send({ type: "peer_failed", probe: m.probe, reason: String(err.message).slice(0, 200) });
    } finally {
      clearTimeout(timer);
      answers.delete(m.probe);
      pc.close();
    }
  };

  return {
    handle(m) {
      if (m.type === "peer_probe" && (m.role === "offer" || m.role === "answer")) run(m);
      else if (m.type === "peer_answer" && answers.has(m.probe)) answers.get(m.probe)(m.sdp);
    },
  };
}
