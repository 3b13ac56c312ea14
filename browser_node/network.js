import { count, esc, si, utcTime } from "./format.js";

// The network page: FabricStats of the atlas as gauges and the live node list, refreshed every 2 s
// (the atlas answers 304 while nothing changed).
const $ = (id) => document.getElementById(id);
let etag = null;

// [stats key, label, how to show it]: a count, or an SI quantity given as (its scale, base unit)
const GAUGES = [
  ["nodes", "live nodes", count], ["cpu_cores", "CPU cores", count], ["cpu_gflops", "CPU", si(1e9, "FLOP/s")],
  ["tokens_per_sec", "reference model", si(1, "tokens/s")], ["gpus", "GPUs", count],
  ["gpu_tflops", "GPU fp16", si(1e12, "FLOP/s")], ["gpu_vram_mb", "GPU memory", si(2 ** 20, "B", true)],
  ["storage_free_gb", "free storage", si(1e9, "B")], ["perf_score", "perf score", (v) => [v.toFixed(2), ""]],
];
// No challenge proves these (cores: throughput is proven, not the cores behind it): they are shown under "claimed, not proven" only, never beside a verified figure.
// GPUs and their TFLOP/s are proven at roll calls (GPU challenges); the proven TFLOP/s are fp32 (the challenge's
// WGSL matmul) where the claimed gauge sums the profiles' fp16 figures.
const UNPROVEN = new Set(["cpu_cores", "gpu_vram_mb", "storage_free_gb"]);
const PROVEN_LABEL = { gpu_tflops: "GPU fp32" };
function gauge(label, value, show) {
  const [shown, unit] = value === null || value === undefined ? ["—", ""] : show(Number(value));
  return `<div class="gauge" role="group" aria-label="${label}"><div class="value">${shown}</div>` +
    `<div class="unit">${unit}</div><div class="label">${label}</div></div>`;
}

// The live-node table: sorted by the column last clicked (again: the other way), filtered by the text typed (any
// column), and exported as CSV exactly as shown (claimed figures, unknown as an empty cell).
const COLUMNS = ["node", "name", "trust", "kind", "cores", "gflops", "gbs", "tps", "gpu"];
let rows = [], sortKey = "gflops", sortDown = true;

function shownRows() {
  const text = ($("node-filter").value || "").trim().toLowerCase();
  const kept = rows.filter((r) => !text || COLUMNS.some((c) => String(r[c] ?? "").toLowerCase().includes(text)));
  const key = (r) => r[sortKey] ?? (typeof rows.find((x) => x[sortKey] !== null)?.[sortKey] === "number" ? -Infinity : "");
  return kept.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0) * (sortDown ? -1 : 1));
}

function renderNodes() {
  const f = (v, d) => (v === null || v === undefined ? "unknown" : Number(v).toFixed(d));
  const shown = shownRows();
  // data-label: the column name, shown beside each value when the table folds into cards on phones
  $("nodes").querySelector("tbody").innerHTML = shown.map((r) =>
    `<tr><td data-label="node"><a href="/nodes/${r.node}"><code title="${r.node}">${r.node.slice(0, 14)}…</code></a></td>` +
    `<td data-label="name">${r.name ? `<bdi>${esc(r.name)}</bdi>` : "—"}</td>` +
    `<td data-label="trust"><span class="trust ${r.trust}">${r.trust}</span></td><td data-label="kind">${r.kind}</td><td data-label="cores">${r.cores}</td>` +
    `<td data-label="GFLOP/s" class="num">${f(r.gflops, 1)}</td>` +
    `<td data-label="GB/s (claimed, not proven)" class="num claimed">${f(r.gbs, 2)}</td>` +
    `<td data-label="tokens/s" class="num">${f(r.tps, 1)}</td>` +
    `<td data-label="GPU (claimed, not proven)" class="claimed">${r.gpu ? esc(r.gpu) : "—"}</td></tr>`).join("");
  // a node's text (its name, a GPU model) that a spreadsheet would run as a formula is kept as text (a leading ')
  const cell = (v) => { const s = String(v ?? ""); return typeof v === "string" && /^[=+\-@\t\r]/.test(s) ? `'${s}` : s; };
  const csv = [COLUMNS.join(","), ...shown.map((r) => COLUMNS.map((c) => `"${cell(r[c]).replace(/"/g, '""')}"`).join(","))];
  $("nodes-csv").href = "data:text/csv;charset=utf-8," + encodeURIComponent(csv.join("\n") + "\n");
  $("nodes-count").textContent = `${shown.length} of ${rows.length} nodes`;
}

function wireNodeTable() {
  $("nodes").querySelectorAll("thead th").forEach((th, i) => {
    th.style.cursor = "pointer";
    th.title = "sort by this column";
    th.addEventListener("click", () => {
      sortDown = sortKey === COLUMNS[i] ? !sortDown : true;
      sortKey = COLUMNS[i];
      $("node-sort").value = sortKey;
      $("node-ascending").checked = !sortDown;
      renderNodes();
    });
  });
  // the headers fold away on a phone (the table becomes cards): the same sort from the controls above it
  $("node-sort").addEventListener("change", () => { sortKey = $("node-sort").value; renderNodes(); });
  $("node-ascending").addEventListener("change", () => { sortDown = !$("node-ascending").checked; renderNodes(); });
  $("node-filter").addEventListener("input", renderNodes);
}

