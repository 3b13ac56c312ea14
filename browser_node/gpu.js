// WebGPU probe: the same WGSL shaders as servers (capsule/shaders), fp32 matmul and fp16 matmul where the
// adapter has shader-f16, sized from the adapter limits, checked against float64 in JS before any figure
// is reported. VRAM is null: WebGPU exposes no memory size.

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

async function matmul(device, code, f16, limitBytes, budgetMs) {
  const module = device.createShaderModule({ code });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
  const elem = f16 ? 2 : 4;
  let n = 128, chosen = null;
  for (;;) {
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
    const run = async (repeats) => {
      const enc = device.createCommandEncoder();
      for (let r = 0; r < repeats; r++) { const pass = enc.beginComputePass(); pass.setPipeline(pipeline); pass.setBindGroup(0, group); pass.dispatchWorkgroups(n / 64, n / 64); pass.end(); }
      const t0 = performance.now();
      device.queue.submit([enc.finish()]);
      await device.queue.onSubmittedWorkDone();
      return performance.now() - t0;
    };
    const dt = await run(1);
    chosen = { n, ha, hb, bufC, run, dt };
    if (dt > 60 || n * 2 > 2048 || (2 * n) ** 2 * elem > limitBytes) break;
    n *= 2;
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
  let worst = 0;
  for (let e = 0; e < 64; e++) {
    const i = Math.floor(Math.random() * n), j = Math.floor(Math.random() * n);
    let ref = 0;
    for (let p = 0; p < n; p++) ref += val(ha, i * n + p) * val(hb, p * n + j);
    worst = Math.max(worst, Math.abs(c[i * n + j] - ref) / ref);
  }
  const tolerance = f16 ? 0.05 : 1e-4;
  if (!(worst < tolerance)) return { tflops: null, n, verified: false, max_rel_error: worst, null_reason: `product failed its check (error ${worst})` };
  const repeats = Math.max(1, Math.min(20, Math.floor(50 / Math.max(dt, 0.1))));
  await run(repeats);
  const samples = [];
  const start = performance.now();
  while (samples.length < 3 || (performance.now() - start < budgetMs && samples.length < 15)) {
    samples.push((2 * n ** 3 * repeats) / ((await run(repeats)) * 1e9));
  }
  samples.sort((x, y) => x - y);
  return { tflops: samples[samples.length >> 1], n, samples, verified: true, max_rel_error: worst,
           check: `64 sampled entries vs float64, relative error < ${tolerance}`, dispatches_per_sample: repeats };
}

export async function probeGpu(budgetMs = 1500) {
  if (!navigator.gpu) return { gpus: [], notes: ["no WebGPU in this browser (navigator.gpu is missing)"] };
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return { gpus: [], notes: ["WebGPU is present but offered no adapter"] };
  const hasF16 = adapter.features.has("shader-f16");
  const device = await adapter.requestDevice({ requiredFeatures: hasF16 ? ["shader-f16"] : [] });
  if (device.limits.maxComputeInvocationsPerWorkgroup < 256) return { gpus: [], notes: ["the adapter allows fewer than 256 invocations per workgroup"] };
  const info = adapter.info || {};
  const model = info.description || [info.vendor, info.architecture, info.device].filter(Boolean).join(" ") || "WebGPU adapter";
  const limit = device.limits.maxStorageBufferBindingSize;
  const f32 = await matmul(device, await shader("matmul_f32.wgsl"), false, limit, budgetMs / 2);
  const f16 = hasF16 ? await matmul(device, await shader("matmul_f16.wgsl"), true, limit, budgetMs / 2)
                     : { tflops: null, null_reason: "the adapter has no shader-f16 feature" };
  device.destroy();
  return {
    gpus: [{ model, backend: "webgpu", vram_mb: null, fp16_tflops: f16.tflops, fp32_tflops: f32.tflops }],
    evidence: [{ adapter: { vendor: info.vendor || null, architecture: info.architecture || null, description: info.description || null },
                 fp32_matmul: f32, fp16_matmul: f16, vram_source: null,
                 vram_null_reason: "WebGPU exposes no memory size", max_storage_buffer_binding_size: limit,
                 method: "WGSL shaders from capsule/shaders in WebGPU (the same files servers run through wgpu)" }],
    notes: [],
  };
}
