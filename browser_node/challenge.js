// Answers the relay's challenges (protocol: web/challenges.py) with the capsule's own code: each seed runs
// in its own probe worker (capsule-reactor.wasm's ce_challenge_begin/next/commit), exactly as servers do in
// host_runner/challenge_answer.py. The workers stay between challenges (a fresh worker costs tens of ms,
// which would count against the node's observed time) and are dropped when the page stops answering.

import { call, probeWorkerPool } from "./workers.js";

const MAX_PROOF = 32; // room for the sibling hashes of any tree a challenge can make (2^12 rows x 2^16 products)

export function challengeAnswerer(module) {
  const workers = probeWorkerPool(module);
  const pool = (count) => workers.get(count);
  let current = null; // { id, count }
  return {
    // {type: "challenge"} -> {type: "commit"}: one Merkle root per seed over the products it finished,
    // computed concurrently (at a roll call each worker stops stop_after_s after the challenge arrived and
    // commits what it did: the relay counts that work); for a reference-model challenge, the token-id hash
    // of one worker's decode
    async commit(m) {
      const stopAt = typeof m.stop_after_s === "number" ? Date.now() + 1000 * m.stop_after_s : null;
      const seeds = m.seeds.map((hex) => BigInt("0x" + hex));
      if (m.kind === "llm") {
        const [w] = await pool(1);
        const hash = await call(w, { cmd: "llm", seedLo: Number(seeds[0] & 0xffffffffn), seedHi: Number(seeds[0] >> 32n), decode: m.decode });
        return { type: "commit", id: m.id, token_ids_sha256: hash };
      }
      const ws = await pool(seeds.length);
      const done = await Promise.all(ws.map((w, i) => call(w, {
        cmd: "challenge", seedLo: Number(seeds[i] & 0xffffffffn), seedHi: Number(seeds[i] >> 32n), n: m.n, reps: m.reps || 1,
        stopAt })));
      current = { id: m.id, count: seeds.length };
      return { type: "commit", id: m.id, roots: done.map((d) => d.root), products: done.map((d) => d.products) };
    },
    // {type: "open"} -> {type: "opening"}: the named rows with their proofs, in the order asked
    async open(m) {
      if (!current || current.id !== m.id) throw new Error("no commitment of that id");
      const rows = [];
      for (const [instance, row] of m.rows) {
        if (!(instance >= 0 && instance < current.count)) throw new Error(`no instance ${instance}`);
        const w = (await pool(instance + 1))[instance];
        rows.push({ instance, row, ...(await call(w, { cmd: "open", row, maxProof: MAX_PROOF })) });
      }
      return { type: "opening", id: m.id, rows };
    },
    stop() { workers.terminate(); current = null; },
  };
}
