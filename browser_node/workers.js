// Web Worker plumbing shared by the join page's measurement and the relay's challenges.

// One request to a worker: resolves with its result, rejects with its error. Requests to one worker go in turn
// (a worker answers one at a time, and each request sets the handler its answer goes to: two at once would
// swap their answers).
export function call(worker, message) {
  const turn = (worker.ceTurn || Promise.resolve()).then(() => new Promise((resolve, reject) => {
    worker.onmessage = (e) => (e.data.ok ? resolve(e.data.result) : reject(new Error(e.data.error)));
    worker.onerror = (e) => reject(new Error(e.message || "worker failed"));
    worker.postMessage(message);
  }));
  worker.ceTurn = turn.catch(() => null);
  return turn;
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
