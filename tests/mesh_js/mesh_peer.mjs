// A libp2p peer the project did not write (issue 31): js-libp2p from npm with TCP, Noise, Yamux, identify, ping
// and gossipsub, and its own canonical-JSON and Ed25519 code (node:crypto), so nothing here goes through
// ce-bench's Python or browser code. tests/test_mesh.py copies it beside node_modules installed from
// tests/mesh_js/package-lock.json (npm ci) and runs:
//   node mesh_peer.mjs listen MULTIADDR SECONDS          subscribe to the three topics; one JSON line per message
//   node mesh_peer.mjs ping MULTIADDR                    ping a peer 5 times; identify's PeerId and protocols
//   node mesh_peer.mjs pair MULTIADDR SEED_A SEED_B      two peers with their own keys ping each other, co-sign a
//                                                        LinkSample and publish it, then the bad ones (JSON lines)
//   node mesh_peer.mjs verify KIND JSON                 this file's own signature check of one record (its control)
// Every line printed is one JSON object; errors end the process with {"error": ...} and exit code 1.
if (!Promise.withResolvers) {  // Node 20 lacks it; current js-libp2p calls it
  Promise.withResolvers = function () {
    let resolve, reject
    const promise = new Promise((a, b) => { resolve = a; reject = b })
    return { promise, resolve, reject }
  }
}
import crypto from 'node:crypto'
import fs from 'node:fs'
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { gossipsub } from '@libp2p/gossipsub'
import { ping } from '@libp2p/ping'
import { identify } from '@libp2p/identify'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'

const TOPICS = { 'ce-bench/profiles/1': 'NodeProfile', 'ce-netgraph': 'LinkSample', 'ce-bench/scoreboard/1': 'Scoreboard' }
const SIGNERS = { NodeProfile: [['sig', 'node_id']], LinkSample: [['sig_a', 'a'], ['sig_b', 'b']], Scoreboard: [['sig', 'relay']] }
const out = (obj) => console.log(JSON.stringify(obj))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// RFC 8785 for the JSON ce-bench signs: object keys sorted by UTF-16 code units, ES6 number text (which
// JSON.stringify already writes), no whitespace.
function jcs (value) {
  if (Array.isArray(value)) return '[' + value.map(jcs).join(',') + ']'
  if (value !== null && typeof value === 'object') {
    return '{' + Object.keys(value).sort().map((k) => JSON.stringify(k) + ':' + jcs(value[k])).join(',') + '}'
  }
  return JSON.stringify(value)
}

function message (kind, record) {
  const unsigned = Object.fromEntries(Object.entries(record).filter(([k]) => !SIGNERS[kind].some(([sig]) => sig === k)))
  return Buffer.from(`ce-bench/v1/${kind}\n` + jcs(unsigned))
}

function publicKeyOf (peerId) {  // the Ed25519 key inside an identity-multihash PeerId, as node:crypto wants it
  const raw = peerIdFromString(peerId).publicKey.raw
  return crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(raw).toString('base64url') }, format: 'jwk' })
}

function privateKeyOf (seed) {  // PKCS#8 of an Ed25519 seed
  return crypto.createPrivateKey({ key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]), format: 'der', type: 'pkcs8' })
}

function verify (kind, record) {  // every signature of the record, checked against the PeerId that names its signer
  for (const [sig, signer] of SIGNERS[kind]) {
    if (typeof record[sig] !== 'string' || typeof record[signer] !== 'string') return false
    if (!crypto.verify(null, message(kind, record), publicKeyOf(record[signer]), Buffer.from(record[sig], 'base64url'))) return false
  }
  return true
}

async function newPeer (seed) {
  const options = {
    addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
    transports: [tcp()], connectionEncrypters: [noise()], streamMuxers: [yamux()],
    services: { identify: identify(), ping: ping(), pubsub: gossipsub({ allowPublishToZeroTopicPeers: true, emitSelf: false }) }
  }
  if (seed) options.privateKey = await generateKeyPairFromSeed('Ed25519', seed)
  return createLibp2p(options)
}

async function listen (addr, seconds) {
  const peer = await newPeer()
  peer.services.pubsub.addEventListener('message', (event) => {
    const { topic, data } = event.detail
    const kind = TOPICS[topic]
    let record = null
    let verified = false
    try {
      record = JSON.parse(new TextDecoder().decode(data))
      verified = kind !== undefined && verify(kind, record)
    } catch (e) { verified = false }
    out({ topic, kind, from: event.detail.from?.toString(), verified, record, at: Date.now() / 1000 })
  })
  for (const topic of Object.keys(TOPICS)) peer.services.pubsub.subscribe(topic)
  await peer.dial(multiaddr(addr))
  out({ listening: peer.peerId.toString(), dialed: addr, at: Date.now() / 1000 })
  await sleep(seconds * 1000)
  await peer.stop()
}

