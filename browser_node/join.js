// The join page: on "Join", measure this device with the capsule (Web Workers running the reactor wasm,
// WebGPU, OPFS), build and sign its NodeProfile (Pyodide + WebCrypto) and report it to this relay; then
// keep the node live while the tab is open. Heavy work starts only after the click and stays under ~30 s.
import { rollCallLine } from "./format.js";
import { probeGpu } from "./gpu.js";
import { b64url, hex, nodeKey, unhex } from "./keys.js";
import { loadCapsulePython } from "./python.js";
import { challengeAnswerer } from "./challenge.js";
import { answersWorkers, followClaims } from "./claims.js";
import { gpuChallengeAnswerer } from "./gpu-challenge.js";
import { probeLandmarks } from "./landmarks.js";
import { getBeacon, liveSession, pendingProfile, postProfile } from "./relay.js";
import { taskRunner } from "./tasks.js";
import { call, probeWorkerPool } from "./workers.js";

const $ = (id) => document.getElementById(id);
const PHASES = [
  ["python", "Load the capsule (Pyodide + capsule Python)", 5],
  ["cpu", "CPU on every core (SGEMM, then STREAM triad)", 6],
  ["solo", "One core: reference model ce-ref-15m-f32", 4],
  ["disk", "Storage (OPFS)", 2],
  ["gpu", "GPU (WebGPU)", 3],
  ["report", "Sign and report to the relay", 1],
];
const PHASE_TIMEOUT_MS = 90_000;
// Phone safety: at most this much heavy work per run; later phases are skipped with the reason.
const HEAVY_BUDGET_S = Number(new URLSearchParams(location.search).get("heavy_budget_s")) || 30;
let hiddenDuringRun = false;

function setStatus(text, kind = "info") {
  const el = $("status");
  el.textContent = text;
  el.className = `status ${kind}`;
}

function phaseRows() {
  $("phases").innerHTML = PHASES.map(([id, label, est]) =>
    `<div class="phase" id="ph-${id}"><span class="label">${label}</span><progress max="100" value="0"></progress>` +
    `<span class="eta">~${est} s</span></div>`).join("");
}

async function phase(id, work) {
  const [, , est] = PHASES.find((p) => p[0] === id);
  const row = $(`ph-${id}`), bar = row.querySelector("progress"), eta = row.querySelector(".eta");
  row.classList.add("running");
  const t0 = performance.now();
  const tick = setInterval(() => {
    const s = (performance.now() - t0) / 1000;
    bar.value = Math.min(95, (100 * s) / est);
    eta.textContent = `${s.toFixed(1)} s of ~${est} s`;
  }, 100);
  try {
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error(`${id} did not finish within ${PHASE_TIMEOUT_MS / 1000} s`)), PHASE_TIMEOUT_MS));
    const result = await Promise.race([work(), timeout]);
    if (hiddenDuringRun) throw new Error("the tab was hidden during the measurement; browsers slow hidden tabs down, so it stopped. Keep the tab visible and press Join again");
    bar.value = 100;
    eta.textContent = `${((performance.now() - t0) / 1000).toFixed(1)} s`;
    row.classList.add("done");
    return result;
  } catch (err) {
    row.classList.add("failed");
    throw err;
  } finally {
    clearInterval(tick);
    row.classList.remove("running");
  }
}

function throttled(samples) {
  if (samples.length < 8) return false;
  const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  return med(samples.slice(-3)) < 0.6 * med(samples.slice(0, 3));
}

// The name the person gave this device (optional), read once when Join is pressed (a later edit of the field
// renames nothing until the next Join) and kept for the next visit; the profile signs it.
const NAME_KEY = "ce-bench-node-name";
let joinName = null;
function deviceName() { return joinName; }
function takeName(py) {
  const name = ($("node-name").value || "").trim();
  if (name && !py.nameOk(name)) return false;
  joinName = name || null;
  try { if (name) localStorage.setItem(NAME_KEY, name); else localStorage.removeItem(NAME_KEY); } catch { /* private mode */ }
  return true;
}

async function sha256Hex(buffer) { return hex(new Uint8Array(await crypto.subtle.digest("SHA-256", buffer))); }

