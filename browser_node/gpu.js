// WebGPU probe: the same WGSL shaders as servers (capsule/shaders), fp32 matmul and fp16 matmul where the
// adapter has shader-f16, and copy bandwidth; sized from the adapter limits and checked against float64 in
// JS before any figure is reported, by the same policy as servers (capsule/gpu_policy.py, via Pyodide).
// VRAM is null: WebGPU exposes no memory size.

async function shader(name) {
  const resp = await fetch(`/shaders/${name}`);
  if (!resp.ok) throw new Error(`cannot load /shaders/${name} (${resp.status})`);
  return resp.text();
}

function toF16Bits(x) {
  // float32 -> IEEE half (round to nearest even); inputs here are in [0, 1)
  const f = new Float32Array([x]), u = new Uint32Array(f.buffer)[0];
  const sign = (u >>> 16) & 0x8000, exp = ((u >>> 23) & 0xff) - 127 + 15, mant = u & 0x7fffff;
  if (exp <= 0) return sign;
  let h = sign | (exp << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h++;
  return h;
}

function fromF16Bits(h) {
  const exp = (h >>> 10) & 0x1f, mant = h & 0x3ff, sign = h & 0x8000 ? -1 : 1;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

// Sizes, checked entries, repeats and samples come from capsule/gpu_policy.py through Pyodide (`py.gpu`):
// the policy servers run through wgpu (host_runner/gpu.py).
async function matmul(device, code, f16, limitBytes, budgetMs, py, seed) {
  const module = device.createShaderModule({ code });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
  const elem = f16 ? 2 : 4;
  const k = py.gpu("constants");
  let n = k.N_START, chosen = null;
  while (n !== null) {
    const a = new Float64Array(n * n).map(() => Math.random()), b = new Float64Array(n * n).map(() => Math.random());
    const pack = (m) => (f16 ? Uint16Array.from(m, toF16Bits) : Float32Array.from(m));
    const ha = pack(a), hb = pack(b);
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    const mk = (data) => { const buf = device.createBuffer({ size: data.byteLength, usage }); device.queue.writeBuffer(buf, 0, data); return buf; };
    const bufA = mk(ha), bufB = mk(hb);
    const bufC = device.createBuffer({ size: n * n * elem, usage });
    const params = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(params, 0, new Uint32Array([n, 0, 0, 0]));
    const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [bufA, bufB, bufC, params].map((buffer, binding) => ({ binding, resource: { buffer } })) });
    const tiles = n / k.WORKGROUP;
    const run = async (repeats) => {
      const enc = device.createCommandEncoder();
      for (let r = 0; r < repeats; r++) { const pass = enc.beginComputePass(); pass.setPipeline(pipeline); pass.setBindGroup(0, group); pass.dispatchWorkgroups(tiles, tiles); pass.end(); }
      const t0 = performance.now();
      device.queue.submit([enc.finish()]);
      await device.queue.onSubmittedWorkDone();
      return performance.now() - t0;
    };
    const dt = await run(1);
    chosen = { n, ha, hb, bufC, run, dt };
    n = py.gpu("next_n", { n, step_ms: dt, elem_bytes: elem, limit_bytes: limitBytes });
  }
  const { ha, hb, bufC, run, dt } = chosen;
  n = chosen.n;
  const read = device.createBuffer({ size: n * n * elem, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(bufC, 0, read, 0, n * n * elem);
  device.queue.submit([enc.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const raw = read.getMappedRange();
  const c = f16 ? Array.from(new Uint16Array(raw), fromF16Bits) : Array.from(new Float32Array(raw));
  read.unmap();
  const val = (h, i) => (f16 ? fromF16Bits(h[i]) : h[i]);
  const plan = py.gpu("check_plan", { seed, n, precision: f16 ? "f16" : "f32" });
  let worst = 0;
  for (const [i, j] of plan.entries) {
    let ref = 0;
    for (let p = 0; p < n; p++) ref += val(ha, i * n + p) * val(hb, p * n + j);
    worst = Math.max(worst, Math.abs(c[i * n + j] - ref) / ref);
  }
  if (!(worst < plan.tolerance)) return { tflops: null, n, verified: false, max_rel_error: worst, check: plan.describe, null_reason: `the product failed its float64 check (error ${worst})` };
  const repeats = py.gpu("repeats", { step_ms: dt });
  for (let w = 0; w < 2; w++) await run(repeats); // warm-up, as on servers
  const samples = [];
  const start = performance.now();
  while (samples.length < k.MIN_SAMPLES || (performance.now() - start < budgetMs && samples.length < k.MAX_SAMPLES)) {
    samples.push((2 * n ** 3 * repeats) / ((await run(repeats)) * 1e9));
  }
  const sorted = [...samples].sort((x, y) => x - y);
  const median = sorted[sorted.length >> 1];
  return { tflops: median, n, samples, verified: true, max_rel_error: worst, check: plan.describe,
           dispatches_per_sample: repeats, spread_pct: (100 * (sorted[sorted.length - 1] - sorted[0])) / median };
}

// Device memory bandwidth with copy_bandwidth.wgsl, sized and repeated as on servers; checked in full.
async function bandwidth(device, code, limitBytes, py) {
  const k = py.gpu("constants");
  const size = py.gpu("copy_bytes", { limit_bytes: limitBytes });
  const count = size / 16;
  const module = device.createShaderModule({ code });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
  const srcData = new Float32Array(count * 4).map(() => Math.random() * 2 - 1);
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const src = device.createBuffer({ size, usage }), dst = device.createBuffer({ size, usage });
  device.queue.writeBuffer(src, 0, srcData);
  const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [src, dst].map((buffer, binding) => ({ binding, resource: { buffer } })) });
  const groups = Math.ceil(count / 256), grid = [Math.min(groups, 32768), Math.ceil(groups / 32768)];
  const run = async (repeats) => {
    const enc = device.createCommandEncoder();
    for (let r = 0; r < repeats; r++) { const pass = enc.beginComputePass(); pass.setPipeline(pipeline); pass.setBindGroup(0, group); pass.dispatchWorkgroups(...grid); pass.end(); }
    const t0 = performance.now();
    device.queue.submit([enc.finish()]);
    await device.queue.onSubmittedWorkDone();
    return (performance.now() - t0) / 1000;
  };
  await run(1);
  const read = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(dst, 0, read, 0, size);
  device.queue.submit([enc.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const back = new Float32Array(read.getMappedRange());
  let ok = back.length === srcData.length;
  for (let i = 0; ok && i < back.length; i++) ok = back[i] === srcData[i];
  read.unmap();
  const samples = [];
  for (let s = 0; s < k.COPY_SAMPLES; s++) samples.push((32 * count * k.COPY_DISPATCHES) / (await run(k.COPY_DISPATCHES)) / 1e9);
  const sorted = [...samples].sort((x, y) => x - y);
  return { gbps: ok ? sorted[sorted.length >> 1] : null, samples, bytes: size, verified: ok,
           check: "the whole destination equals the source after one dispatch",
           method: `dst = src over vec4<f32>, 32 B per element (read + write), ${k.COPY_DISPATCHES} dispatches per sample` };
}

export async function probeGpu(py, seed, budgetMs = 1500) {
  if (!navigator.gpu) return { gpus: [], notes: ["no WebGPU in this browser (navigator.gpu is missing)"] };
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return { gpus: [], notes: ["WebGPU is present but offered no adapter"] };
  const hasF16 = adapter.features.has("shader-f16");
  const device = await adapter.requestDevice({ requiredFeatures: hasF16 ? ["shader-f16"] : [] });
  if (device.limits.maxComputeInvocationsPerWorkgroup < 256) return { gpus: [], notes: ["the adapter allows fewer than 256 invocations per workgroup"] };
  const info = adapter.info || {};
  const model = info.description || [info.vendor, info.architecture, info.device].filter(Boolean).join(" ") || "WebGPU adapter";
  const limit = device.limits.maxStorageBufferBindingSize;
  const f32 = await matmul(device, await shader("matmul_f32.wgsl"), false, limit, budgetMs / 2, py, seed);
  const f16 = hasF16 ? await matmul(device, await shader("matmul_f16.wgsl"), true, limit, budgetMs / 2, py, seed)
                     : { tflops: null, null_reason: "the adapter has no shader-f16 feature" };
  const copy = await bandwidth(device, await shader("copy_bandwidth.wgsl"), limit, py);
  device.destroy();
  return {
    gpus: [{ model, backend: "webgpu", vram_mb: null, fp16_tflops: f16.tflops, fp32_tflops: f32.tflops }],
    evidence: [{ adapter: { vendor: info.vendor || null, architecture: info.architecture || null, description: info.description || null },
                 fp32_matmul: f32, fp16_matmul: f16, copy_bandwidth: copy, vram_source: null,
                 vram_null_reason: "WebGPU exposes no memory size", max_storage_buffer_binding_size: limit,
                 method: "WGSL shaders from capsule/shaders in WebGPU, sized and checked by capsule/gpu_policy.py (as on servers)" }],
    notes: [],
  };
}
