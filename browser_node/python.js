// Pyodide with the capsule's Python: the browser builds its NodeProfile, canonical bytes and plan with the
// same code as servers (capsule/), loaded from the relay (no CDN).
const PYODIDE = "/pyodide/314.0.8/";
const WHEELS = ["rfc8785-0.1.4-py3-none-any.whl", "ce_capsule-1.0.0-py3-none-any.whl"];

const HELPERS = `
import json
import re
from capsule.aggregate import aggregate
from capsule.probe_report import parse_report
from capsule.canonical import signing_message
from capsule.peerid import peer_id_from_public_key
from capsule.plan import CPU_PROBES, instance_seed, plan_from_beacon
from capsule.scaling import chosen_instances, kept_note, next_instances, window_rate, work_spans
from capsule.profile import build_profile
from capsule.typed import parse
from capsule.model import NODE_NAME, NodeProfile

def ce_name_ok(name):
    return re.fullmatch(NODE_NAME, name) is not None

def ce_node_id(public_hex):
    return peer_id_from_public_key(bytes.fromhex(public_hex))

def ce_public_key(node_id):
    from capsule.peerid import public_key_from_peer_id
    return public_key_from_peer_id(node_id).hex()

def browser_stream_sizing(s):
    """STREAM's rule where the cache size cannot be read (a page): two array sizes, the larger one reported."""
    small, large = s["arrays"]
    ratio = (large["triad_gbps"] / small["triad_gbps"]) if small["triad_gbps"] and large["triad_gbps"] else None
    return {"method": "measured at two array sizes (3 arrays per instance each) on every instance at once; the "
                      "larger array's figure is reported: a page cannot read the last-level cache size, so the "
                      "rule (each array >= 4x that cache) cannot be checked here",
            "cache": None, "cache_null_reason": "not exposed to web pages",
            "arrays": s["arrays"], "reported_array_mib": s["reported_array_mib"], "instances": s["instances"],
            "larger_over_smaller": None if ratio is None else round(ratio, 4),
            "reading": None if ratio is None else (
                "the larger arrays read within 10% of the smaller: both beyond the caches, or both within one"
                if ratio >= 0.9 else "the smaller arrays read faster: a cache served them; the larger figure is "
                                     "reported")}

def ce_plan(beacon_value, node_id):
    plan = plan_from_beacon(beacon_value, node_id, CPU_PROBES)
    return json.dumps({"seed": plan.seed_hex, "order": list(plan.order), "jitter_ms": plan.start_jitter_ms})

def ce_profile(args_json):
    a = json.loads(args_json)
    figures = aggregate([parse_report(r) for r in a["concurrent"]], parse_report(a["solo"]), a.get("scaling"))
    if a.get("stream_sizing"):
        figures.evidence["cpu"]["mem_bw_gbps"]["array_sizing"] = browser_stream_sizing(a["stream_sizing"])
    if a.get("keep_instances"):
        figures.evidence["cpu"]["instances_kept"] = kept_note(a["keep_instances"], a["cores"])
    profile = build_profile(node_id=a["node_id"], measured_at=a["measured_at"], beacon=a["beacon"],
        capsule=a["capsule"], cores=a["cores"], threads=a["threads"], memory=a["memory"],
        storage_total_gb=a["storage_total_gb"], storage_free_gb=a["storage_free_gb"], figures=figures,
        gpus=a["gpus"], runtime=a["runtime"], ref_model="ce-ref-15m-f32", evidence_extra=a["evidence"],
        name=a.get("name") or None)
    if profile.get("name") is not None and not re.fullmatch(NODE_NAME, profile["name"]):
        raise ValueError("a name is 1-64 characters: no control or invisible characters, no space at either end, "
                         "not beginning like a NodeId")
    return json.dumps({"profile": profile, "message": signing_message("NodeProfile", profile).hex()})

def _keep(keep):
    return int(keep) if keep is not None and keep > 0 else None

def ce_next_instances(curve_json, claimed, keep):
    k = next_instances([tuple(step) for step in json.loads(curve_json)], int(claimed), keep=_keep(keep))
    return -1 if k is None else k

def ce_chosen_instances(curve_json, claimed, keep):
    return chosen_instances([tuple(step) for step in json.loads(curve_json)], reported=int(claimed), keep=_keep(keep))

def ce_window_rate(reports_json, probe):
    rate = window_rate([work_spans(parse_report(r), probe) for r in json.loads(reports_json)]).rate
    return json.dumps(None if rate is None else rate / 1e9)

def ce_message(kind, obj_json):
    return signing_message(kind, json.loads(obj_json)).hex()

def ce_gpu(call, args_json):
    """The GPU sizing and checking policy (capsule/gpu_policy.py), as servers run it."""
    from capsule import gpu_policy as policy
    a = json.loads(args_json)
    if call == "constants":
        out = {k: getattr(policy, k) for k in ("N_START", "MIN_SAMPLES", "MAX_SAMPLES", "WORKGROUP",
                                               "COPY_DISPATCHES", "COPY_SAMPLES")}
    elif call == "next_n":
        out = policy.next_n(a["n"], a["step_ms"], a["elem_bytes"], a["limit_bytes"])
    elif call == "repeats":
        out = policy.repeats_for(a["step_ms"])
    elif call == "check_plan":
        plan = policy.check_plan(a["seed"], a["n"], a["precision"])
        out = {"entries": plan.entries, "tolerance": plan.tolerance, "describe": plan.describe()}
    else:
        out = policy.copy_bytes(a["limit_bytes"])
    return json.dumps(out)

def ce_drift(results_json, claimed):
    """Why the page should measure again now ("": no reason): capsule/claim_drift.py, as servers run it."""
    from capsule.claim_drift import drift
    return drift(json.loads(results_json), claimed) or ""

def ce_drift_min_gap_s():
    from capsule.claim_drift import DriftConfig
    return DriftConfig().min_gap_s

def ce_check(profile_json):
    parse(NodeProfile, json.loads(profile_json))
    return "ok"
`;