// Capsule arguments, exactly as `wasmtime run capsule.wasm` takes them (the reactor runs the same driver).
const SGEMM_N = 512; // phones: a 512 product is ~0.05 s on a slow core; the evidence names n
const STEP_BUDGET_MS = 500, WHOLE_BUDGET_MS = 3000, SOLO_BUDGET_MS = 2000;

// keep: the worker count the live answers use, for a re-measurement the roll calls prompted: kept unless fewer
// workers do more (capsule/scaling.py; a busy WebKitGTK's 50% rule chose 1 where its answers did ~55 on 2)
// answerer: the live session's (challenge.js) when measuring again (see runAll below)
async function measure(py, key, nodeId, keep = 0, answerer = null) {
  const beacon = await getBeacon();
  const plan = py.plan(beacon.value, nodeId);
  // The platform's count is where the instance search starts, never a fact (WebKit says 4 on 2 cores).
  const claimed = Math.max(1, navigator.hardwareConcurrency || 1);
  const wasm = await (await fetch("/capsule-reactor.wasm")).arrayBuffer();
  const module = await WebAssembly.compile(wasm);
  const workers = probeWorkerPool(module);
  const pool = (count) => workers.get(count);
  // A step that a challenge's answer overlapped timed the cores it shared with that work (a roll call's moment is
  // drawn from the beacon: it cannot be avoided). Such a step waits for the answer to end and runs again, twice
  // at most; evidence.browser.steps_run_again counts them.
  let runAgain = 0;
  const runAll = async (ws, argsFor) => {
    for (let tries = 0; ; tries++) {
      for (let waited = 0; answerer && answerer.computing && waited < 100; waited++) await new Promise((r) => setTimeout(r, 100));
      const begun = answerer ? answerer.worked : 0, busy = answerer ? answerer.computing : false;
      const reports = (await Promise.all(ws.map((w, i) => call(w, { cmd: "run", args: argsFor(i) })))).map((r) => r.report);
      if (!answerer || tries >= 2 || (!busy && answerer.worked === begun)) return reports;
      runAgain++;
    }
  };
  const isolated = self.crossOriginIsolated === true;
  const heavyStart = performance.now();
  // STREAM arrays as large as the device can spare (3 per worker). STREAM's rule (each array >= 4x the
  // last-level cache) cannot be checked here: a page cannot read the cache size. So triad is measured at two
  // sizes, this one and a quarter of it, and the larger array's figure is reported (evidence.cpu.mem_bw_gbps
  // .array_sizing names both): the smaller one shows how much of the figure a cache could be giving.
  const mib = (navigator.deviceMemory || 4) >= 8 ? 64 : (navigator.deviceMemory || 4) >= 4 ? 32 : 16;
  const smallMib = Math.max(1, mib / 4);
  let concurrent, chosen, curve = [], cpuNotes = [], streamSizing = null;
  try {
    concurrent = await phase("cpu", async () => {
      let k;
      while ((k = py.nextInstances(curve, claimed, keep)) !== null) {
        const reports = await runAll(await pool(k), (i) => ["--probes", "sgemm", "--seed", py.instanceSeed(plan.seed, i),
          "--budget-ms", String(STEP_BUDGET_MS), "--soft-budget", "--sgemm-n", String(SGEMM_N)]);
        curve.push([k, py.windowRate(reports, "sgemm")]);
      }
      chosen = py.chosenInstances(curve, claimed, keep);
      const probes = plan.order.filter((p) => p === "sgemm" || p === "stream").join(",");
      const reports = await runAll(await pool(chosen), (i) => ["--probes", probes, "--seed", py.instanceSeed(plan.seed, i),
        "--budget-ms", String(WHOLE_BUDGET_MS), "--soft-budget", "--sgemm-n", String(SGEMM_N),
        "--stream-mib", String(mib), "--stream-triad-only"]);
      if (reports.some((r) => throttled(r.probes.sgemm.samples || []))) cpuNotes.push("throughput dropped sharply during the run (thermal throttling?)");
      if (probes.includes("stream")) {
        const small = await runAll(await pool(chosen), (i) => ["--probes", "stream", "--seed", py.instanceSeed(plan.seed, i),
          "--budget-ms", String(STEP_BUDGET_MS * 2), "--soft-budget", "--stream-mib", String(smallMib), "--stream-triad-only"]);
        streamSizing = { arrays: [{ array_mib: smallMib, triad_gbps: py.windowRate(small, "stream") },
                                  { array_mib: mib, triad_gbps: py.windowRate(reports, "stream") }],
                         reported_array_mib: mib, instances: chosen };
      }
      return reports;
    });
    const solo = await phase("solo", async () => (await runAll(await pool(1), () => ["--probes", "sgemm,llm",
      "--seed", plan.seed, "--budget-ms", String(SOLO_BUDGET_MS), "--soft-budget", "--sgemm-n", String(SGEMM_N)]))[0]);
    const overBudget = () => (performance.now() - heavyStart) / 1000 > HEAVY_BUDGET_S;
    const skipped = `skipped: this run's ${HEAVY_BUDGET_S} s budget of heavy work was used up (phone safety)`;
    solo.probes.disk = overBudget() ? { write_mbps: null, read_mbps: null, skipped }
      : await phase("disk", () => call(new Worker("/disk-worker.js"), { mib: 16 }));
    const gpu = overBudget() ? { gpus: [], notes: [`GPU ${skipped}`] }
      : await phase("gpu", () => probeGpu(py, plan.seed, 1500).catch((err) => ({ gpus: [], notes: [`WebGPU probe failed: ${err.message}`] })));
    const estimate = navigator.storage && navigator.storage.estimate ? await navigator.storage.estimate() : null;
    const uaData = navigator.userAgentData;
    const high = uaData && uaData.getHighEntropyValues ? await uaData.getHighEntropyValues(["architecture", "platformVersion", "fullVersionList"]).catch(() => ({})) : {};
    const brand = (high.fullVersionList || uaData?.brands || []).find((b) => !/Not/.test(b.brand));
    const args = {
      node_id: nodeId, measured_at: Math.floor(Date.now() / 1000), beacon,
      capsule: { version: "1.0.0", sha256: await sha256Hex(wasm) },
      cores: chosen, threads: chosen, memory: { total_mb: navigator.deviceMemory ? Math.round(navigator.deviceMemory * 1024) : null, available_mb: null },
      storage_total_gb: null,
      storage_free_gb: estimate && estimate.quota ? Math.floor((estimate.quota - (estimate.usage || 0)) / 1e9) : null,
      gpus: gpu.gpus,
      runtime: { os: (uaData && uaData.platform) || navigator.platform || "unknown", arch: high.architecture || "unknown",
                 kind: "browser", docker: false, gvisor: false, wasm: true,
                 engine: brand ? `${brand.brand} ${brand.version}` : navigator.userAgent.slice(0, 120) },
      keep_instances: keep || null,
      name: deviceName(),
      concurrent, solo, scaling: curve.map(([k, rate]) => ({ instances: k, gflops_fp32: rate === null ? null : Math.round(rate * 1000) / 1000 })),
      stream_sizing: streamSizing,
      evidence: {
        gpus: gpu.evidence || [], gpu_notes: gpu.notes, cpu_notes: cpuNotes,
        plan: { seed: plan.seed, order: plan.order, beacon_source: "relay (this page's origin)" },
        browser: { cross_origin_isolated: isolated, heavy_work_s: (performance.now() - heavyStart) / 1000,
                   heavy_budget_s: HEAVY_BUDGET_S, hardware_concurrency: navigator.hardwareConcurrency || null,
                   steps_run_again: answerer ? runAgain : null,
                   pyodide: py.version, signer: key.signer, user_agent: navigator.userAgent.slice(0, 200) },
        memory: { method: "navigator.deviceMemory: a rounded estimate capped at 8 GiB; available memory is not exposed to pages" },
        storage_totals: "free_gb = origin quota left (navigator.storage.estimate), an estimate; the disk total is not exposed",
        capsule_note: "capsule.sha256 is of capsule-reactor.wasm: browsers run the reactor build of the same C",
        cores_note: "cores = threads = the instance count the measurement chose (evidence.cpu.scaling); " +
          "navigator.hardwareConcurrency is recorded as a claim and not trusted",
      },
    };
    return { args, beacon, module };
  } finally {
    workers.terminate();
  }
}

