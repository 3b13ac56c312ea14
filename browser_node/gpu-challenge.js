// Answers the relay's GPU challenges (kind "gpu": capsule/gpu_challenge.py; relay side web/proof/gpu_challenges.py) with
// WebGPU and the same WGSL as servers (host_runner/gpu_answer.py): the probe's matmul_f32.wgsl, and
// challenge_gpu.wgsl to draw the inputs and hash rows and subtrees on the GPU. Per product: gen -> matmul; per
// group of products side by side: one leaf dispatch over all their rows; per batch: the tree levels down to each
// product's root, 32 bytes per product read back once at the end (at a roll call the GPU stops at the deadline
// between rounds of products: commit). The host (here, crypto.subtle) joins the
// products' roots; openings recompute the named products and read back their rows and leaf digests.
//
// Rows are always hashed on the GPU here (servers hash on the host on CPU adapters, where that is faster).

const GOLDEN = 0x9e3779b97f4a7c15n; // capsule.challenge.GOLDEN
const SGEMM_STREAM = 0x7367656d6dn; // "sgemm"
const MASK64 = (1n << 64n) - 1n;
const TILE = 64; // matmul_f32.wgsl's tile
const LEAF_BUFFER_BYTES = 16 << 20; // leaf digests of one batch of products
const C_BUFFER_BYTES = 512 << 20; // products side by side for one leaf dispatch
const ROWS_IN_FLIGHT = 1 << 16; // rows one leaf dispatch should hash at once (one thread each)
const STEP_BYTES = 16; // struct Step in challenge_gpu.wgsl
const ROUNDS = 8; // at a roll call: the largest round is ~1/ROUNDS of the work (host_runner/gpu_answer.py)

async function shader(base, name) {
  const resp = await fetch(`${base}${name}`);
  if (!resp.ok) throw new Error(`cannot load ${base}${name} (${resp.status})`);
  return resp.text();
}

const productState = (seed, t) => (((seed + BigInt(t) * GOLDEN) & MASK64) ^ SGEMM_STREAM) & MASK64;

async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
}

function nodeHash(left, right) {
  const m = new Uint8Array(65);
  m[0] = 1;
  m.set(left, 1);
  m.set(right, 33);
  return sha256(m);
}

// Every level of the tree over `bottom` (a power-of-two count of 32-byte nodes), bottom first.
async function levels(bottom) {
  const out = [bottom];
  while (out[out.length - 1].length > 1) {
    const level = out[out.length - 1];
    out.push(await Promise.all(Array.from({ length: level.length / 2 }, (_, i) => nodeHash(level[2 * i], level[2 * i + 1]))));
  }
  return out;
}

// The tree above the products' roots, padded with zero subtrees of n leaves (capsule/gpu_challenge.py upper_levels).
async function upperLevels(roots, n) {
  let zero = new Uint8Array(32);
  for (let h = 1; h < n; h *= 2) zero = await nodeHash(zero, zero);
  let width = 1;
  while (width < roots.length) width *= 2;
  return levels([...roots, ...Array(width - roots.length).fill(zero)]);
}

// SHA-256 digests as the shaders keep them (big-endian words in u32s) to bytes.
function digests(words, count) {
  const out = [];
  for (let i = 0; i < count; i++) {
    const d = new Uint8Array(32), view = new DataView(d.buffer);
    for (let j = 0; j < 8; j++) view.setUint32(4 * j, words[8 * i + j], false);
    out.push(d);
  }
  return out;
}

const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

