// A dispatched WASI task (docs/jobs.md) in its own Web Worker, through @bjorn3/browser_wasi_shim: argv, stdin,
// stdout kept up to output_bytes (one byte more fails the task and stops the module), an empty in-memory "."
// directory, no environment, no network. The page terminates this worker at the task's wall_ms. Memory: a
// module whose declared minimum exceeds memory_mib is refused; growth beyond it is not stopped here (a page
// cannot cap memory.grow), so the browser's own limit applies.
import { WASI, WASIProcExit, File, OpenFile, ConsoleStdout, PreopenDirectory } from "./vendor/browser_wasi_shim/index.js";

class OutputLimit extends Error {}

self.onmessage = async (event) => {
  const { wasm, args, stdin, outputBytes, memoryMib } = event.data;
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