// Measures, signs and reports: the profile, the relay's answer and the compiled capsule.
// answerer: the live session's (challenge.js), when measuring again: steps its answers overlapped run again
async function register(py, key, nodeId, keep = 0, answerer = null) {
  const { args, module } = await measure(py, key, nodeId, keep, answerer);
  window.ceReports = { concurrent: args.concurrent, solo: args.solo }; // the raw ProbeReports (tests read them)
  return phase("report", async () => {
    const { profile, message } = py.profile(args);
    profile.sig = b64url(await key.sign(unhex(message)));
    py.check(profile);
    return { profile, answer: await postProfile(profile), module };
  });
}

function show(profile) {
  const cpu = profile.cpu, llm = profile.llm, st = profile.storage, g = profile.gpus[0];
  const f = (v, d = 1) => (v === null || v === undefined ? "null" : Number(v).toFixed(d));
  const rows = [
    ["CPU fp32", `${f(cpu.gflops_fp32)} GFLOP/s`, `${cpu.threads} Web Workers (count measured), wasm SIMD128`],
    ["memory bandwidth", `${f(cpu.mem_bw_gbps, 2)} GB/s`, "STREAM triad, all workers"],
    ["reference model", `${f(llm.tokens_per_sec)} tokens/s`, "ce-ref-15m-f32 decode, one worker"],
    ["storage write / read", `${f(st.write_mbps, 0)} / ${f(st.read_mbps, 0)} MB/s`, profile.evidence.storage?.null_reason || "OPFS"],
    ["GPU fp32 / fp16", g ? `${f(g.fp32_tflops, 4)} / ${f(g.fp16_tflops, 4)} TFLOP/s` : "none", g ? g.model : (profile.evidence.gpu_notes || []).join("; ")],
  ];
  $("results-table").innerHTML = rows.map(([a, b, c]) => `<tr><th>${a}</th><td class="num">${b}</td><td>${c}</td></tr>`).join("");
  $("node-id").textContent = profile.node_id;
  $("results").hidden = false;
}

