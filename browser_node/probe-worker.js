// A CPU probe worker: runs the capsule's reactor kernels (capsule-reactor.wasm, the same C as the
// server capsule) on command and reports samples. One worker per logical core; the page starts them
// together for the whole-CPU figure. Messages: {cmd: "init", module} then {cmd: "sgemm"|"triad"|"llm", ...}.

let k = null; // the reactor's exports

function memF32(ptr, count) { return new Float32Array(k.memory.buffer, ptr, count); }
function memF64(ptr, count) { return new Float64Array(k.memory.buffer, ptr, count); }

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p) => { const i = p * (s.length - 1); const lo = Math.floor(i); return s[lo] + (i - lo) * ((s[lo + 1] ?? s[lo]) - s[lo]); };
  const med = q(0.5);
  return { n: s.length, median: med, min: s[0], max: s[s.length - 1], p25: q(0.25), p75: q(0.75),
           spread_pct: med > 0 ? (100 * (q(0.75) - q(0.25))) / med : null };
}

function xorshift(seed) {
  let x = seed >>> 0 || 1;
  return () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return (x / 4294967296) * 2 - 1; };
}

function sgemm({ n, ms, seed }) {
  const bytes = n * n * 4;
  const pa = k.ce_alloc(bytes), pb = k.ce_alloc(bytes), pc = k.ce_alloc(bytes);
  const rnd = xorshift(seed);
  const a = memF32(pa, n * n), b = memF32(pb, n * n);
  for (let i = 0; i < n * n; i++) { a[i] = rnd(); b[i] = rnd(); }
  let t0 = performance.now();
  k.ce_sgemm(n, n, n, pa, n, pb, n, pc, n); // warm-up + the product that is checked
  const warmupMs = performance.now() - t0;
  // check sampled entries against a float64 dot product (error / (n * 2^-24 * sum|a*b|) < 1)
  const A = memF32(pa, n * n), B = memF32(pb, n * n), C = memF32(pc, n * n);
  let worst = 0;
  for (let e = 0; e < 48; e++) {
    const i = e === 0 ? n - 1 : Math.floor(((rnd() + 1) / 2) * n), j = e === 0 ? n - 1 : Math.floor(((rnd() + 1) / 2) * n);
    let ref = 0, mag = 0;
    for (let p = 0; p < n; p++) { const t = A[i * n + p] * B[p * n + j]; ref += t; mag += Math.abs(t); }
    const err = Math.abs(C[i * n + j] - ref) / (n * 2 ** -24 * mag + 1e-30);
    if (!(err <= worst)) worst = err;
  }
  const verified = worst < 1;
  const samples = [];
  const flops = 2 * n * n * n;
  const start = performance.now();
  while (verified && (samples.length < 3 || performance.now() - start < ms) && samples.length < 200) {
    t0 = performance.now();
    k.ce_sgemm(n, n, n, pa, n, pb, n, pc, n);
    samples.push(flops / ((performance.now() - t0) * 1e6));
  }
  k.ce_free(pa); k.ce_free(pb); k.ce_free(pc); k.ce_sgemm_release();
  return { gflops: verified ? median(samples) : null, n, samples, stats: stats(samples), warmup_ms: warmupMs,
           verified, max_error_ratio: worst,
           method: `C = A*B n=${n} fp32, capsule reactor SIMD128 kernel in a Web Worker; GFLOPS = 2n^3/t; median` };
}

function triad({ mib, ms, isolated }) {
  const n = (mib * 1048576) / 8;
  const chunk = isolated ? 131072 : 1048576; // coarse timers need bigger chunks
  const pa = k.ce_alloc(n * 8), pb = k.ce_alloc(n * 8), pc = k.ce_alloc(n * 8);
  memF64(pb, n).fill(2.0); memF64(pc, n).fill(1.0); memF64(pa, n).fill(0.0);
  const rates = [];
  const start = performance.now();
  let passes = 0;
  while (passes < 2 || (performance.now() - start < ms && passes < 40)) {
    for (let off = 0; off < n; off += chunk) {
      const len = Math.min(chunk, n - off);
      const t0 = performance.now();
      k.ce_stream_triad(len, pa + off * 8, pb + off * 8, pc + off * 8, 3.0);
      const dt = performance.now() - t0;
      if (passes > 0 && dt > 0) rates.push((24 * len) / (dt * 1e6));
    }
    passes++;
  }
  const a = memF64(pa, n);
  let ok = true;
  for (let i = 0; i < n; i += 4099) if (a[i] !== 5.0) ok = false;
  k.ce_free(pa); k.ce_free(pb); k.ce_free(pc);
  return { triad_gbps: ok ? median(rates) : null, array_mib: mib, chunk_mib: (chunk * 8) / 1048576,
           kernels: { triad: { chunk_stats: stats(rates) } }, verified: ok, timed_passes: passes - 1,
           method: "STREAM triad a = b + 3c over 3 double arrays, each chunk timed; median chunk rate (GB/s)" };
}

async function llm({ seedLo, seedHi, prompt }) {
  const model = k.ce_llm_new(seedLo, seedHi);
  if (!model) return { tokens_per_sec: null, reason: "not enough memory for the reference model" };
  const runs = [], blocks = [];
  let ids = [];
  for (let r = 0; r < 2; r++) {
    let next = 0;
    for (let pos = 0; pos < prompt.length; pos++) next = k.ce_llm_forward(model, prompt[pos], pos);
    ids = [];
    const t0 = performance.now();
    let blockStart = t0;
    for (let i = 0; i < 128; i++) {
      next = k.ce_llm_forward(model, next, prompt.length + i);
      ids.push(next);
      if ((i + 1) % 16 === 0) { const now = performance.now(); blocks.push(16000 / (now - blockStart)); blockStart = now; }
    }
    runs.push(128000 / (performance.now() - t0));
  }
  k.ce_llm_free(model);
  const bytes = new Uint8Array(new Uint32Array(ids).buffer); // little-endian uint32, as the C probe hashes
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return { ref_model: "ce-ref-15m-f32", tokens_per_sec: median(runs), runs, run_stats: stats(runs),
           block_stats: stats(blocks), token_ids_sha256: [...digest].map((b) => b.toString(16).padStart(2, "0")).join(""),
           token_ids_head: ids.slice(0, 8),
           method: "llama-bench tg128 in a Web Worker: 32-token seeded prompt, 128 greedy decode steps timed; median of 2 runs" };
}

onmessage = async (event) => {
  const m = event.data;
  try {
    if (m.cmd === "init") {
      const instance = await WebAssembly.instantiate(m.module, {});
      k = instance.exports;
      k._initialize();
      postMessage({ ok: true });
    } else if (m.cmd === "sgemm") postMessage({ ok: true, result: sgemm(m) });
    else if (m.cmd === "triad") postMessage({ ok: true, result: triad(m) });
    else if (m.cmd === "llm") postMessage({ ok: true, result: await llm(m) });
    else postMessage({ ok: false, error: `unknown command ${m.cmd}` });
  } catch (err) {
    postMessage({ ok: false, error: String(err && err.message || err) });
  }
};