// The scoreboard over time as an SVG chart (no library): verified and claimed CPU GFLOP/s.
async function drawTotals() {
  const { points } = await (await fetch("/stats/history", { cache: "no-store" })).json();
  const svg = $("totals"), W = 720, H = 200, L = 48, B = 22;
  if (!points.length) { svg.innerHTML = `<text x="${L}" y="${H / 2}">no samples yet</text>`; return; }
  const t0 = points[0].at, t1 = Math.max(points[points.length - 1].at, t0 + 1);
  const yMax = Math.max(1, ...points.map((p) => Math.max(p.claimed.cpu_gflops, p.verified.cpu_gflops))) * 1.15;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - 8), y = (v) => H - B - (v / yMax) * (H - B - 8);
  const line = (get, colour, label) => points.length === 1
    ? `<circle cx="${x(points[0].at)}" cy="${y(get(points[0]))}" r="3" fill="${colour}"><title>${label}</title></circle>`
    : `<polyline fill="none" stroke="${colour}" stroke-width="2" points="${points.map((p) => `${x(p.at).toFixed(1)},${y(get(p)).toFixed(1)}`).join(" ")}"><title>${label}</title></polyline>`;
  svg.innerHTML = `<line x1="${L}" y1="${H - B}" x2="${W - 8}" y2="${H - B}" stroke="#8c959f"/>` +
    `<text x="${L - 6}" y="${y(yMax / 1.15) + 4}" text-anchor="end" font-size="11">${(yMax / 1.15).toFixed(0)}</text>` +
    `<text x="${L - 6}" y="${H - B + 4}" text-anchor="end" font-size="11">0</text>` +
    `<text x="4" y="12" font-size="11">GFLOP/s</text>` +
    `<text x="${L}" y="${H - 5}" font-size="11">${utcTime(t0)}</text>` +
    `<text x="${W - 8}" y="${H - 5}" font-size="11" text-anchor="end">${utcTime(t1)}</text>` +
    line((p) => p.claimed.cpu_gflops, "#1f6feb", "claimed") + line((p) => p.verified.cpu_gflops, "#1a7f37", "verified");
  window.ceTotals = points.length; // tests read it
}

async function refresh() {
  try {
    const stats = await (await fetch("/stats", { cache: "no-store" })).json();
    const mesh = stats.mesh || {};
    $("gauges").innerHTML = gauge("verified nodes", stats.verified_nodes, count) +
      GAUGES.filter(([k]) => k !== "nodes" && !UNPROVEN.has(k)).map(([k, label, show]) => gauge(PROVEN_LABEL[k] || label, stats[k], show)).join("") +
      gauge("median RTT", mesh.median_rtt_ms, (v) => [v.toPrecision(3), "ms"]);
    const claimed = { ...(stats.claimed || {}) };
    // GPUs whose memory nobody reported (WebGPU exposes none) sum to 0 B: unknown, not zero
    if (claimed.gpus > 0 && !claimed.gpu_vram_mb) claimed.gpu_vram_mb = null;
    $("claimed").innerHTML = GAUGES.map(([k, label, show]) => gauge(label, claimed[k], show)).join("");
    const resp = await fetch("/atlas?limit=1000", { headers: etag ? { "if-none-match": etag } : {} });
    if (resp.status === 200) {
      etag = resp.headers.get("etag");
      const atlas = await resp.json();
      profiles = new Map(atlas.nodes.map((n) => [n.node_id, n]));  // the graph sizes nodes by these
      rows = atlas.nodes.map((n) => ({
        node: n.node_id, name: n.name || "", trust: (atlas.trust || {})[n.node_id] || "unverified", kind: n.runtime.kind,
        cores: n.cpu.cores, gflops: n.cpu.gflops_fp32, gbs: n.cpu.mem_bw_gbps, tps: n.llm.tokens_per_sec,
        gpu: n.gpus.length ? n.gpus.map((g) => g.model).join(", ") : "" }));
      renderNodes();
    }
    await drawTotals();
    $("updated").textContent = `updated ${utcTime(Date.now() / 1000)}`;
    $("updated").className = "status ok";
  } catch (err) {
    $("updated").textContent = `the relay did not answer (${err.message}); retrying`;
    $("updated").className = "status warn";
  }
}

const COLOURS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#6e7781"];
let profiles = new Map();