async function pingPeer (addr) {
  const peer = await newPeer()
  const target = multiaddr(addr)
  const identified = new Promise((resolve) => peer.addEventListener('peer:identify', (e) => resolve(e.detail)))
  const rtts = []
  for (let i = 0; i < 5; i++) rtts.push(await peer.services.ping.ping(target))
  const id = await Promise.race([identified, sleep(10000).then(() => null)])
  out({ rtts_ms: rtts, identified: id && id.peerId.toString(), protocols: id ? id.protocols : [] })
  await peer.stop()
}

async function pair (relayAddr, seedA, seedB) {
  const [a, b] = [await newPeer(Buffer.from(seedA, 'hex')), await newPeer(Buffer.from(seedB, 'hex'))]
  a.services.pubsub.subscribe('ce-netgraph')
  await a.dial(multiaddr(relayAddr))
  const rtts = []
  for (let i = 0; i < 5; i++) rtts.push(await a.services.ping.ping(b.getMultiaddrs()[0]))
  await sleep(3000)  // the relay's gossipsub mesh forms (heartbeat 1 s)
  const sorted = [...rtts].sort((x, y) => x - y)
  const rtt = Math.max(sorted[2], 0.01)
  const mean = rtts.reduce((s, x) => s + x, 0) / rtts.length
  const sample = { a: a.peerId.toString(), b: b.peerId.toString(), rtt_ms: rtt,
    jitter_ms: Math.sqrt(rtts.reduce((s, x) => s + (x - mean) ** 2, 0) / rtts.length), loss: 0, bw_mbps: null,
    measured_at: Math.floor(Date.now() / 1000) }
  const sign = (seed, record) => crypto.sign(null, message('LinkSample', record), privateKeyOf(Buffer.from(seed, 'hex'))).toString('base64url')
  const good = { ...sample, sig_a: sign(seedA, sample), sig_b: sign(seedB, sample) }
  const publish = async (label, record) => {
    const bytes = typeof record === 'string' ? Buffer.from(record) : Buffer.from(jcs(record))
    const result = await a.services.pubsub.publish('ce-netgraph', bytes).then((r) => r.recipients.length, (e) => String(e))
    out({ published: label, record: typeof record === 'string' ? null : record, recipients: result })
    await sleep(300)
  }
  await publish('good', good)
  const other = crypto.randomBytes(32).toString('hex')
  await publish('one_sided', { ...sample, rtt_ms: 1.5, sig_a: sign(seedA, { ...sample, rtt_ms: 1.5 }), sig_b: 'A'.repeat(86) })
  await publish('forged', { ...sample, rtt_ms: 2.5, sig_a: sign(other, { ...sample, rtt_ms: 2.5 }), sig_b: sign(seedB, { ...sample, rtt_ms: 2.5 }) })
  await publish('malformed', '{"a": "not a sample"')
  await publish('not_json', 'hello mesh')
  await publish('replayed', good)  // the same record again (gossipsub gives it a new sequence number)
  await sleep(2000)
  await a.stop()
  await b.stop()
}

// Publishes one record (a file's bytes, as they are) on a topic through the relay's gossipsub mesh.
async function publishFile (relayAddr, topic, file) {
  const peer = await newPeer()
  peer.services.pubsub.subscribe(topic)
  await peer.dial(multiaddr(relayAddr))
  await sleep(3000)  // the relay's gossipsub mesh forms (heartbeat 1 s)
  const bytes = fs.readFileSync(file)
  const result = await peer.services.pubsub.publish(topic, bytes).then((r) => r.recipients.length, (e) => String(e))
  out({ published: topic, recipients: result })
  await sleep(1000)
  await peer.stop()
}

try {
  const [mode, ...args] = process.argv.slice(2)
  if (mode === 'listen') await listen(args[0], Number(args[1]))
  else if (mode === 'ping') await pingPeer(args[0])
  else if (mode === 'pair') await pair(args[0], args[1], args[2])
  else if (mode === 'publish') await publishFile(args[0], args[1], args[2])
  else if (mode === 'verify') out({ verified: verify(args[0], JSON.parse(args[1])) })
  else throw new Error(`unknown mode ${mode}: listen, ping or pair`)
  process.exit(0)
} catch (e) {
  out({ error: String(e && e.stack || e) })
  process.exit(1)
}
