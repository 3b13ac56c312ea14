// Number formats shared by the pages: SI prefixes with 3 significant digits ("2.1 GFLOP/s", not
// "0.0021 TFLOP/s"), binary prefixes for memory sizes (KiB, MiB, GiB).
const PREFIXES = ["", "k", "M", "G", "T", "P", "E"];

export function si(scale, unit, binary = false) {
  return (v) => {
    const base = binary ? 1024 : 1000;
    let x = v * scale, i = 0;
    while (Math.abs(x) >= base && i < PREFIXES.length - 1) { x /= base; i++; }
    const prefix = PREFIXES[i] && binary ? (PREFIXES[i] === "k" ? "Ki" : PREFIXES[i] + "i") : PREFIXES[i];
    const digits = x.toPrecision(3);
    return [digits.includes(".") ? digits.replace(/0+$/, "").replace(/\.$/, "") : digits, prefix + unit];
  };
}

export function count(v) { return [Math.round(v).toLocaleString("en"), ""]; }

// When the node counts: what the latest roll call counted it for, and a countdown to the next one (the
// moment is drawn from a beacon round that does not exist yet: the earliest eligible moment, the chance each
// eligible round starts one, and the median).
export function rollCallLine(trust, nowS) {
  const next = trust.next_roll_call;
  // one vocabulary with `ce-bench status`: verified / unverified / flagged, with the relay's reason
  const status = trust.status ? `Status: ${trust.status}${trust.reason ? ` (${trust.reason})` : ""}. ` : "";
  const counted = trust.counted && trust.counted.roll_call && trust.counted.cpu_gflops > 0
    ? `Counted ${si(1e9, "FLOP/s")(trust.counted.cpu_gflops).join(" ")} at roll call ${trust.counted.roll_call}. `
    : "Not counted yet: a node counts from the first roll call it answers. ";
  if (!next) return status + counted;
  const wait = (t) => Math.max(0, Math.round(t - nowS));
  return status + counted + `Next roll call: possible in ${wait(next.earliest_at)} s (each eligible moment, every ` +
    `${next.eligible_every_s} s, starts one with chance ${Math.round(next.chance_each * 100)}%), ` +
    `even odds within ${wait(next.median_at)} s; about every ${Math.round(next.every_s)} s on average.`;
}

// Dates in one unambiguous form on every page (ISO 8601, UTC), never the browser's locale (issue 47: US-locale
// dates); `utcTime` for a chart's axis.
export function utc(seconds) { return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC"; }
export function utcTime(seconds) { return new Date(seconds * 1000).toISOString().slice(11, 19) + " UTC"; }

// Text from a profile or a relay (a GPU model, a node name) set into HTML: escaped, so it stays text.
export const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
