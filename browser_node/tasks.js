// The join page's side of dispatched work (docs/jobs.md): tasks the relay places on this page run one at a time in
// a task worker (task-worker.js), each answered with a TaskReceipt signed by the page's key. The page offers its
// slot only once its user ticked "run tasks" (the page asks before the first task), and says what it runs.
import { b64url, hex, unhex } from "./keys.js";

const sha256Hex = async (bytes) => hex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
const b64 = (bytes) => { let s = ""; for (const b of bytes) s += String.fromCharCode(b); return btoa(s); };

export function taskRunner(nodeId, key, py, send, onEvent) {
  const blobs = new Map(); // sha256 -> bytes (this page's jobs reuse their module)
  const queue = [];
  let worker = null, current = null, busy = false, cancelled = new Set();
  const blob = async (sha) => {
    if (blobs.has(sha)) return blobs.get(sha);
    const response = await fetch(`/v1/blobs/${sha}`);
    if (!response.ok) throw new Error(`the relay has no blob ${sha.slice(0, 16)}...`);
    const bytes = new Uint8Array(await response.arrayBuffer());
    if ((await sha256Hex(bytes)) !== sha) throw new Error(`blob ${sha.slice(0, 16)}... does not hash to its name`);
    if (blobs.size > 8) blobs.clear();
    blobs.set(sha, bytes);
    return bytes;
  };
  // the task's seed, as a server node derives it (host_runner/wasi_task.py task_seed)
  const taskSeed = (m) => sha256Hex(new TextEncoder().encode(["ce-bench/task-random/v1", m.job, String(m.task), ...m.args].join("\u0000")));
  const runOne = (m, wasm, stdin, seed) => new Promise((resolve) => {
    worker = worker || new Worker(new URL("./task-worker.js", import.meta.url), { type: "module" });
    const timer = setTimeout(() => { // the wall clock: the worker is stopped where it is
      worker.terminate(); worker = null;
      resolve({ exitCode: null, error: `the task exceeded its wall-clock limit of ${m.limits.wall_ms} ms`,
                stdout: new Uint8Array(0), wallMs: m.limits.wall_ms });
    }, m.limits.wall_ms);
    current = { stop: () => { clearTimeout(timer); if (worker) worker.terminate(); worker = null; resolve(null); } };
    worker.onmessage = (event) => { clearTimeout(timer); resolve(event.data); };
    worker.postMessage({ wasm, args: m.args, stdin, outputBytes: m.limits.output_bytes, memoryMib: m.limits.memory_mib,
                         seed });
  });
  const receipt = async (m, result) => {
    const body = {
      v: 1, job_id: m.job, task: m.task, attempt: m.attempt, node_id: nodeId, module_sha256: m.module,
      exit_code: result.error ? null : result.exitCode,
      output_sha256: result.error ? null : await sha256Hex(result.stdout), output_bytes: result.stdout.byteLength,
      error: result.error ? String(result.error).slice(0, 1000) : null, fuel_used: null,
      wall_ms: Math.round(result.wallMs * 1000) / 1000, finished_at: Math.floor(Date.now() / 1000),
    };
    const sig = b64url(await key.sign(unhex(py.message("TaskReceipt", body))));
    return { ...body, sig };
  };
  const next = async () => {
    if (busy || !queue.length) return;
    busy = true;
    const m = queue.shift();
    try {
      if (cancelled.has(m.job)) return;
      onEvent({ type: "task_started", job: m.job, task: m.task });
      let result;
      try {
        result = await runOne(m, await blob(m.module), m.stdin ? await blob(m.stdin) : new Uint8Array(0),
                              await taskSeed(m));
      } catch (err) {
        result = { exitCode: null, error: err.message, stdout: new Uint8Array(0), wallMs: 0 };
      }
      current = null;
      if (!result) return; // stopped by the user: nothing is sent, the relay places it elsewhere
      send({ type: "task_result", receipt: await receipt(m, result), stdout: b64(result.stdout) });
      onEvent({ type: "task_done", job: m.job, task: m.task, error: result.error, exit_code: result.exitCode });
    } finally {
      busy = false;
      next();
    }
  };
  return {
    handle(m) {
      if (m.type === "task" && m.kind === "wasi") { queue.push(m); next(); }
      else if (m.type === "task_cancel") cancelled.add(m.job);
    },
    stop() { queue.length = 0; if (current) current.stop(); },
  };
}
