// Web Worker plumbing shared by the join page's measurement and the relay's challenges.

// One request to a worker: resolves with its result, rejects with its error.
export function call(worker, message) {
  return new Promise((resolve, reject) => {
    worker.onmessage = (e) => (e.data.ok ? resolve(e.data.result) : reject(new Error(e.data.error)));
    worker.onerror = (e) => reject(new Error(e.message || "worker failed"));
    worker.postMessage(message);
  });
}

// Probe workers (probe-worker.js) with the capsule's reactor instantiated, created as needed and kept:
// get(count) -> the first count of them; terminate() ends them all.
export function probeWorkerPool(module) {
  let workers = [];
  return {
    async get(count) {
      while (workers.length < count) {
        const w = new Worker("/probe-worker.js");
        workers.push(w);
        await call(w, { cmd: "init", module });
      }
      return workers.slice(0, count);
    },
    terminate() { workers.forEach((w) => w.terminate()); workers = []; },
  };
}
