// A CPU probe worker: plumbing around the capsule's reactor (capsule-reactor.wasm), which runs the
// capsule's own probe driver — the same C, arguments and ProbeReport as `wasmtime run capsule.wasm`.
// The worker only supplies the clock (unix time in microseconds, so all workers share one timeline)
// and collects the summary lines. Messages: {cmd: "init", module}, then {cmd: "run", args: [...]}; for the
// relay's challenges (browser_node/challenge.js) {cmd: "challenge", seedLo, seedHi, n, reps, stopAt, high16} ->
// {root (hex), products} and
// {cmd: "open", row, maxProof} -> {values (base64 fp32 LE), proof: [hex]}; {cmd: "llm", seedLo, seedHi,
// decode, stopAt} -> [token id, ...] (1 to decode of them); {cmd: "llmWarm"} -> null (makes the reference model).
// A challenge or llm command may carry `halt`, an Int32Array over a SharedArrayBuffer: once the page sets it
// (a roll call withdrew the challenge) no product or token is begun after the one in progress.

let k = null; // the reactor's exports
let log = [];
const utf8 = new TextDecoder();

const imports = {
  env: {
    ce_clock_us: () => (performance.timeOrigin + performance.now()) * 1000,
    ce_log: (ptr, len) => { log.push(utf8.decode(new Uint8Array(k.memory.buffer, ptr, len).slice())); },
  },
};

function run(args) {
  const line = new TextEncoder().encode(args.join(" ") + "\0");
  const ptr = k.ce_alloc(line.length);
  if (!ptr) throw new Error("wasm memory exhausted");
  new Uint8Array(k.memory.buffer, ptr, line.length).set(line);
  log = [];
  const code = k.ce_run(ptr);
  k.ce_free(ptr);
  const text = utf8.decode(new Uint8Array(k.memory.buffer, k.ce_result_ptr(), k.ce_result_len()).slice());
  if (code !== 0) throw new Error(`capsule exited with status ${code}: ${text.split("\n")[0]}`);
  return { report: JSON.parse(text), log: log.join("") };
}

const halted = (m) => m.halt instanceof Int32Array && Atomics.load(m.halt, 0) !== 0;
const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

let challengeN = 0; // the order of the product this worker committed to

// Products one after another; with stopAt (Date.now() ms: the roll call's deadline on this clock) a product
// is begun only while the last one's time still fits before it (the first always is), then the worker
// commits to those it finished (capsule/kernels/challenge.c; host_runner/challenge_answer.py does the same).
function challenge(m) {
  k.ce_challenge_leaf_form(m.high16 ? 1 : 0);
  const rc = k.ce_challenge_begin(m.seedLo >>> 0, m.seedHi >>> 0, m.n, m.reps);
  if (rc !== 0) throw new Error(rc === 1 ? `out of memory for products of order ${m.n}` : `bad challenge size ${m.n} x ${m.reps}`);
  let done = 0;
  let lastMs = 0;
  while (done < m.reps && (m.stopAt == null || done === 0 || Date.now() + lastMs <= m.stopAt) && !(done > 0 && halted(m))) {
    const started = performance.now();
    done = k.ce_challenge_next(1);
    if (done < 0) throw new Error(`the capsule could not compute a product of order ${m.n}`);
    lastMs = performance.now() - started;
  }
  if (k.ce_challenge_commit(done) !== 0) throw new Error(`the capsule could not commit to ${done} product(s)`);
  challengeN = m.n;
  return { root: hex(new Uint8Array(k.memory.buffer, k.ce_challenge_root(), 32)), products: done };
}

function open(m) {
  const ptr = k.ce_challenge_row(m.row);
  if (!ptr) throw new Error(`no row ${m.row} in the committed product`);
  const bytes = new Uint8Array(k.memory.buffer, ptr, challengeN * 4); // wasm memory is little-endian, as the wire format
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  const out = k.ce_alloc(32 * m.maxProof);
  const count = k.ce_challenge_proof(m.row, out);
  const proof = [];
  for (let i = 0; i < count; i++) proof.push(hex(new Uint8Array(k.memory.buffer, out + 32 * i, 32)));
  k.ce_free(out);
  return { values: btoa(text), proof };
}

const LLM_PER_SEQ = 224; // CE_LLMC_PER_SEQ (capsule/kernels/llm_challenge.h): tokens per sequence, then a new prompt

// A reference-model challenge: the capsule's ce_llmc_begin (the fixed model, kept between challenges; the
// seed names the prompts), then ce_llmc_next token by token -> the token ids, which the relay recomputes
// (ce_llmc_expected). All m.decode tokens, or with stopAt (Date.now() ms: the roll call's deadline on this
// clock) those that end before it, as challenge() does with products: a token is begun only while its expected
// time still fits (the first always is). A sequence's first token also fills the cache with its prompt (~5x a
// token), so a token is expected to take what the last of its kind took: the last sequence start (token 0,
// first), or the last other token (until there is one, token 0: the safe side).
// host_runner/challenge_answer.py llm_answer does the same.
function llm(m) {
  if (!(Number.isInteger(m.decode) && m.decode >= 1)) throw new Error(`bad decode length ${m.decode}`);
  if (k.ce_llmc_begin(m.seedLo >>> 0, m.seedHi >>> 0) !== 0) throw new Error("out of memory for the reference model");
  const tokens = [];
  let startMs = 0; // the last sequence start's time
  let stepMs = null; // the last other token's time
  while (tokens.length < m.decode) {
    const atStart = tokens.length % LLM_PER_SEQ === 0;
    const expectedMs = atStart || stepMs === null ? startMs : stepMs;
    if (m.stopAt != null && tokens.length > 0 && Date.now() + expectedMs > m.stopAt) break;
    if (tokens.length > 0 && halted(m)) break;
    const started = performance.now();
    const token = k.ce_llmc_next();
    if (token < 0) throw new Error("the capsule could not decode a reference-model token");
    if (atStart) startMs = performance.now() - started;
    else stepMs = performance.now() - started;
    tokens.push(token);
  }
  return tokens;
}

// The reference model made before any challenge (browser_node/challenge.js): generating its weights is not
// decode time, and in a challenge's window it would lower the first answer's observed tokens/s.
function llmWarm() {
  if (k.ce_llmc_begin(0, 0) !== 0) throw new Error("out of memory for the reference model");
  return null;
}

onmessage = async (event) => {
  const m = event.data;
  try {
    if (m.cmd === "init") {
      const instance = await WebAssembly.instantiate(m.module, imports);
      k = instance.exports;
      k._initialize();
      postMessage({ ok: true });
    } else if (m.cmd === "run") postMessage({ ok: true, result: run(m.args) });
    else if (m.cmd === "challenge") postMessage({ ok: true, result: challenge(m) });
    else if (m.cmd === "open") postMessage({ ok: true, result: open(m) });
    else if (m.cmd === "llm") postMessage({ ok: true, result: llm(m) });
    else if (m.cmd === "llmWarm") postMessage({ ok: true, result: llmWarm() });
    else postMessage({ ok: false, error: `unknown command ${m.cmd}` });
  } catch (err) {
    postMessage({ ok: false, error: String((err && err.message) || err) });
  }
};
