// The network page: FabricStats of the atlas as gauges and the live node list, refreshed every 2 s
// (the atlas answers 304 while nothing changed).
const $ = (id) => document.getElementById(id);
let etag = null;

const GAUGES = [
  ["nodes", "live nodes", 0, ""], ["cpu_cores", "CPU cores", 0, ""], ["cpu_gflops", "CPU", 1, "GFLOP/s"],
  ["tokens_per_sec", "reference model", 1, "tokens/s"], ["gpus", "GPUs", 0, ""], ["gpu_tflops", "GPU fp16", 3, "TFLOP/s"],
  ["gpu_vram_mb", "GPU memory", 0, "MiB"], ["storage_free_gb", "free storage", 0, "GB"], ["perf_score", "perf score", 2, ""],
];

function gauge(label, value, digits, unit) {
  const shown = value === null || value === undefined ? "—" : Number(value).toLocaleString(undefined, { maximumFractionDigits: digits });
  return `<div class="gauge"><div class="value">${shown}</div><div class="unit">${unit}</div><div class="label">${label}</div></div>`;
}

async function refresh() {
  try {
    const stats = await (await fetch("/stats", { cache: "no-store" })).json();
    const mesh = stats.mesh || {};
    $("gauges").innerHTML = GAUGES.map(([k, label, d, unit]) => gauge(label, stats[k], d, unit)).join("") +
      gauge("median RTT", mesh.median_rtt_ms, 1, "ms");
    const resp = await fetch("/atlas?limit=1000", { headers: etag ? { "if-none-match": etag } : {} });
    if (resp.status === 200) {
      etag = resp.headers.get("etag");
      const atlas = await resp.json();
      $("nodes").querySelector("tbody").innerHTML = atlas.nodes.map((n) => {
        const f = (v, d) => (v === null || v === undefined ? "null" : Number(v).toFixed(d));
        const gpu = n.gpus.length ? n.gpus.map((g) => g.model).join(", ") : "—";
        return `<tr><td><code>${n.node_id.slice(0, 14)}…</code></td><td>${n.runtime.kind}</td><td>${n.cpu.cores}</td>` +
          `<td class="num">${f(n.cpu.gflops_fp32, 1)}</td><td class="num">${f(n.cpu.mem_bw_gbps, 2)}</td>` +
          `<td class="num">${f(n.llm.tokens_per_sec, 1)}</td><td>${gpu}</td></tr>`;
      }).join("");
    }
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    $("updated").className = "status ok";
  } catch (err) {
    $("updated").textContent = `the relay did not answer (${err.message}); retrying`;
    $("updated").className = "status warn";
  }
}

refresh();
setInterval(refresh, 2000);
