// Talking to the relay: the beacon, posting the signed profile (kept in localStorage and retried when the
// relay is unreachable), and the live session (signed heartbeats, answers to RTT pings).
import { b64url, unhex } from "./keys.js";
import { peerProber } from "./peer-probe.js";

const OUTBOX = "ce-bench-outbox";
// A link's physical RTT bounds in ms: capsule/model.py LINK_RTT_MIN_MS / LINK_RTT_MAX_MS (a test holds them equal)
export const LINK_RTT_MIN_MS = 0.002;
export const LINK_RTT_MAX_MS = 60000;

export async function getBeacon() {
  const resp = await fetch("/beacon", { cache: "no-store" });
  if (!resp.ok) throw new Error(`the relay answered ${resp.status} for /beacon`);
  return resp.json();
}

export async function postProfile(profile) {
  let resp;
  try {
    resp = await fetch("/v1/profiles", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(profile) });
  } catch (err) {
    localStorage.setItem(OUTBOX, JSON.stringify(profile));
    return { ok: false, retry: true, message: `the relay is unreachable (${err.message}); the signed profile is kept and will be sent again` };
  }
  const body = await resp.json().catch(() => ({}));
  if (resp.ok) { localStorage.removeItem(OUTBOX); return { ok: true, status: resp.status, body }; }
  if (resp.status >= 500 || resp.status === 429) {
    localStorage.setItem(OUTBOX, JSON.stringify(profile));
    return { ok: false, retry: true, message: `the relay is busy (${resp.status} ${body.code || ""}); the profile is kept and retried` };
  }
  return { ok: false, retry: false, message: `the relay refused the profile: ${body.title || resp.status}${body.detail ? ` — ${body.detail}` : ""}${body.field ? ` (${body.field})` : ""}`, code: body.code };
}

export function pendingProfile() {
  const text = localStorage.getItem(OUTBOX);
  return text ? JSON.parse(text) : null;
}

// Whether `signer` (a NodeId) signed the LinkSample's `field`: its Ed25519 key comes from the NodeId itself.
export async function signedBy(sample, field, signer, py) {
  try {
    const key = await crypto.subtle.importKey("raw", unhex(py.publicKeyHex(signer)), { name: "Ed25519" }, false, ["verify"]);
    const sig = Uint8Array.from(atob(sample[field].replaceAll("-", "+").replaceAll("_", "/")), (c) => c.charCodeAt(0));
    return await crypto.subtle.verify({ name: "Ed25519" }, key, sig, unhex(py.message("LinkSample", sample)));
  } catch {
    return false;
  }
}

// never co-sign what the relay did not sign: sig_b by the relay (sample.b)
export const relaySigned = (sample, py) => signedBy(sample, "sig_b", sample.b, py);

