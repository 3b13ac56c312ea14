// Pyodide with the capsule's Python: the browser builds its NodeProfile, canonical bytes and plan with the
// same code as servers (capsule/), loaded from the relay (no CDN).
const PYODIDE = "/pyodide/314.0.8/";
const WHEELS = ["rfc8785-0.1.4-py3-none-any.whl", "ce_capsule-1.0.0-py3-none-any.whl"];

const HELPERS = `
import json
from capsule.aggregate import aggregate
from capsule.canonical import signing_message
from capsule.peerid import peer_id_from_public_key
from capsule.plan import CPU_PROBES, plan_from_beacon
from capsule.profile import build_profile
from capsule.seeding import PROMPT_STREAM, SplitMix64, seed64
from capsule.typed import parse
from capsule.model import NodeProfile

def ce_node_id(public_hex):
    return peer_id_from_public_key(bytes.fromhex(public_hex))

def ce_public_key(node_id):
    from capsule.peerid import public_key_from_peer_id
    return public_key_from_peer_id(node_id).hex()

def ce_plan(beacon_value, node_id):
    plan = plan_from_beacon(beacon_value, node_id, CPU_PROBES)
    s = seed64(plan.seed_hex)
    rng = SplitMix64(s ^ PROMPT_STREAM)
    return json.dumps({"seed": plan.seed_hex, "order": list(plan.order), "jitter_ms": plan.start_jitter_ms,
                       "seed_lo": s & 0xFFFFFFFF, "seed_hi": s >> 32, "prompt": [rng.next() % 32000 for _ in range(32)]})

def ce_profile(args_json):
    a = json.loads(args_json)
    figures = aggregate(a["concurrent"], a["solo"], a.get("overlap"))
    profile = build_profile(node_id=a["node_id"], measured_at=a["measured_at"], beacon=a["beacon"],
        capsule=a["capsule"], cores=a["cores"], threads=a["threads"], memory=a["memory"],
        storage_total_gb=a["storage_total_gb"], storage_free_gb=a["storage_free_gb"], figures=figures,
        gpus=a["gpus"], runtime=a["runtime"], ref_model="ce-ref-15m-f32", evidence_extra=a["evidence"])
    return json.dumps({"profile": profile, "message": signing_message("NodeProfile", profile).hex()})

def ce_message(kind, obj_json):
    return signing_message(kind, json.loads(obj_json)).hex()

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
    nodeId: (publicKey) => fn("ce_node_id")([...publicKey].map((b) => b.toString(16).padStart(2, "0")).join("")),
    plan: (beaconValue, nodeId) => JSON.parse(fn("ce_plan")(beaconValue, nodeId)),
    profile: (args) => JSON.parse(fn("ce_profile")(JSON.stringify(args))),
    message: (kind, obj) => fn("ce_message")(kind, JSON.stringify(obj)),
    publicKeyHex: (nodeId) => fn("ce_public_key")(nodeId),
    check: (profile) => fn("ce_check")(JSON.stringify(profile)),
  };
}