export async function loadCapsulePython() {
  const { loadPyodide } = await import(`${PYODIDE}pyodide.mjs`);
  const pyodide = await loadPyodide({ indexURL: PYODIDE });
  for (const wheel of WHEELS) {
    const resp = await fetch(`/wheels/${wheel}`);
    if (!resp.ok) throw new Error(`cannot load /wheels/${wheel} (${resp.status})`);
    pyodide.unpackArchive(new Uint8Array(await resp.arrayBuffer()), "wheel");
  }
  await pyodide.runPythonAsync(HELPERS);
  const fn = (name) => pyodide.globals.get(name);
  return {
    version: pyodide.version,
    nameOk: (name) => fn("ce_name_ok")(name),  // capsule/model.py NODE_NAME, the relay's own rule
    nodeId: (publicKey) => fn("ce_node_id")([...publicKey].map((b) => b.toString(16).padStart(2, "0")).join("")),
    plan: (beaconValue, nodeId) => JSON.parse(fn("ce_plan")(beaconValue, nodeId)),
    profile: (args) => JSON.parse(fn("ce_profile")(JSON.stringify(args))),
    message: (kind, obj) => fn("ce_message")(kind, JSON.stringify(obj)),
    // the whole-device instance search and window figures (capsule/scaling.py), as servers run them
    instanceSeed: (seed, i) => fn("instance_seed")(seed, i),
    // keep: the worker count the answers use, for a re-measurement the roll calls prompted (0: none)
    nextInstances: (curve, claimed, keep = 0) => { const k = fn("ce_next_instances")(JSON.stringify(curve), claimed, keep); return k < 0 ? null : k; },
    chosenInstances: (curve, claimed, keep = 0) => fn("ce_chosen_instances")(JSON.stringify(curve), claimed, keep),
    windowRate: (reports, probe) => JSON.parse(fn("ce_window_rate")(JSON.stringify(reports), probe)),
    publicKeyHex: (nodeId) => fn("ce_public_key")(nodeId),
    check: (profile) => fn("ce_check")(JSON.stringify(profile)),
    gpu: (call, args = {}) => JSON.parse(fn("ce_gpu")(call, JSON.stringify(args))),
    // claims that follow the machine (capsule/claim_drift.py), as servers run the rule
    drift: (results, claimed) => fn("ce_drift")(JSON.stringify(results), claimed ?? 0) || null,
    driftMinGapS: () => fn("ce_drift_min_gap_s")(),
  };
}
