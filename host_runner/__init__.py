"""The server side of ce-bench: runs capsule.wasm under wasmtime and reports what the machine can do."""
