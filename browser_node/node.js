// One node's page (/nodes/{id}): its trust (what the relay's challenges observed), its figures with unit,
// method and spread, its standing among the live nodes (percentile), its status, GPUs, measured links and a
// chart of its history. Everything read from the relay's public API.
import { esc, rollCallLine, si, utc } from "./format.js";

const $ = (id) => document.getElementById(id);
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
  if (typeof value !== "number" || known.length < 2) return null;  // a rank among one node says nothing
  return Math.round((100 * known.filter((v) => v <= value).length) / known.length);
}

function methodOf(ev) {
  if (!ev) return "—";
  if (ev.null_reason) return `not measured: ${esc(ev.null_reason)}`;
  const spread = ev.spread_instance0 || ev.run_stats || ev.write;
  const s = spread && typeof spread.spread_pct === "number" ? ` Spread ${spread.spread_pct.toFixed(1)}% (n = ${Number.isInteger(spread.n) ? spread.n : "?"}).` : "";  // evidence is the node's own text: never markup
  return `${esc(ev.method || "")}${s}`;
}

function showTrust(profile, trust) {
  const c = trust.challenges;
  $("trust").innerHTML = `<span class="trust ${trust.status}">${trust.status}</span> ${esc(trust.reason)}. ` +
    `${c.passed} challenge(s) passed, ${c.failed} failed` + (c.last_at ? `, the last at ${utc(c.last_at)}` : "") +
    `; score ${trust.score}. Observed: ${esc(trust.observed.method)}.`;
  const flops = si(1e9, "FLOP/s"), show = (v) => (v == null ? "—" : flops(v).join(" "));
  const tf = si(1e12, "FLOP/s"), showT = (v) => (v == null ? "—" : tf(v).join(" "));
  $("trust-figures").querySelector("tbody").innerHTML =
    `<tr><td data-label="figure">CPU</td><td data-label="claimed" class="num">${show(profile.cpu.gflops_fp32)}</td>` +
    `<td data-label="observed" class="num">${show(trust.observed.gflops_fp32)}</td>` +
    `<td data-label="counted" class="num">${show(trust.counted.cpu_gflops)}</td></tr>` +
    `<tr><td data-label="figure">reference model</td><td data-label="claimed" class="num">${profile.llm.tokens_per_sec ?? "—"} tokens/s</td>` +
    `<td data-label="observed">${trust.observed.tokens_per_sec != null ? `${trust.observed.tokens_per_sec.toFixed(1)} tokens/s` : esc(trust.observed.tokens_per_sec_reason || "—")}</td>` +
    `<td data-label="counted" class="num">${trust.counted.tokens_per_sec ? `${trust.counted.tokens_per_sec.toFixed(1)} tokens/s` : "—"}</td></tr>` +
    // GPUs: fp32 TFLOP/s proven at roll calls (the GPU challenge); their memory stays claimed, not proven
    (profile.gpus.length ? `<tr><td data-label="figure">GPU fp32 (${trust.counted.gpus || 0} proven)</td>` +
      `<td data-label="claimed" class="num">${showT(profile.gpus.reduce((a, g) => a + (g.fp32_tflops || 0), 0))}</td>` +
      `<td data-label="observed" class="num">${showT(trust.observed.gpu_tflops_fp32)}</td>` +
      `<td data-label="counted" class="num">${trust.counted.gpu_tflops ? showT(trust.counted.gpu_tflops) : "—"}</td></tr>` : "");
}

function startCountdown(trust) {
  const el = $("roll-call");
  const tick = () => { el.textContent = rollCallLine(trust, Date.now() / 1000); };
  tick();
  setInterval(tick, 1000);
}

// An SVG chart (no library): claimed GFLOP/s per profile as a step line, observed per challenge as dots.
function drawHistory(events) {
  const svg = $("history"), W = 720, H = 240, L = 48, B = 24;
  const claims = events.filter((e) => e.event === "profile" && typeof e.cpu_gflops === "number");
  const checks = events.filter((e) => e.event === "challenge");
  // only SGEMM answers observe GFLOP/s: a passed reference-model or GPU challenge is a mark on the time axis
  // with its own figure, never a dot at 0 GFLOP/s
  const ys = [...claims.map((e) => e.cpu_gflops), ...checks.filter((e) => typeof e.observed_gflops === "number").map((e) => e.observed_gflops)];
  if (!events.length || !ys.length) { svg.innerHTML = `<text x="${L}" y="${H / 2}">no history yet</text>`; return; }
  const t0 = Math.min(...events.map((e) => e.at)), t1 = Math.max(...events.map((e) => e.at), t0 + 1);
  const yMax = Math.max(...ys) * 1.15 || 1;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - 8), y = (v) => H - B - (v / yMax) * (H - B - 8);
  let path = "";
  claims.forEach((e, i) => { path += `${i ? "H" : "M"}${x(e.at).toFixed(1)} ${i ? "" : y(e.cpu_gflops).toFixed(1)}` + (i ? `V${y(e.cpu_gflops).toFixed(1)}` : ""); });
  if (claims.length) path += `H${x(t1).toFixed(1)}`;
  const other = (e) => typeof e.observed_tokens_per_sec === "number"
    ? `reference model passed: ${e.observed_tokens_per_sec.toFixed(1)} tokens/s observed`
    : typeof e.observed_tflops === "number" ? `GPU passed: ${e.observed_tflops.toFixed(4)} fp32 TFLOP/s observed`
      : `${esc(e.kind || "challenge")} passed`;
  const dots = checks.map((e) => !e.passed
    ? `<text x="${x(e.at).toFixed(1)}" y="${H - B - 2}" fill="#d1242f" text-anchor="middle">×<title>failed: ${esc(e.code)}</title></text>`
    : typeof e.observed_gflops === "number"
      ? `<circle cx="${x(e.at).toFixed(1)}" cy="${y(e.observed_gflops).toFixed(1)}" r="3" fill="#1a7f37"><title>observed ${e.observed_gflops.toFixed(1)} GFLOP/s</title></circle>`
      : `<path class="other-pass" d="M${x(e.at).toFixed(1)} ${H - B - 9}l4 7h-8z" fill="#8250df"><title>${other(e)}</title></path>`).join("");
  const ticks = [0, 0.5, 1].map((f) => `<text x="${L - 6}" y="${y(yMax * f / 1.15) + 4}" text-anchor="end" font-size="11">${(yMax * f / 1.15).toFixed(0)}</text>`).join("");
  svg.innerHTML = `<line x1="${L}" y1="${H - B}" x2="${W - 8}" y2="${H - B}" stroke="#8c959f"/>${ticks}` +
    `<text x="${L}" y="${H - 6}" font-size="11">${utc(t0)}</text>` +
    `<text x="${W - 8}" y="${H - 6}" font-size="11" text-anchor="end">${utc(t1)}</text>` +
    `<text x="4" y="12" font-size="11">GFLOP/s</text>` +
    `<path d="${path}" fill="none" stroke="#1f6feb" stroke-width="2"><title>claimed</title></path>${dots}`;
}

