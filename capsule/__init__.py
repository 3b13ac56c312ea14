"""The ce-bench capsule: wasm kernels (kernels/), WGSL shaders (shaders/) and the pure-Python side that
builds, signs and verifies NodeProfiles. Pure stdlib (+ rfc8785) so it runs unchanged under Pyodide."""

CAPSULE_VERSION = "1.0.0"
