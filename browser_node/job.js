// One job's page (/job.html?id=JOB): its state and its tasks (node, attempts, whether the output was checked by
// another node, exit code, output), read from GET /v1/jobs/{id} every 2 s while the job runs.
import { esc } from "./format.js";

const $ = (id) => document.getElementById(id);
const jobId = new URLSearchParams(location.search).get("id") || "";

function checked(task) {
  const verdicts = task.attempts.map((a) => a.verdict).filter(Boolean);
  if (verdicts.includes("wrong")) return `${verdicts.filter((v) => v === "agreed").length} agreed, a wrong output lost`;
  if (verdicts.includes("agreed")) return `${verdicts.filter((v) => v === "agreed").length} nodes agreed`;
  return verdicts.includes("unchecked") ? "not checked (not drawn for audit)" : "—";
}

async function load() {
  $("job-id").textContent = jobId;
  $("raw").href = `/v1/jobs/${encodeURIComponent(jobId)}`;
  const resp = await fetch(`/v1/jobs/${encodeURIComponent(jobId)}`, { cache: "no-store" });
  if (!resp.ok) {
    const problem = await resp.json().catch(() => ({}));
    $("status").textContent = `no such job here: ${problem.title || resp.status}`;
    $("status").className = "status warn";
    return;
  }
  const job = await resp.json();
  const c = job.counts;
  $("status").textContent = `${job.state}: ${c.done} accepted, ${c.running} running, ${c.queued} queued, ` +
    `${c.failed} failed of ${job.tasks.length} task(s); redundancy ${job.redundancy}, audit share ${job.audit_share}`;
  $("status").className = `status ${job.state === "failed" ? "error" : job.state === "done" ? "ok" : "info"}`;
  $("tasks").querySelector("tbody").innerHTML = job.tasks.map((t) => {
    const node = t.node_id || (t.attempts.find((a) => a.state === "running") || {}).node_id;
    const out = t.error ? esc(t.error) : t.stdout !== null ? `<code>${esc(t.stdout.slice(0, 120))}</code>` : "—";
    return `<tr><td data-label="task">${t.task}</td><td data-label="state">${esc(t.state)}</td>` +
      `<td data-label="node">${node ? `<a href="/nodes/${encodeURIComponent(node)}"><code>${esc(node.slice(0, 16))}…</code></a>` : "—"}</td>` +
      `<td data-label="attempts">${t.attempts.length}</td><td data-label="checked">${esc(checked(t))}</td>` +
      `<td data-label="exit">${t.exit_code === null ? "—" : t.exit_code}</td><td data-label="output">${out}</td></tr>`;
  }).join("");
  if (!["done", "failed", "cancelled"].includes(job.state)) setTimeout(load, 2000);
}

load();
