// Landmark probes from the join page (the relay's side and the protocol: web/map/probe_endpoint.py; a server's:
// host_runner/landmarks.py). The page keeps its live session with the relay that served it; now and then
// the other relays of the cluster (GET /v1/relays names them with their URLs) measure their RTT to this
// browser: three pings, a sample they sign and the page co-signs with its WebCrypto key. ~1.5 KB each way
// per probe, three landmarks every 10 minutes (~27 KB per hour), none while the tab is hidden.
import { b64url, unhex } from "./keys.js";
import { LINK_RTT_MAX_MS, LINK_RTT_MIN_MS, relaySigned } from "./relay.js";

export const LANDMARK_INTERVAL_MS = 10 * 60 * 1000;
const PROBE_TIMEOUT_MS = 10000;
const MAX_LANDMARKS = 3;
// A landmark that does not hold this page's profile yet (just joined: it is on its way through the cluster)
// answers unknown_node; it is asked again 3 s later, 5 tries in all, not at the next round 10 minutes away
// (the same as a server node: common/landmark_probe.py UNKNOWN_NODE_TRIES).
const UNKNOWN_NODE_TRIES = 5;
const UNKNOWN_NODE_RETRY_MS = 3000;

export async function landmarks() {
  const resp = await fetch("/v1/relays", { cache: "no-store" });
  const rows = (await resp.json()).relays || [];
  // a page served over https may not open ws:// (mixed content): such landmarks are skipped
  return rows.filter((r) => !r.self && typeof r.url === "string" && /^https?:\/\//.test(r.url) &&
    !(location.protocol === "https:" && r.url.startsWith("http:")))
    .sort((a, b) => (a.relay < b.relay ? -1 : 1)).slice(0, MAX_LANDMARKS);
}

// One probe; resolves to the RTT in ms the landmark stored, rejects with the reason.
export function probe(url, nodeId, key, py) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url.replace(/^http/, "ws").replace(/\/$/, "") + "/v1/probe");
    const timer = setTimeout(() => { ws.close(); reject(new Error("no answer within 10 s")); }, PROBE_TIMEOUT_MS);
    const fail = (why) => { clearTimeout(timer); ws.close(); reject(new Error(why)); };
    let relay = null;
    ws.onerror = () => fail("could not connect");
    ws.onmessage = async (event) => {
      const m = JSON.parse(event.data);
      if (m.type === "welcome") {
        relay = m.relay;
        const body = { node_id: nodeId, session: m.session, seq: 1, sent_at: Math.floor(Date.now() / 1000) };
        const sig = b64url(await key.sign(unhex(py.message("Heartbeat", body))));
        ws.send(JSON.stringify({ type: "heartbeat", heartbeat: { ...body, sig } }));
      } else if (m.type === "ping") ws.send(JSON.stringify({ type: "pong", id: m.id }));
      else if (m.type === "cosign") {
        const s = m.sample || {};
        if (s.a !== nodeId || s.b !== relay || typeof s.rtt_ms !== "number" || s.rtt_ms < LINK_RTT_MIN_MS ||
            s.rtt_ms > LINK_RTT_MAX_MS || !(await relaySigned(s, py))) return fail("the landmark sent a sample that is not of this link");
        const sigA = b64url(await key.sign(unhex(py.message("LinkSample", s))));
        ws.send(JSON.stringify({ type: "cosigned", sample: { ...s, sig_a: sigA } }));
      } else if (m.type === "probed") {
        clearTimeout(timer);
        ws.close();
        resolve(m.rtt_ms);
      } else if (m.type === "error") fail(`${m.code}: ${m.detail}`);
    };
  });
}

// One landmark's line: its RTT, or why it failed; asked again shortly while it does not know this node yet.
async function probeLine(landmark, nodeId, key, py) {
  for (let attempt = 1; ; attempt++) {
    try {
      return `${(await probe(landmark.url, nodeId, key, py)).toFixed(2)} ms`;
    } catch (err) {
      if (!err.message.startsWith("unknown_node:") || attempt >= UNKNOWN_NODE_TRIES) return `failed (${err.message})`;
      await new Promise((resolve) => setTimeout(resolve, UNKNOWN_NODE_RETRY_MS));
    }
  }
}

// Probes every landmark now and every LANDMARK_INTERVAL_MS while the tab is visible; report(text) per round.
export function probeLandmarks(nodeId, key, py, report) {
  const round = async () => {
    if (document.hidden) return;
    let found = [];
    try {
      found = await landmarks();
    } catch (err) {
      report(`landmarks: could not list the relays (${err.message})`);
      return;
    }
    const lines = [];
    for (const l of found) lines.push(`${l.relay.slice(-8)} ${await probeLine(l, nodeId, key, py)}`);
    window.ceLandmarks = lines;
    if (lines.length) report(`measured by ${lines.length} other relay(s) of the cluster: ${lines.join(", ")}`);
  };
  round();
  const timer = setInterval(round, LANDMARK_INTERVAL_MS);
  return { stop() { clearInterval(timer); } };
}
