// Runs Python under the bundled Pyodide in Node (no browser): node tests/pyodide_runner.mjs BUILD_WEB < script.py
// The capsule and rfc8785 wheels from build/web/wheels are unpacked first, exactly as the browser does.
// Prints the script's stdout; exits 1 with the Python error on failure.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const web = process.argv[2];
const { loadPyodide } = await import(pathToFileURL(join(web, "pyodide", "314.0.8", "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL: join(web, "pyodide", "314.0.8") + "/" });
for (const name of readdirSync(join(web, "wheels"))) {
  pyodide.unpackArchive(new Uint8Array(readFileSync(join(web, "wheels", name))), "wheel");
}
let out = "";
pyodide.setStdout({ batched: (line) => { out += line + "\n"; } });
const script = readFileSync(0, "utf8");
try {
  await pyodide.runPythonAsync(script);
  process.stdout.write(out);
} catch (err) {
  process.stderr.write(String(err));
  process.exit(1);
}