function drawGraph(graph) {
  const canvas = $("graph"), ctx = canvas.getContext("2d");
  // the drawing buffer follows the on-screen size, so a phone gets a graph sized to its screen, not a
  // shrunken 960 px one
  const width = Math.max(280, Math.round(canvas.clientWidth || 960));
  const height = Math.round(Math.min(420, Math.max(240, width * 0.6)));
  if (canvas.width !== width || canvas.height !== height) { canvas.width = width; canvas.height = height; }
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const placed = graph.nodes.filter((n) => n.coordinate);
  window.ceGraph = { nodes: placed.length, edges: graph.edges.length };
  if (!placed.length) {
    ctx.fillStyle = "#57606a";
    ctx.font = "15px system-ui";
    // wrapped to the canvas: on a phone the sentence is wider than the screen
    const words = "no measured links yet: nodes appear once their live session has co-signed a link sample".split(" ");
    let line = "", y = 40;
    for (const word of words) {
      if (line && ctx.measureText(`${line} ${word}`).width > canvas.width - 40) { ctx.fillText(line, 20, y); line = word; y += 20; }
      else line = line ? `${line} ${word}` : word;
    }
    ctx.fillText(line, 20, y);
    return;
  }
  // Vivaldi coordinates in ms; a short force-directed pass spreads nodes that sit on top of each other
  const pos = new Map(placed.map((n) => [n.node_id, { x: n.coordinate.vec[0], y: n.coordinate.vec[1] }]));
  for (let it = 0; it < 60; it++) {
    for (const a of pos.values()) for (const b of pos.values()) {
      if (a === b) continue;
      const dx = a.x - b.x, dy = a.y - b.y, d2 = dx * dx + dy * dy + 0.01;
      if (d2 < 4) { a.x += dx / d2 * 0.2; a.y += dy / d2 * 0.2; }
    }
  }
  const xs = [...pos.values()].map((p) => p.x), ys = [...pos.values()].map((p) => p.y);
  const minX = Math.min(...xs), maxX = Math.max(...xs), minY = Math.min(...ys), maxY = Math.max(...ys);
  const scale = Math.min((canvas.width - 80) / Math.max(maxX - minX, 1), (canvas.height - 80) / Math.max(maxY - minY, 1));
  const at = (id) => { const p = pos.get(id); return p && [40 + (p.x - minX) * scale, 40 + (p.y - minY) * scale]; };
  ctx.strokeStyle = "#8c959f"; ctx.fillStyle = "#57606a"; ctx.font = "11px system-ui";
  for (const e of graph.edges) {
    const a = at(e.a), b = at(e.b);
    if (!a || !b) continue;
    ctx.beginPath(); ctx.moveTo(...a); ctx.lineTo(...b); ctx.stroke();
    ctx.fillText(`${e.rtt_ms.toFixed(1)} ms`, (a[0] + b[0]) / 2 + 4, (a[1] + b[1]) / 2 - 4);
  }
  for (const n of placed) {
    const [x, y] = at(n.node_id);
    const gflops = profiles.get(n.node_id)?.cpu?.gflops_fp32 || 0;
    const r = n.relay ? 9 : 5 + Math.sqrt(gflops) * 0.8;
    ctx.fillStyle = COLOURS[(n.region ?? 0) % COLOURS.length];
    ctx.globalAlpha = n.online ? 1 : 0.35;
    if (n.relay) ctx.fillRect(x - r, y - r, 2 * r, 2 * r);
    else { ctx.beginPath(); ctx.arc(x, y, r, 0, 2 * Math.PI); ctx.fill(); }
    ctx.globalAlpha = 1;
  }
}

async function refreshGraph() {
  try {
    const graph = await (await fetch("/netgraph", { cache: "no-store" })).json();
    drawGraph(graph);
  } catch (err) {
    $("updated").textContent = `the relay did not answer /netgraph (${err.message})`;
  }
}

// Jobs placed through the map, and the tasks running on each node now
async function refreshJobs() {
  try {
    const body = await (await fetch("/v1/jobs", { cache: "no-store" })).json();
    const running = Object.entries(body.running_by_node || {});
    $("running").textContent = running.length
      ? `tasks running now: ${running.map(([n, k]) => `${k} on ${n.slice(0, 14)}…`).join(", ")}`
      : `no task running now (${body.workers} node(s) offer slots)`;
    $("jobs").querySelector("tbody").innerHTML = (body.jobs || []).slice(0, 20).map((j) => {
      const total = Object.values(j.counts).reduce((a, b) => a + b, 0);
      return `<tr><td data-label="job"><a href="/job.html?id=${j.id}"><code>${j.id.slice(0, 16)}…</code></a></td>` +
        `<td data-label="state">${j.state}</td><td data-label="tasks done">${j.counts.done} / ${total}</td>` +
        `<td data-label="running">${j.counts.running}</td><td data-label="nodes">${j.nodes.length}</td></tr>`;
    }).join("") || `<tr><td colspan="5">no jobs yet</td></tr>`;
  } catch { /* an older relay without jobs: the section stays empty */ }
}

const originalRefresh = refresh;
async function refreshAll() {
  await originalRefresh();  // it keeps `profiles` (one /atlas read per refresh, 304 while nothing changed)
  await refreshGraph();
  await refreshJobs();
}

wireNodeTable();
refreshAll();
setInterval(refreshAll, 2000);
