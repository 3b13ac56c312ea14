// A dispatched WASI task (docs/jobs.md) in its own Web Worker, through @bjorn3/browser_wasi_shim: argv, stdin,
// stdout kept up to output_bytes (one byte more fails the task and stops the module), an empty in-memory "."
// directory, no environment, no network. The page terminates this worker at the task's wall_ms. Memory: a
// module whose declared minimum exceeds memory_mib is refused; growth beyond it is not stopped here (a page
// cannot cap memory.grow), so the browser's own limit applies.
import { WASI, WASIProcExit, File, OpenFile, ConsoleStdout, PreopenDirectory } from "./vendor/browser_wasi_shim/index.js";

class OutputLimit extends Error {}

// The same deterministic environment as a server node (host_runner/wasi_task.py): random bytes from SplitMix64
// seeded by the task's seed, both clocks advancing 1 us per reading from fixed starts, so replicas of a task on
// a page and on a server compute the same bytes.
const MASK = (1n << 64n) - 1n;
const EPOCH_NS = 1700000000n * 1000000000n, STEP_NS = 1000n;
function deterministic(wasi, seedHex) {
  let state = 0n;
  for (let i = 7; i >= 0; i--) state = (state << 8n) | BigInt(parseInt(seedHex.slice(2 * i, 2 * i + 2), 16));
  let ticks = 0n;
  const next = () => {
    state = (state + 0x9E3779B97F4A7C15n) & MASK;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & MASK;
    z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & MASK;
    return z ^ (z >> 31n);
  };
  const view = () => new DataView(wasi.inst.exports.memory.buffer);
  wasi.wasiImport.random_get = (buf, len) => {
    const bytes = new Uint8Array(wasi.inst.exports.memory.buffer, buf, len);
    for (let i = 0; i < len; i += 8) {
      let word = next();
      for (let j = i; j < Math.min(i + 8, len); j++) { bytes[j] = Number(word & 0xFFn); word >>= 8n; }
    }
    return 0;
  };
  wasi.wasiImport.clock_time_get = (id, precision, ptr) => {
    ticks += 1n;
    view().setBigUint64(ptr, ticks * STEP_NS + (id === 0 ? EPOCH_NS : 0n), true);
    return 0;
  };
  wasi.wasiImport.clock_res_get = (id, ptr) => { view().setBigUint64(ptr, STEP_NS, true); return 0; };
}

self.onmessage = async (event) => {
  const { wasm, args, stdin, outputBytes, memoryMib, seed } = event.data;
  const started = performance.now();
  const out = new Uint8Array(outputBytes);
  let used = 0;
  let overflow = false;
  const stdout = new ConsoleStdout((data) => {
    const room = outputBytes - used;
    out.set(data.subarray(0, Math.max(0, Math.min(room, data.byteLength))), used);
    used += Math.max(0, Math.min(room, data.byteLength));
    if (data.byteLength > room) { overflow = true; throw new OutputLimit(); }
  });
  const stderr = new ConsoleStdout(() => {});
  const fds = [new OpenFile(new File(stdin)), stdout, stderr, new PreopenDirectory(".", [])];
  let exitCode = null, error = null;
  try {
    const module = await WebAssembly.compile(wasm);
    for (const imp of WebAssembly.Module.imports(module)) {
      if (imp.module !== "wasi_snapshot_preview1") throw new Error(`the module imports ${imp.module}.${imp.name}`);
    }
    const wasi = new WASI(["task.wasm", ...args], [], fds);
    deterministic(wasi, seed);
    const instance = await WebAssembly.instantiate(module, { wasi_snapshot_preview1: wasi.wasiImport });
    const pages = instance.exports.memory.buffer.byteLength / 65536;
    if (pages > memoryMib * 16) throw new Error(`memory minimum of ${pages} pages exceeds the task's ${memoryMib} MiB`);
    exitCode = wasi.start(instance);
  } catch (err) {
    if (overflow) error = `stdout exceeded the task's output_bytes (${outputBytes} bytes)`;
    else if (err instanceof WASIProcExit) exitCode = err.code;
    else if (err instanceof WebAssembly.RuntimeError) error = `the module trapped (${err.message})`;
    else error = `the module cannot run: ${err && err.message ? err.message : err}`;
  }
  if (overflow) { exitCode = null; error = `stdout exceeded the task's output_bytes (${outputBytes} bytes)`; }
  self.postMessage({ exitCode, error, stdout: out.slice(0, used), wallMs: performance.now() - started });
};
