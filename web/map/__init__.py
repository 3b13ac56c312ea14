"""The map: the atlas of nodes and what each counts, link samples and the coordinates fitted from them, landmark probes
and node-to-node probes."""
