// Answers the relay's challenges (protocol: web/proof/challenges.py) with the capsule's own code: each seed runs
// in its own probe worker (capsule-reactor.wasm's ce_challenge_begin/next/commit), exactly as servers do in
// host_runner/challenge_answer.py. The workers stay between challenges (a fresh worker costs tens of ms,
// which would count against the node's observed time) and are dropped when the page stops answering.

import { call, probeWorkerPool } from "./workers.js";

const MAX_PROOF = 32; // room for the sibling hashes of any tree a challenge can make (2^12 rows x 2^16 products)

export function challengeAnswerer(module) {
  const workers = probeWorkerPool(module);
  // the first worker and its reference model made now, not in the first challenge's timed window (a fresh
  // worker costs tens of ms, the model's weights as much again); every request waits for it, as a worker
  // answers one request at a time (workers.js call) and the pool must not be grown twice at once. A failure
  // here shows again, as the challenge's own error.
  const warmed = workers.get(1).then(([w]) => call(w, { cmd: "llmWarm" })).catch(() => null);
  const pool = async (count) => { await warmed; return workers.get(count); };
  let current = null; // { id, count }
  // Each commit and open whole, in the order the relay's messages came: an opening owed from before a roll call
  // reads its rows before the roll call's products replace them in the workers.
  let queue = Promise.resolve();
  const inTurn = (work) => { const run = queue.then(work); queue = run.catch(() => null); return run; };
  // A roll call may withdraw a solo challenge in progress (relay "withdraws"): each commit's flag, set to stop
  // its workers after the product in progress (a SharedArrayBuffer: the page is cross-origin isolated)
  const withdrawable = typeof SharedArrayBuffer === "function" && self.crossOriginIsolated === true;
  const halts = new Map(); // challenge id -> Int32Array(1) over a SharedArrayBuffer
  // challenges begun, and being computed now: a measurement step they overlapped runs again (join.js runAll)
  let worked = 0, computing = 0;
  return {
    withdrawable,
    get worked() { return worked; },
    get computing() { return computing > 0; },
    // stops the named challenges' work after the product or token in progress (those not begun: at once);
    // returns the ids it stopped (those still being computed)
    halt(ids) {
      const stopped = [];
      for (const id of ids) {
        const flag = halts.get(id);
        if (flag) { Atomics.store(flag, 0, 1); stopped.push(id); }
      }
      return stopped;
    },
    // {type: "challenge"} -> {type: "commit"}: one Merkle root per seed over the products it finished,
    // computed concurrently (at a roll call each worker stops stop_after_s after the challenge arrived and
    // commits what it did: the relay counts that work); for a reference-model challenge, the token ids of
    // one worker's decode (at a roll call, those it decoded by the same deadline)
    commit(m) {
      // taken before any await: relay.js calls commit as the message arrives, and the deadline counts from then
      const stopAt = typeof m.stop_after_s === "number" ? Date.now() + 1000 * m.stop_after_s : null;
      const seeds = m.seeds.map((hex) => BigInt("0x" + hex));
      const halt = withdrawable ? new Int32Array(new SharedArrayBuffer(4)) : undefined;
      if (halt) halts.set(m.id, halt);
      return inTurn(async () => {
        let began = false;
        try {
          // withdrawn before its turn came: no work at all (relay.js sends nothing for it)
          if (halt && Atomics.load(halt, 0) !== 0) return { type: "commit", id: m.id, withdrawn: true };
          worked++; computing++; began = true;
          if (m.kind === "llm") {
            const [w] = await pool(1);
            const tokens = await call(w, {
              cmd: "llm", seedLo: Number(seeds[0] & 0xffffffffn), seedHi: Number(seeds[0] >> 32n), decode: m.decode,
              stopAt, halt });
            return { type: "commit", id: m.id, tokens };
          }
          const ws = await pool(seeds.length);
          // leaves over each entry's high half where the relay offers it (capsule/kernels/challenge.c); a relay
          // that names no forms is older and checks whole rows (capsule/cpu_challenge.py leaf_form_offered)
          const high16 = Array.isArray(m.leaves) && m.leaves.includes("high16");
          const calls = ws.map((w, i) => call(w, {
            cmd: "challenge", seedLo: Number(seeds[i] & 0xffffffffn), seedHi: Number(seeds[i] >> 32n), n: m.n,
            reps: m.reps || 1, stopAt, high16, halt }));
          // one worker failing stops the others and waits for them: none keeps computing into the next turn
          const settled = await Promise.allSettled(calls);
          const failed = settled.find((r) => r.status === "rejected");
          if (failed) {
            if (halt) Atomics.store(halt, 0, 1);
            throw failed.reason;
          }
          const done = settled.map((r) => r.value);
          current = { id: m.id, count: seeds.length };
          return { type: "commit", id: m.id, roots: done.map((d) => d.root), products: done.map((d) => d.products),
                   leaf: high16 ? "high16" : "fp32" };
        } finally { halts.delete(m.id); if (began) computing--; }
      });
    },
    // {type: "open"} -> {type: "opening"}: the named rows with their proofs, in the order asked
    open(m) {
      return inTurn(async () => {
        if (!current || current.id !== m.id) throw new Error("no commitment of that id");
        const rows = [];
        for (const [instance, row] of m.rows) {
          if (!(instance >= 0 && instance < current.count)) throw new Error(`no instance ${instance}`);
          const w = (await pool(instance + 1))[instance];
          rows.push({ instance, row, ...(await call(w, { cmd: "open", row, maxProof: MAX_PROOF })) });
        }
        return { type: "opening", id: m.id, rows };
      });
    },
    // (a request to a terminated worker never settles: the turns start afresh, so nothing waits behind it)
    stop() { workers.terminate(); current = null; queue = Promise.resolve(); halts.clear(); },
  };
}
