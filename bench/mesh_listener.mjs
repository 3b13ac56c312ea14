// bench/mesh.py's js-libp2p peer: the same stack as tests/mesh_js/mesh_peer.mjs (TCP, Noise, Yamux, identify,
// ping, gossipsub from tests/mesh_js/package-lock.json), copied beside those node_modules by bench/mesh.py, with
// what a benchmark needs instead of what a test needs:
//   node mesh_listener.mjs listen MULTIADDR SECONDS   subscribe to the three topics; per message one JSON line:
//                                                     kind, bytes (the gossip payload as received), at (Date.now()
//                                                     / 1000 on receipt), canonical (payload == its RFC 8785
//                                                     form), node_id of a profile, the record of the others
//   node mesh_listener.mjs pings MULTIADDR COUNT      one ping (connection, Noise, identify), {"warm"}, then COUNT
//                                                     pings back to back, {"rtts_ms": [...] (the library's, whole
//                                                     ms), "call_ms": [...] (each ping() call)}, {"done"}
// Every line printed is one JSON object; errors end the process with {"error": ...} and exit code 1.
if (!Promise.withResolvers) {  // Node 20 lacks it; current js-libp2p calls it
  Promise.withResolvers = function () {
    let resolve, reject
    const promise = new Promise((a, b) => { resolve = a; reject = b })
    return { promise, resolve, reject }
  }
}
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { gossipsub } from '@libp2p/gossipsub'
import { ping } from '@libp2p/ping'
import { identify } from '@libp2p/identify'
import { multiaddr } from '@multiformats/multiaddr'

const TOPICS = { 'ce-bench/profiles/1': 'NodeProfile', 'ce-netgraph': 'LinkSample', 'ce-bench/scoreboard/1': 'Scoreboard' }
const out = (obj) => console.log(JSON.stringify(obj))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function jcs (value) {  // RFC 8785 for the JSON ce-bench signs (as mesh_peer.mjs)
  if (Array.isArray(value)) return '[' + value.map(jcs).join(',') + ']'
  if (value !== null && typeof value === 'object') {
    return '{' + Object.keys(value).sort().map((k) => JSON.stringify(k) + ':' + jcs(value[k])).join(',') + '}'
  }
  return JSON.stringify(value)
}

async function newPeer () {
  return createLibp2p({
    addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
    transports: [tcp()], connectionEncrypters: [noise()], streamMuxers: [yamux()],
    services: { identify: identify(), ping: ping(), pubsub: gossipsub({ allowPublishToZeroTopicPeers: true, emitSelf: false }) }
  })
}

async function listen (addr, seconds) {
  const peer = await newPeer()
  peer.services.pubsub.addEventListener('message', (event) => {
    const at = Date.now() / 1000
    const { topic, data } = event.detail
    const kind = TOPICS[topic]
    const line = { kind, topic, bytes: data.length, at }
    try {
      const text = new TextDecoder().decode(data)
      const record = JSON.parse(text)
      line.canonical = jcs(record) === text
      if (kind === 'NodeProfile') line.node_id = record.node_id
      else line.record = record
    } catch (e) { line.unreadable = String(e) }
    out(line)
  })
  for (const topic of Object.keys(TOPICS)) peer.services.pubsub.subscribe(topic)
  await peer.dial(multiaddr(addr))
  out({ listening: peer.peerId.toString(), dialed: addr, at: Date.now() / 1000 })
  await sleep(seconds * 1000)
  await peer.stop()
}

async function pings (addr, count) {
  const peer = await newPeer()
  const target = multiaddr(addr)
  await peer.services.ping.ping(target)
  await sleep(1500)  // identify and anything else a new connection exchanges, done
  out({ warm: true, at: Date.now() / 1000 })
  await sleep(500)
  const rtts = []
  const walls = []  // the whole ping() call, stream open and close included (the library's RTT is whole ms)
  for (let i = 0; i < count; i++) {
    const t0 = performance.now()
    rtts.push(await peer.services.ping.ping(target))
    walls.push(performance.now() - t0)
  }
  out({ rtts_ms: rtts, call_ms: walls, at: Date.now() / 1000 })
  await sleep(500)
  out({ done: true })
  await peer.stop()
}

try {
  const [mode, ...args] = process.argv.slice(2)
  if (mode === 'listen') await listen(args[0], Number(args[1]))
  else if (mode === 'pings') await pings(args[0], Number(args[1]))
  else throw new Error(`unknown mode ${mode}: listen or pings`)
  process.exit(0)
} catch (e) {
  out({ error: String(e && e.stack || e) })
  process.exit(1)
}