function base64(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

async function readBuffer(device, source, offset, size) {
  const read = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(source, offset, read, 0, size);
  device.queue.submit([enc.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const out = new Uint8Array(read.getMappedRange().slice(0));
  read.destroy();
  return out;
}

function dispatch(enc, pipeline, group, x, y = 1) {
  const pass = enc.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, group);
  pass.dispatchWorkgroups(x, y);
  pass.end();
}

const grid = (groups) => [Math.min(groups, 65535), Math.ceil(groups / 65535)];

// The device, pipelines and buffers, kept between challenges (compiling shaders must not fall into the timed window).
async function context(shaderBase) {
  const adapter = await navigator.gpu?.requestAdapter();
  if (!adapter) throw new Error("no WebGPU adapter");
  const device = await adapter.requestDevice({ requiredLimits: {
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize, maxBufferSize: adapter.limits.maxBufferSize } });
  const limit = Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize);
  const matmul = device.createShaderModule({ code: await shader(shaderBase, "matmul_f32.wgsl") });
  const helpers = device.createShaderModule({ code: await shader(shaderBase, "challenge_gpu.wgsl") });
  const make = (module, entryPoint) => device.createComputePipelineAsync({ layout: "auto", compute: { module, entryPoint } });
  const [mm, gen, leaf, node] = await Promise.all([make(matmul, "main"), make(helpers, "gen"), make(helpers, "leaf"), make(helpers, "node")]);
  const pipelines = { matmul: mm, gen, leaf, node };
  const uniforms = new Map();
  const uniform = (value) => {
    if (!uniforms.has(value)) {
      const buf = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
      device.queue.writeBuffer(buf, 0, new Uint32Array([value, 0, 0, 0]));
      uniforms.set(value, buf);
    }
    return uniforms.get(value);
  };
  const bind = (pipeline, entries) => device.createBindGroup({ layout: pipelines[pipeline].getBindGroupLayout(0),
    entries: Object.entries(entries).map(([binding, resource]) => ({ binding: Number(binding), resource: resource.buffer ? resource : { buffer: resource } })) });
  const perOrder = new Map();
  const buffers = (n) => {
    const size = 4 * n * n;
    if (size > limit) throw new Error(`order ${n} needs ${size} B per matrix; this adapter binds ${limit} B`);
    if (!perOrder.has(n)) {
      const slots = Math.max(1, Math.min(Math.ceil(ROWS_IN_FLIGHT / n), Math.floor(C_BUFFER_BYTES / size), Math.floor(limit / size)));
      const batch = Math.floor(Math.max(1, Math.floor(LEAF_BUFFER_BYTES / (32 * n))) / slots) * slots || slots;
      const storage = (bytes) => device.createBuffer({ size: bytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
      const a = storage(size), b = storage(size), c = storage(size * slots);
      const step = device.createBuffer({ size: STEP_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
      const leaves = storage(32 * n * batch), half = storage(16 * n * batch);
      const groups = new Map([["gen", bind("gen", { 0: a, 1: b, 2: step })], ["leaf", bind("leaf", { 2: step, 3: c, 4: leaves })]]);
      for (let j = 0; j < slots; j++) groups.set(`matmul:${j}`, bind("matmul", { 0: a, 1: b, 2: { buffer: c, offset: j * size, size }, 3: uniform(n) }));
      const level = (source, dest, count) => {
        const key = `node:${source === leaves ? "leaves" : "half"}:${count}`;
        if (!groups.has(key)) groups.set(key, bind("node", { 5: source, 6: dest, 7: uniform(count) }));
        return groups.get(key);
      };
      perOrder.set(n, { n, slots, batch, a, b, c, step, leaves, half, groups, level });
    }
    return perOrder.get(n);
  };
  return { device, pipelines, buffers, destroy: () => device.destroy() };
}

export function gpuChallengeAnswerer(shaderBase = "/shaders/") {
  let ctx = null;
  let current = null; // { id, n, reps, done, seeds, productRoots: [[Uint8Array]], upper: [levels] }
  const ready = async () => (ctx ??= await context(shaderBase));

  function product(enc, bufs, slot) {
    dispatch(enc, ctx.pipelines.gen, bufs.groups.get("gen"), bufs.n / TILE, 2 * bufs.n);
    dispatch(enc, ctx.pipelines.matmul, bufs.groups.get(`matmul:${slot}`), bufs.n / TILE, bufs.n / TILE);
  }

  // Product t of instance i again: its rows (bytes) and its subtree's levels, checked against the commitment.
  async function recompute(i, t) {
    const { n } = current, bufs = ctx.buffers(n), state = productState(current.seeds[i], t);
    ctx.device.queue.writeBuffer(bufs.step, 0, new Uint32Array([Number(state & 0xffffffffn), Number(state >> 32n), n, 0]));
    const enc = ctx.device.createCommandEncoder();
    product(enc, bufs, 0);
    dispatch(enc, ctx.pipelines.leaf, bufs.groups.get("leaf"), ...grid(n / 64));
    ctx.device.queue.submit([enc.finish()]);
    const c = await readBuffer(ctx.device, bufs.c, 0, 4 * n * n);
    const leaves = await readBuffer(ctx.device, bufs.leaves, 0, 32 * n);
    const sub = await levels(digests(new Uint32Array(leaves.buffer), n));
    if (hex(sub[sub.length - 1][0]) !== hex(current.productRoots[i][t])) {
      throw new Error(`product ${t} of instance ${i} did not recompute to its committed root`);
    }
    return { c, sub };
  }

  return {
    // {type: "challenge", kind: "gpu"} -> {type: "commit"}: one Merkle root per seed over the products done. At a
    // roll call (stop_after_s) the work goes in rounds of every instance's products, each waited for, and a round
    // is begun only if it still fits before the stop at the last one's pace (the first always is): the GPU
    // commits what it finished by the deadline, as the SGEMM workers do (probe-worker.js).
    async commit(m) {
      const stopAt = typeof m.stop_after_s === "number" ? performance.now() + 1000 * m.stop_after_s : null;
      await ready();
      const n = m.n, reps = m.reps || 1, seeds = m.seeds.map((h) => BigInt("0x" + h));
      if (!(n >= 128 && n <= 2048 && (n & (n - 1)) === 0)) throw new Error(`not a GPU challenge order: ${n}`);
      const { device, pipelines } = ctx, bufs = ctx.buffers(n), total = seeds.length * reps;
      // rounds of `cap` products; at a roll call 1, 2, 4, ... up to cap first, so that a device far slower at this
      // moment than its claim (SwiftShader beside the SGEMM workers: 12x here) still finishes a round in time
      const cap = stopAt === null ? bufs.batch : Math.max(1, Math.min(bufs.batch, Math.ceil(reps / ROUNDS)));
      const schedule = [], first = new Array(reps);
      for (let t0 = 0, size = stopAt === null ? cap : 1; t0 < reps; size *= 2) {
        const count = Math.min(size, cap, reps - t0);
        schedule.push([t0, count]);
        for (let t = t0; t < t0 + count; t++) first[t] = t0;
        t0 += count;
      }
      const steps = new Uint32Array(total * 4);
      seeds.forEach((seed, i) => {
        for (let t = 0; t < reps; t++) {
          const state = productState(seed, t), k = 4 * (i * reps + t);
          steps.set([Number(state & 0xffffffffn), Number(state >> 32n), n, (t - first[t]) * n], k);
        }
      });
      const stepSrc = device.createBuffer({ size: steps.byteLength, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
      device.queue.writeBuffer(stepSrc, 0, steps);
      const roots = device.createBuffer({ size: 32 * total, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
      const height = Math.log2(n);
      let done = 0, perProductMs = 0; // products done per instance; the last round's pace
      for (const [t0, count] of schedule) {
        if (stopAt !== null && t0 > 0 && performance.now() + perProductMs * count > stopAt) break;
        const began = performance.now();
        for (let i = 0; i < seeds.length; i++) {
          const enc = device.createCommandEncoder();
          for (let g0 = t0; g0 < t0 + count; g0 += bufs.slots) {
            const group = Math.min(bufs.slots, t0 + count - g0);
            for (let t = g0; t < g0 + group; t++) {
              enc.copyBufferToBuffer(stepSrc, (i * reps + t) * STEP_BYTES, bufs.step, 0, STEP_BYTES);
              product(enc, bufs, t - g0);
            }
            enc.copyBufferToBuffer(stepSrc, (i * reps + g0) * STEP_BYTES, bufs.step, 0, STEP_BYTES);
            dispatch(enc, pipelines.leaf, bufs.groups.get("leaf"), ...grid(group * n / 64));
          }
          let source = bufs.leaves, dest = bufs.half, nodes = count * n;
          for (let h = 0; h < height; h++) {
            nodes /= 2;
            dispatch(enc, pipelines.node, bufs.level(source, dest, nodes), ...grid(Math.ceil(nodes / 64)));
            [source, dest] = [dest, source];
          }
          enc.copyBufferToBuffer(source, 0, roots, (i * reps + t0) * 32, count * 32);
          device.queue.submit([enc.finish()]);
        }
        if (stopAt !== null) await device.queue.onSubmittedWorkDone(); // the round is what the stop may count
        done = t0 + count;
        perProductMs = (performance.now() - began) / count;
      }
      const flat = digests(new Uint32Array((await readBuffer(device, roots, 0, 32 * total)).buffer), total);
      stepSrc.destroy();
      roots.destroy();
      const productRoots = seeds.map((_, i) => flat.slice(i * reps, i * reps + done));
      const upper = await Promise.all(productRoots.map((r) => upperLevels(r, n)));
      current = { id: m.id, n, reps, done, seeds, productRoots, upper };
      return { type: "commit", id: m.id, roots: upper.map((u) => hex(u[u.length - 1][0])), products: seeds.map(() => done) };
    },
    // {type: "open"} -> {type: "opening"}: the named rows with their proofs, in the order asked
    async open(m) {
      if (!current || current.id !== m.id) throw new Error("no commitment of that id");
      const { n } = current, done = new Map(), rows = [];
      for (const [instance, leaf] of m.rows) {
        if (!(instance >= 0 && instance < current.seeds.length && leaf >= 0 && leaf < n * current.done)) {
          throw new Error(`not an [instance, leaf] of this challenge: ${instance}, ${leaf}`);
        }
        const t = Math.floor(leaf / n), r = leaf % n, key = `${instance}:${t}`;
        if (!done.has(key)) done.set(key, await recompute(instance, t));
        const { c, sub } = done.get(key), upper = current.upper[instance];
        const proof = [...sub.slice(0, -1).map((level, k) => level[(r >> k) ^ 1]),
          ...upper.slice(0, -1).map((level, k) => level[(t >> k) ^ 1])];
        rows.push({ instance, row: leaf, values: base64(c.subarray(4 * n * r, 4 * n * (r + 1))), proof: proof.map(hex) });
      }
      return { type: "opening", id: m.id, rows };
    },
    // the device and pipelines before the first challenge: compiling shaders must not fall into its timed window
    warm: ready,
    stop() { ctx?.destroy(); ctx = null; current = null; },
  };
}
