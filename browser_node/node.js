// One node's page (/nodes/{id}): its figures with unit, method and spread, its standing among the live
// nodes (percentile), its status, GPUs and measured links. Everything read from the relay's public API.
import { si } from "./format.js";

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const nodeId = decodeURIComponent(location.pathname.split("/").pop());

// [label, read the figure from a profile, how to show it, where its evidence is]
const FIGURES = [
  ["CPU", (p) => p.cpu.gflops_fp32, si(1e9, "FLOP/s"), (e) => e.cpu?.gflops_fp32],
  ["memory bandwidth", (p) => p.cpu.mem_bw_gbps, si(1e9, "B/s"), (e) => e.cpu?.mem_bw_gbps],
  ["reference model", (p) => p.llm.tokens_per_sec, si(1, "tokens/s"), (e) => e.llm],
  ["storage write", (p) => p.storage.write_mbps, si(1e6, "B/s"), (e) => e.storage],
  ["storage read", (p) => p.storage.read_mbps, si(1e6, "B/s"), (e) => e.storage],
];

function percentile(value, all) {
  const known = all.filter((v) => typeof v === "number");
  if (typeof value !== "number" || !known.length) return null;
  return Math.round((100 * known.filter((v) => v <= value).length) / known.length);
}

function methodOf(ev) {
  if (!ev) return "—";
  if (ev.null_reason) return `not measured: ${esc(ev.null_reason)}`;
  const spread = ev.spread_instance0 || ev.run_stats || ev.write;
  const s = spread && typeof spread.spread_pct === "number" ? ` Spread ${spread.spread_pct.toFixed(1)}% (n = ${spread.n}).` : "";
  return `${esc(ev.method || "")}${s}`;
}

async function load() {
  $("node-id").textContent = nodeId;
  const resp = await fetch(`/v1/nodes/${encodeURIComponent(nodeId)}`);
  if (!resp.ok) {
    const problem = await resp.json().catch(() => ({}));
    $("status").textContent = `no such node here: ${problem.title || resp.status}`;
    $("status").className = "status warn";
    return;
  }
  const { profile, status } = await resp.json();
  const atlas = await fetch("/atlas?limit=1000").then((r) => r.json()).catch(() => ({ nodes: [] }));
  const seen = status.last_seen ? new Date(status.last_seen * 1000).toLocaleString() : "never";
  $("status").textContent = `${status.online ? "live" : "offline"} · ${profile.runtime.kind} · ${profile.cpu.cores} measured core(s) · ` +
    `last seen ${seen}` + (status.rtt_ms != null ? ` · RTT to this relay ${status.rtt_ms.toFixed(1)} ms` : "") +
    ` · measured ${new Date(profile.measured_at * 1000).toLocaleString()} · signature checked by the relay`;
  $("status").className = status.online ? "status ok" : "status info";
  $("figures").querySelector("tbody").innerHTML = FIGURES.map(([label, get, show, evOf]) => {
    const v = get(profile);
    const [num, unit] = v == null ? ["null", ""] : show(v);
    const pct = percentile(v, atlas.nodes.map(get));
    const bar = pct == null ? "—" : `<span class="pct" role="img" aria-label="${pct}th percentile"><span style="width:${pct}%"></span></span> ${pct}th`;
    return `<tr><td data-label="figure">${label}</td><td data-label="value" class="num">${num} ${unit}</td>` +
      `<td data-label="among live nodes">${bar}</td><td data-label="method" class="method">${methodOf(evOf(profile.evidence || {}))}</td></tr>`;
  }).join("");
  const tflops = si(1e12, "FLOP/s");
  $("gpus").querySelector("tbody").innerHTML = profile.gpus.length ? profile.gpus.map((g) =>
    `<tr><td data-label="model">${esc(g.model)}</td><td data-label="backend">${g.backend}</td>` +
    `<td data-label="fp32" class="num">${g.fp32_tflops == null ? "null" : tflops(g.fp32_tflops).join(" ")}</td>` +
    `<td data-label="fp16" class="num">${g.fp16_tflops == null ? "null" : tflops(g.fp16_tflops).join(" ")}</td>` +
    `<td data-label="VRAM" class="num">${g.vram_mb == null ? "null" : si(2 ** 20, "B", true)(g.vram_mb).join(" ")}</td></tr>`).join("")
    : `<tr><td data-label="GPUs" colspan="5">none measured</td></tr>`;
  const graph = await fetch("/netgraph").then((r) => r.json()).catch(() => ({ edges: [], unconfirmed_edges: [] }));
  const unconfirmed = new Set((graph.unconfirmed_edges || []).map(([a, b]) => `${a} ${b}`));
  const mine = graph.edges.filter((e) => e.a === nodeId || e.b === nodeId);
  $("links").querySelector("tbody").innerHTML = mine.length ? mine.map((e) => {
    const other = e.a === nodeId ? e.b : e.a;
    const key = [e.a, e.b].sort().join(" ");
    const name = other === graph.relay ? "this relay" : `<a href="/nodes/${other}"><code>${other.slice(0, 14)}…</code></a>`;
    return `<tr><td data-label="to">${name}</td><td data-label="RTT" class="num">${e.rtt_ms} ms</td>` +
      `<td data-label="jitter" class="num">${e.jitter_ms} ms</td>` +
      `<td data-label="bandwidth" class="num">${e.bw_mbps == null ? "—" : si(1e6, "bit/s")(e.bw_mbps).join(" ")}</td>` +
      `<td data-label="confirmed">${unconfirmed.has(key) ? "no (not measured by this relay)" : "yes"}</td></tr>`;
  }).join("") : `<tr><td data-label="links" colspan="5">none yet</td></tr>`;
}

load().catch((err) => { $("status").textContent = `the relay did not answer (${err.message})`; $("status").className = "status warn"; });
