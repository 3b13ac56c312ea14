// A CPU probe worker: plumbing around the capsule's reactor (capsule-reactor.wasm), which runs the
// capsule's own probe driver — the same C, arguments and ProbeReport as `wasmtime run capsule.wasm`.
// The worker only supplies the clock (unix time in microseconds, so all workers share one timeline)
// and collects the summary lines. Messages: {cmd: "init", module}, then {cmd: "run", args: [...]}.

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

onmessage = async (event) => {
  const m = event.data;
  try {
    if (m.cmd === "init") {
      const instance = await WebAssembly.instantiate(m.module, imports);
      k = instance.exports;
      k._initialize();
      postMessage({ ok: true });
    } else if (m.cmd === "run") postMessage({ ok: true, result: run(m.args) });
    else postMessage({ ok: false, error: `unknown command ${m.cmd}` });
  } catch (err) {
    postMessage({ ok: false, error: String((err && err.message) || err) });
  }
};