// Tasks of CE jobs this node ran (web/jobs/): how many, how many another node confirmed, and its pace.
function showDelivered(d) {
  if (!d || !d.tasks) { $("delivered").textContent = "no dispatched tasks run yet"; return; }
  const pace = d.pace && d.pace.ratio_to_peers !== null
    ? ` Pace against its peers on the same tasks (wall time x proven GFLOP/s): ${d.pace.ratio_to_peers}x over ` +
      `${d.pace.tasks} task(s)${d.pace.slow ? ", far below its proven speed: placed after the others" : ""}.` : "";
  $("delivered").textContent = `${d.tasks} task(s) run in ${d.wall_s.toFixed(1)} s: ${d.agreed} confirmed by ` +
    `another node, ${d.wrong} wrong, ${d.unchecked} not checked, ${d.errors} ended in an error.${pace}`;
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
  const { profile, status, trust } = await resp.json();
  if (profile.name) {  // textContent in a <bdi>: a name is text, and its direction stays its own
    $("node-name-text").textContent = profile.name;
    $("node-name").hidden = false;
    document.title = `ce-bench — ${profile.name}`;
  }
  showTrust(profile, trust);
  startCountdown(trust);
  $("history-link").href = `/v1/nodes/${encodeURIComponent(nodeId)}/history`;
  fetch(`/v1/nodes/${encodeURIComponent(nodeId)}/history`).then((r) => r.json())
    .then((h) => { drawHistory(h.events || []); showDelivered(h.delivered); }).catch(() => {});
  const atlas = await fetch("/atlas?limit=1000").then((r) => r.json()).catch(() => ({ nodes: [] }));
  const seen = status.last_seen ? utc(status.last_seen) : "never";
  $("status").textContent = `${status.online ? "live" : "offline"} · ${profile.runtime.kind} · ${profile.cpu.cores} measured core(s) · ` +
    `last seen ${seen}` + (status.rtt_ms != null ? ` · RTT to this relay ${status.rtt_ms.toFixed(1)} ms` : "") +
    ` · measured ${utc(profile.measured_at)} · signature checked by the relay`;
  $("status").className = status.online ? "status ok" : "status info";
  $("figures").querySelector("tbody").innerHTML = FIGURES.map(([label, get, show, evOf]) => {
    const v = get(profile);
    const [num, unit] = v == null ? ["null", ""] : show(v);
    const pct = percentile(v, atlas.nodes.map(get));
    const bar = pct == null ? (v == null ? "—" : "no other live node to compare with") : `<span class="pct" role="img" aria-label="${pct}th percentile"><span style="width:${pct}%"></span></span> ${pct}th`;
    return `<tr><td data-label="figure">${label}</td><td data-label="value" class="num">${num} ${unit}</td>` +
      `<td data-label="among live nodes">${bar}</td><td data-label="method" class="method">${methodOf(evOf(profile.evidence || {}))}</td></tr>`;
  }).join("");
  const tflops = si(1e12, "FLOP/s");
  $("gpus").querySelector("tbody").innerHTML = profile.gpus.length ? profile.gpus.map((g) =>
    `<tr><td data-label="model">${esc(g.model)}</td><td data-label="backend">${g.backend}</td>` +
    `<td data-label="fp32" class="num">${g.fp32_tflops == null ? "null" : tflops(g.fp32_tflops).join(" ")}</td>` +
    `<td data-label="fp16" class="num">${g.fp16_tflops == null ? "null" : tflops(g.fp16_tflops).join(" ")}</td>` +
    `<td data-label="VRAM (claimed, not proven)" class="num">${g.vram_mb == null ? "null" : si(2 ** 20, "B", true)(g.vram_mb).join(" ")}</td></tr>`).join("")
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