async function standing(profile) {
  try {
    const atlas = await (await fetch("/atlas?limit=1000")).json();
    const others = atlas.nodes.filter((n) => n.node_id !== profile.node_id).map((n) => n.cpu.gflops_fp32 || 0);
    const below = others.filter((v) => v < (profile.cpu.gflops_fp32 || 0)).length;
    const summary = others.length
      ? `This device is faster (CPU fp32) than ${below} of the ${others.length} other live nodes this relay knows.`
      : "This device is the only live node this relay knows so far.";
    const bars = atlas.nodes.slice(0, 50).map((n) => {
      const mine = n.node_id === profile.node_id;
      const max = Math.max(...atlas.nodes.map((x) => x.cpu.gflops_fp32 || 0), 1);
      return `<div class="bar${mine ? " mine" : ""}" title="${n.node_id}" style="width:${(100 * (n.cpu.gflops_fp32 || 0)) / max}%"></div>`;
    }).join("");
    $("standing").innerHTML = `<p>${summary}</p><div class="bars">${bars}</div>`;
  } catch (err) {
    $("standing").textContent = `could not load the atlas: ${err.message}`;
  }
}

async function join() {
  $("join").disabled = true;
  hiddenDuringRun = false;
  phaseRows();
  const t0 = performance.now();
  try {
    const key = await nodeKey();
    const py = await phase("python", loadCapsulePython);
    window.cePython = py; // the same capsule Python as servers; tests compare its bytes with CPython's
    if (!takeName(py)) {  // checked before any measuring: a name the relay would refuse costs no run
      setStatus("refused: a name is 1-64 characters, with no control or invisible characters, no space at either " +
        "end, and not beginning like a node id (12D3KooW…)", "error");
      $("join").disabled = false;
      return;
    }
    const nodeId = py.nodeId(key.publicKey);
    setStatus(`node ${nodeId}${key.created ? " (new key)" : ""}: measuring…`);
    const result = await register(py, key, nodeId);
    const module = result.module;
    show(result.profile);
    window.ceProfile = result.profile;
    window.ceJoinSeconds = (performance.now() - t0) / 1000;
    if (!result.answer.ok) {
      setStatus(result.answer.message, result.answer.retry ? "warn" : "error");
      return;
    }
    setStatus(`joined: ${result.answer.status === 201 ? "a new node" : "profile updated"} in ${window.ceJoinSeconds.toFixed(1)} s; live while this tab is open`, "ok");
    await standing(result.profile);
    let passed = 0, following = result.profile;
    const answerer = challengeAnswerer(module);
    const sayClaims = (line) => { $("claims").textContent = line; };
    const follow = followClaims(py, result.profile, async () => {
      hiddenDuringRun = false; // as at Join: a measurement the tab was hidden during stops and says so
      phaseRows();
      const again = await register(py, key, nodeId, answersWorkers(following), answerer);
      if (!again.answer.ok) throw new Error(again.answer.message);
      show(again.profile);
      window.ceProfile = following = again.profile;
      return again.profile;
    }, sayClaims);
    let session = null;
    const sendLive = (message) => session && session.send(message);
    const runner = taskRunner(nodeId, key, py, (message) => sendLive(message), (e) => {
      if (e.type === "task_started") $("tasks").textContent = `running task ${e.task} of job ${e.job.slice(0, 12)}…`;
      if (e.type === "task_done") {
        tasksDone++;
        $("tasks").textContent = `${tasksDone} task(s) run; the last: ${e.error ? e.error : `exit ${e.exit_code}`}`;
      }
    });
    let tasksDone = 0;
    const consent = $("accept-tasks");
    session = liveSession(nodeId, key, py, (m) => {
      follow(m);
      if (m.type === "ack" || m.type === "challenge_result") {
        if (m.type === "challenge_result" && m.passed) passed++;
        // liveness is the relay's pings answered (one signed heartbeat binds the session), not a heartbeat count
        $("live").textContent = `live (this page answers the relay's pings): ${passed} relay challenges passed`;
      }
      if (m.type === "challenge_result" && !m.passed) $("live").textContent = `relay challenge failed: ${m.code} ${m.detail}`;
      if (m.type === "rebenchmark") $("live").textContent = "the relay asks for a fresh measurement: press Join again";
      if (m.type === "error") $("live").textContent = m.code === "superseded"
        ? "stopped: another tab or device uses this node's key and took its session (one key is one node)"
        : `relay: ${m.code} ${m.detail}`;
    }, answerer, result.profile.gpus.length && navigator.gpu ? gpuChallengeAnswerer("/shaders/") : null,
    (line) => { $("peers").textContent = line; }, { runner, allowed: () => consent.checked });
    consent.onchange = () => {
      session.tasksChanged();
      $("tasks").textContent = consent.checked ? "tasks allowed: waiting for work" : "tasks stopped";
    };
    probeLandmarks(nodeId, key, py, (line) => { $("landmarks").textContent = line; });
    countdown(nodeId);
  } catch (err) {
    setStatus(`stopped: ${err.message}`, "error");
  } finally {
    $("join").disabled = false;
  }
}

