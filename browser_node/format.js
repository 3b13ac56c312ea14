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
