// Storage probe in a worker: OPFS sync access handles (the fast path browsers offer), write + flush then
// read back and compare. Reports null with the reason where OPFS is missing.
onmessage = async (event) => {
  const { mib } = event.data;
  try {
    if (!navigator.storage || !navigator.storage.getDirectory) throw new Error("no Origin Private File System (OPFS) in this browser");
    const root = await navigator.storage.getDirectory();
    const file = await root.getFileHandle("ce-bench-probe.bin", { create: true });
    const handle = await file.createSyncAccessHandle();
    const block = new Uint8Array(1048576);
    crypto.getRandomValues(block.subarray(0, 65536));
    for (let i = 65536; i < block.length; i++) block[i] = block[i - 65536] ^ (i & 255);
    const writes = [], reads = [];
    for (let s = 0; s < 3; s++) {
      let t0 = performance.now();
      handle.truncate(0);
      for (let i = 0; i < mib; i++) handle.write(block, { at: i * block.length });
      handle.flush();
      writes.push((mib * 1.048576) / ((performance.now() - t0) / 1000));
      const back = new Uint8Array(block.length);
      t0 = performance.now();
      let same = true;
      for (let i = 0; i < mib; i++) { handle.read(back, { at: i * block.length }); if (i === 0) same = back.every((v, j) => v === block[j]); }
      reads.push((mib * 1.048576) / ((performance.now() - t0) / 1000));
      if (!same) throw new Error("data read back differed from data written");
    }
    handle.close();
    await root.removeEntry("ce-bench-probe.bin");
    const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
    postMessage({ ok: true, result: { write_mbps: med(writes), read_mbps: med(reads), file_mib: mib,
      write_samples: writes, read_samples: reads,
      read_cache: "OPFS reads are likely served from the browser's and the OS's caches: an upper bound",
      method: "OPFS sync access handle: 1 MiB writes + flush, full read-back; median of 3" } });
  } catch (err) {
    postMessage({ ok: true, result: { write_mbps: null, read_mbps: null, skipped: String(err && err.message || err) } });
  }
};