// When this visit counts: the relay's view of the node (every 10 s) and a countdown to the next roll call
// (browser_node/node.js rollCallLine), so a visitor sees the moment instead of "counted 0".
function countdown(nodeId) {
  let trust = null;
  const refresh = () => fetch(`/v1/nodes/${encodeURIComponent(nodeId)}`).then((r) => (r.ok ? r.json() : null))
    .then((body) => { if (body) trust = body.trust; }).catch(() => {});
  refresh();
  setInterval(refresh, 10000);
  setInterval(() => { if (trust) $("roll-call").textContent = rollCallLine(trust, Date.now() / 1000); }, 1000);
}

function init() {
  document.addEventListener("visibilitychange", () => { if (document.hidden) hiddenDuringRun = true; });
  if (!window.isSecureContext) {
    setStatus("This page is not a secure context (plain http on a LAN address): browsers then hide WebCrypto and " +
      "WebGPU. Start the relay with `ce-bench up --host 0.0.0.0 --tls` and open the https:// address it prints (accept its self-signed certificate once), or open this page on localhost.", "error");
    $("join").disabled = true;
    return;
  }
  const waiting = pendingProfile();
  if (waiting) postProfile(waiting).then((r) => setStatus(r.ok ? "a profile kept from an earlier visit was delivered" : r.message, r.ok ? "ok" : "warn"));
  try { $("node-name").value = localStorage.getItem(NAME_KEY) || ""; } catch { /* private mode */ }
  $("join").addEventListener("click", join);
  // The button is disabled in the HTML until this line: a press before the handler exists would be lost.
  $("join").disabled = false;
  // No core count here: the platform's (navigator.hardwareConcurrency) is a claim; the run measures how many.
  setStatus("Ready. Pressing Join runs about 20 s of benchmarks on every core this page can use (how many is measured)" +
    `${navigator.gpu ? " and the GPU" : " (no WebGPU here)"}.`);
}

init();