// answerer (browser_node/challenge.js), when given, answers the relay's challenges while the tab is visible;
// a hidden tab says so (hello without answers) and is not challenged: no heavy work in the background.
// The session stays with the relay that served the page while it answers; when it drops, the next relay of
// the cluster (GET /v1/relays, learned on each connection) takes it, so a phone stays live when its relay dies.
// gpuAnswerer (browser_node/gpu-challenge.js), when given, answers GPU challenges at roll calls (kind "gpu"): a
// roll call sends them with the SGEMM challenge, and both are answered side by side (openers by challenge id).
// peerReport, when given, takes part in node-to-node probes (browser_node/peer-probe.js) while the tab is
// visible, and hears one line per probe.
// tasks: a taskRunner (tasks.js) and whether its user allows tasks now ({runner, allowed: () => bool}); the
// session offers one slot for dispatched work while allowed (docs/jobs.md).
export function liveSession(nodeId, key, py, onEvent, answerer = null, gpuAnswerer = null, peerReport = null,
                            tasks = null) {
  const relays = [`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}`];
  let current = 0, ws, seq = 0, timer = null, stopped = false;
  const openers = new Map(); // challenge id -> the answerer that committed to it (SGEMM and GPU may both be open)
  if (gpuAnswerer) gpuAnswerer.warm().catch((err) => onEvent({ type: "error", code: "gpu", detail: err.message }));
  // a peer's URL reaches the relay with the peer's first view, seconds after both start: while the relay names
  // a peer without one, ask again 2 s later, doubling to 300 s (as host_runner/live_client.py does)
  let relearn = null;
  const learn = async (waitS = 2) => {
    clearTimeout(relearn);
    let unheard = true;
    try {
      const rows = (await (await fetch("/v1/relays", { cache: "no-store" })).json()).relays || [];
      unheard = rows.some((r) => !r.self && !r.url); // (its own row has no URL without --public-url)
      for (const r of rows) {
        if (r.self || typeof r.url !== "string" || !/^https?:\/\//.test(r.url)) continue;
        if (location.protocol === "https:" && r.url.startsWith("http:")) continue; // mixed content: not allowed
        const url = r.url.replace(/^http/, "ws").replace(/\/$/, "");
        if (!relays.includes(url)) relays.push(url);
      }
    } catch { /* the page's relay is away: keep what is known */ }
    clearTimeout(relearn); // a learn() begun while this one awaited its answer: one chain of asks, not two
    if (unheard && !stopped) relearn = setTimeout(() => learn(Math.min(2 * waitS, 300)), waitS * 1000);
  };
  const send = (message) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message)); };
  const prober = peerReport && typeof RTCPeerConnection === "function" ? peerProber(nodeId, key, py, send, peerReport) : null;
  let named = false; // a heartbeat of this connection named the node (peer probes need it)
  const hello = () => {
    // "llm-rank": this page decodes as the relay checks (seeded rank sampling); "llm" alone is an older client
    const kinds = ["sgemm", "llm-rank", ...(gpuAnswerer ? ["gpu"] : [])];
    if (answerer && ws && ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify({ type: "hello", answers: document.hidden ? [] : kinds, withdrawable: answerer.withdrawable === true }));
    }
  };
  const peers = () => { if (prober && named) send({ type: "peers", transports: document.hidden ? [] : ["webrtc"] }); };
  const jobs = () => { if (tasks && named) send({ type: "jobs", slots: tasks.allowed() ? 1 : 0 }); };
  // solo challenges a roll call withdrew (its challenge names them in "withdraws"): their work stops after the
  // product in progress (the answerer's halt) and nothing is sent for them; the relay judges them neither way
  const withdrawn = new Set();
  const withdraw = (ids) => {
    const mine = ids.filter((id) => openers.get(id) === answerer);
    for (const id of answerer && answerer.halt ? answerer.halt(mine) : []) withdrawn.add(id);
  };
  // each answer goes back on the connection its challenge came on (on another it names nothing in flight)
  const answer = async (work, id) => {
    const from = ws;
    try {
      const reply = await work();
      if (withdrawn.delete(id)) { openers.delete(id); return; }
      if (from.readyState === WebSocket.OPEN) from.send(JSON.stringify(reply));
    } catch (err) {
      withdrawn.delete(id);
      onEvent({ type: "error", code: "challenge", detail: err.message });
    }
  };
  document.addEventListener("visibilitychange", hello);
  document.addEventListener("visibilitychange", peers);
  const connect = () => {
    ws = new WebSocket(`${relays[current]}/v1/live`);
    window.ceLiveRelay = relays[current]; // (tests read where the session is)
    ws.binaryType = "arraybuffer";
    ws.onmessage = async (event) => {
      if (typeof event.data !== "string") { // the relay's bandwidth probe: acknowledge at once
        ws.send(JSON.stringify({ type: "bw_ack", n: event.data.byteLength }));
        return;
      }
      const m = JSON.parse(event.data);
      // solo challenges a roll call withdrew stop now, a hidden tab's too
      if (m.type === "challenge" && Array.isArray(m.withdraws)) withdraw(m.withdraws.slice(0, 16));
      // one key is one node: another tab or device with this key took the session; reconnecting would take it
      // back, and the two would take turns
      if (m.type === "error" && m.code === "superseded") stopped = true;
      if (m.type === "welcome") {
        learn();
        const beat = async () => {
          const body = { node_id: nodeId, session: m.session, seq: seq++, sent_at: Math.floor(Date.now() / 1000) };
          const sig = b64url(await key.sign(unhex(py.message("Heartbeat", body))));
          if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "heartbeat", heartbeat: { ...body, sig } }));
        };
        named = false;
        withdraw([...openers.keys()]); // a new connection: the last one's challenges ended with it (work stopped)
        openers.clear();
        hello();
        await beat();
        named = true;
        peers();
        jobs();
        // "pongs": the one heartbeat above binds the session and pongs keep it live (a phone wakes half as
        // often); an older relay wants a heartbeat every interval / 2
        if (m.liveness !== "pongs") timer = setInterval(beat, (m.heartbeat_interval_s * 1000) / 2);
      } else if (m.type === "ping") ws.send(JSON.stringify({ type: "pong", id: m.id }));
      else if (m.type === "challenge" && m.kind === "gpu" && gpuAnswerer && !document.hidden) {
        openers.set(m.id, gpuAnswerer);
        answer(() => gpuAnswerer.commit(m), m.id);
      } else if (m.type === "challenge" && m.kind !== "gpu" && answerer && !document.hidden) {
        openers.set(m.id, answerer);
        answer(() => answerer.commit(m), m.id);
      } else if (m.type === "open" && openers.has(m.id)) answer(() => openers.get(m.id).open(m), m.id);
      else if (m.type === "challenge_result" || m.type === "withdrawn") { openers.delete(m.id); withdrawn.delete(m.id); }
      else if ((m.type === "peer_probe" || m.type === "peer_answer") && prober && !document.hidden) prober.handle(m);
      else if ((m.type === "task" || m.type === "task_cancel") && tasks && tasks.allowed()) tasks.runner.handle(m);
      else if (m.type === "cosign") {
        // the relay measured this node's link from pings and signed it (sig_b); co-sign only our own link
        const s = m.sample || {};
        if (s.a === nodeId && typeof s.rtt_ms === "number" && s.rtt_ms >= LINK_RTT_MIN_MS && s.rtt_ms <= LINK_RTT_MAX_MS &&
            await relaySigned(s, py)) {
          const sigA = b64url(await key.sign(unhex(py.message("LinkSample", s))));
          ws.send(JSON.stringify({ type: "cosigned", sample: { ...s, sig_a: sigA } }));
        }
      }
      onEvent(m);
    };
    ws.onclose = () => {
      clearInterval(timer);
      if (!stopped) {
        current = (current + 1) % relays.length; // the next relay of the cluster (the same one if alone)
        setTimeout(connect, 3000);
      }
      onEvent({ type: "closed" });
    };
  };
  connect();
  return {
    send, // (the task runner's results go back on the current connection)
    // the user ticked or unticked "run tasks": the slot is offered or withdrawn (a running task stops)
    tasksChanged() { if (tasks && !tasks.allowed()) tasks.runner.stop(); jobs(); },
    stop() {
      stopped = true; clearInterval(timer); clearTimeout(relearn); ws.close();
      if (tasks) tasks.runner.stop();
      document.removeEventListener("visibilitychange", hello);
      document.removeEventListener("visibilitychange", peers);
      if (answerer) answerer.stop();
      if (gpuAnswerer) gpuAnswerer.stop();
    },
  };
}
