"""A node's answer to a GPU challenge (kind "gpu": capsule/gpu_challenge.py; relay side web/proof/gpu_challenges.py),
computed through wgpu with the probe's own WGSL matmul (capsule/shaders/matmul_f32.wgsl) and the challenge's
helpers (capsule/shaders/challenge_gpu.wgsl: inputs drawn on the GPU, rows hashed into Merkle leaves and
subtrees on the GPU). Per product the GPU runs gen -> matmul -> leaf; per batch of products it hashes each
product's n leaves down to one subtree root; the host reads back 32 bytes per product once at the end of the
commitment (that read-back is also the wait: wgpu 0.32's work-done callback is unreliable) and joins them. At
a roll call it reads back after each round of products instead, and stops at the deadline (GpuAnswer).

Openings recompute the named products on the same device (the same shader on the same inputs gives the same
bits; checked: the recomputed subtree root must equal the committed one) and read back just the named rows and
that product's leaf digests, so nothing but the reps subtree roots is kept between commit and open.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capsule import gpu_challenge as gc
from capsule.challenge import encode_row
from host_runner.gpu import BACKENDS, SHADERS, _quiet_vulkan_loader

LEAF_BUFFER_BYTES = 16 << 20   # leaf digests of one batch of products (n = 2048: 256 products per batch)
C_BUFFER_BYTES = 512 << 20     # products kept for one leaf dispatch: rows hashed side by side (see slots)
ROWS_IN_FLIGHT = 1 << 16       # rows a leaf dispatch should hash at once to fill a large GPU (one thread each)
STEP_BYTES = 16                # struct Step in challenge_gpu.wgsl
# At a roll call the work goes in about this many rounds, each waited for: the GPU can stop between two. More
# rounds stop closer to the deadline but wait more often (a read-back per round: ~0.1 ms on a real GPU).
ROUNDS_PER_CHALLENGE = 8


class GpuError(RuntimeError):
    """The GPU could not answer (no adapter, a device lost, a product that did not recompute the same)."""


def pick_adapter(name: str | None = None) -> Any:
    """The adapter host_runner/gpu.py would measure first (native backends before GL), or the one whose name
    contains `name` (the GPU a profile claims)."""
    _quiet_vulkan_loader()
    try:
        import wgpu
    except ImportError:
        raise GpuError("wgpu is not installed (pip install wgpu)") from None
    try:
        adapters = wgpu.gpu.enumerate_adapters_sync()
    except Exception as exc:  # a broken driver stack is reported as no GPU, not a crash
        raise GpuError(f"wgpu could not enumerate adapters ({exc})") from exc
    ordered = sorted(adapters, key=lambda a: str(a.info.get("backend_type", "")).lower() in ("gl", "opengl"))
    for adapter in ordered:
        label = str(adapter.info.get("device") or adapter.info.get("description") or "")
        if name is None or name in label:
            return adapter
    raise GpuError("no GPU adapter found" + (f" named {name!r}" if name else ""))


@dataclass
class _Buffers:
    """Everything of one order n, kept between challenges."""

    n: int
    slots: int          # products whose C is kept side by side, so one leaf dispatch hashes all their rows
    batch: int          # products per batch of leaf digests (a multiple of slots)
    a: Any
    b: Any
    c: Any              # slots x n x n fp32
    step: Any           # uniform Step, copied in from a challenge's steps before each product
    leaves: Any         # batch x n digests (8 u32 each)
    half: Any           # batch x n / 2 digests: the other side of the ping-pong
    groups: dict[str, Any]


class GpuContext:
    """One adapter's device and the challenge pipelines, kept by a live session between challenges: shader
    compilation (~1 s on lavapipe) must not fall into the timed window.

    hash_on: where rows become Merkle leaves. "gpu" (the default on real GPUs): the leaf and node shaders, 32
    bytes per product read back. "host" (the default on CPU adapters: lavapipe, SwiftShader): C_t is read back
    and hashed by hashlib, because there the "GPU" is the same CPU, and OpenSSL's SHA-256 is far faster than a
    WGSL one compiled for it (lavapipe, n = 256, 12 products, 3 runs: 0.99-1.25 GFLOP/s hashing on the host,
    0.58-0.83 hashing in WGSL, 1.31-1.35 for the matmul alone). Both make the same roots."""

    def __init__(self, adapter: Any | None = None, hash_on: str | None = None) -> None:
        import wgpu

        self.wgpu = wgpu
        self.adapter = adapter if adapter is not None else pick_adapter()
        info = self.adapter.info
        self.name = str(info.get("device") or info.get("description") or "unknown adapter")
        self.backend = BACKENDS.get(str(info.get("backend_type", "")).lower(), "vulkan")
        self.adapter_type = str(info.get("adapter_type", ""))
        if hash_on not in (None, "gpu", "host"):
            raise ValueError(f"hash_on: 'gpu' or 'host', not {hash_on!r}")
        self.hash_on = hash_on or ("host" if self.adapter_type.upper() == "CPU" else "gpu")
        limits = self.adapter.limits
        # the adapter's own binding limits (WebGPU's defaults are 128 / 256 MiB): more products side by side
        self.device = self.adapter.request_device_sync(required_limits={
            "max-storage-buffer-binding-size": int(limits["max-storage-buffer-binding-size"]),
            "max-buffer-size": int(limits["max-buffer-size"])})
        self.binding_limit = min(int(self.device.limits["max-storage-buffer-binding-size"]),
                                 int(self.device.limits["max-buffer-size"]))
        matmul = self.device.create_shader_module(code=(SHADERS / "matmul_f32.wgsl").read_text())
        helpers = self.device.create_shader_module(code=(SHADERS / "challenge_gpu.wgsl").read_text())
        self.pipelines = {
            "matmul": self._pipeline(matmul, "main"),
            **{entry: self._pipeline(helpers, entry) for entry in ("gen", "leaf", "node")}}
        self._buffers: dict[int, _Buffers] = {}
        self._uniforms: dict[tuple[str, int], Any] = {}
        self.lock = threading.Lock()  # one challenge's work at a time on this device

    def _pipeline(self, module: Any, entry: str) -> Any:
        return self.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": entry})

    def _storage(self, size: int) -> Any:
        usage = self.wgpu.BufferUsage.STORAGE | self.wgpu.BufferUsage.COPY_SRC
        return self.device.create_buffer(size=size, usage=usage)

    def uniform(self, kind: str, value: int) -> Any:
        """A 16-byte uniform (u32 value, 3 x padding), one per distinct value: matmul's n, a tree level's count."""
        key = (kind, value)
        if key not in self._uniforms:
            self._uniforms[key] = self.device.create_buffer_with_data(
                data=np.array([value, 0, 0, 0], np.uint32), usage=self.wgpu.BufferUsage.UNIFORM)
        return self._uniforms[key]

    def bind(self, pipeline: str, buffers: dict[int, Any], offsets: dict[int, tuple[int, int]] | None = None) -> Any:
        """A bind group of whole buffers, or (offset, size) views of them where `offsets` says."""
        views = offsets or {}
        entries = [{"binding": i, "resource": {"buffer": b, "offset": views.get(i, (0, b.size))[0],
                                               "size": views.get(i, (0, b.size))[1]}} for i, b in buffers.items()]
        return self.device.create_bind_group(layout=self.pipelines[pipeline].get_bind_group_layout(0), entries=entries)

    def buffers(self, n: int) -> _Buffers:
        size = 4 * n * n
        if size > self.binding_limit:
            raise GpuError(f"order {n} needs {size} B per matrix; this adapter binds {self.binding_limit} B")
        if n not in self._buffers:
            # rows side by side: enough to fill a large GPU (one thread per row), within the binding limit;
            # on the host path the products are read back one by one
            slots = 1 if self.hash_on == "host" else max(1, min(
                -(-ROWS_IN_FLIGHT // n), C_BUFFER_BYTES // size, self.binding_limit // size))
            batch = max(1, LEAF_BUFFER_BYTES // (32 * n)) // slots * slots or slots
            a, b, c = self._storage(size), self._storage(size), self._storage(size * slots)
            step = self.device.create_buffer(size=STEP_BYTES, usage=self.wgpu.BufferUsage.UNIFORM
                                             | self.wgpu.BufferUsage.COPY_DST)
            leaves, half = self._storage(32 * n * batch), self._storage(16 * n * batch)
            groups = {"gen": self.bind("gen", {0: a, 1: b, 2: step}),
                      "leaf": self.bind("leaf", {2: step, 3: c, 4: leaves})}
            for j in range(slots):  # matmul writes product j of a group into slot j (offsets: 4 n^2, aligned)
                groups[f"matmul:{j}"] = self.bind("matmul", {0: a, 1: b, 2: c, 3: self.uniform("n", n)},
                                                  {2: (j * size, size)})
            self._buffers[n] = _Buffers(n, slots, batch, a, b, c, step, leaves, half, groups)
        return self._buffers[n]

    def level_group(self, bufs: _Buffers, source: Any, dest: Any, count: int) -> Any:
        key = f"node:{id(source)}:{count}"
        if key not in bufs.groups:
            bufs.groups[key] = self.bind("node", {5: source, 6: dest, 7: self.uniform("count", count)})
        return bufs.groups[key]


def _dispatch(encoder: Any, pipeline: Any, group: Any, grid: tuple[int, int]) -> None:
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups(grid[0], grid[1], 1)
    compute.end()


def _grid(groups: int) -> tuple[int, int]:
    """A 2D grid for `groups` workgroups (65,535 per dimension); the shader skips the invocations past the end."""
    return min(groups, 65535), math.ceil(groups / 65535)


def _digests(raw: Any, count: int) -> list[bytes]:
    """SHA-256 digests as the shaders keep them (big-endian words in u32s) to bytes."""
    words = np.frombuffer(raw, np.uint32, count * 8).astype(">u4").tobytes()
    return [words[i * 32:(i + 1) * 32] for i in range(count)]


def _host_levels(c: Any, n: int) -> list[list[bytes]]:
    """A product's subtree, hashed on the host from C_t's bytes (n rows of 4 n bytes): leaf digests first."""
    view = memoryview(c).cast("B")
    return gc.levels([gc.leaf_hash(view[r * 4 * n:(r + 1) * 4 * n]) for r in range(n)])


class GpuAnswer:
    """One GPU challenge: `commit` computes each instance's products and returns one Merkle root (hex) per seed
    over the products done (`products`, per instance); `open` returns the named rows (leaves) with their proofs,
    in SgemmAnswer's wire format. Keeps the products' subtree roots in between (32 bytes per product). With
    several contexts (GPUs), instance i runs on context i mod their count, each GPU on its own thread.

    With `stop_at` (a roll call's deadline on time.perf_counter()), the work goes in rounds of products of every
    instance (1, 2, 4, ... up to ~1/ROUNDS_PER_CHALLENGE of the work), each waited for, and a round is begun
    only if it still fits before stop_at at the last one's pace (the first always is): the GPU commits what it
    finished by the deadline, as the SGEMM answer does (host_runner/challenge_answer.py)."""

    def __init__(self, seeds: list[int], n: int, reps: int = 1,
                 context: GpuContext | Sequence[GpuContext] | None = None) -> None:
        if not gc.is_order(n) or not 1 <= reps <= gc.MAX_REPS:
            raise ValueError(f"not a GPU challenge: n={n} (a power of two in [{gc.N_MIN}, {gc.N_MAX}]), reps={reps}")
        self.seeds = seeds
        self.n = n
        self.reps = reps
        self.contexts = [context] if isinstance(context, GpuContext) else list(context or [])
        self.product_roots: list[list[bytes]] = []   # per instance, per product done
        self.upper: list[list[list[bytes]]] = []     # per instance: the tree above its products
        self.products: list[int] = []                # per instance: the products committed

    def _ctx(self, instance: int) -> GpuContext:
        if not self.contexts:
            self.contexts = [GpuContext()]
        return self.contexts[instance % len(self.contexts)]

    def _product(self, encoder: Any, ctx: GpuContext, bufs: _Buffers, slot: int) -> None:
        """gen -> matmul for the Step in bufs.step, C into `slot` (each pass sees the previous one's writes)."""
        n = self.n
        _dispatch(encoder, ctx.pipelines["gen"], bufs.groups["gen"], (n // gc.TILE, 2 * n))
        _dispatch(encoder, ctx.pipelines["matmul"], bufs.groups[f"matmul:{slot}"], (n // gc.TILE, n // gc.TILE))

    def _schedule(self, cap: int, ramp: bool) -> list[tuple[int, int]]:
        """(first product, count) of each round: `cap` products a round; with `ramp` (a roll call) 1, 2, 4, ...
        up to cap first, so that a device far slower at this moment than its claim (a software adapter beside the
        SGEMM answer: 12x in Chromium here) still finishes its first round before the deadline."""
        out: list[tuple[int, int]] = []
        t0, size = 0, 1 if ramp else cap
        while t0 < self.reps:
            count = min(size, cap, self.reps - t0)
            out.append((t0, count))
            t0, size = t0 + count, size * 2
        return out

    def _steps(self, instances: list[int], schedule: list[tuple[int, int]]) -> np.ndarray:
        """The Step of every product of these instances, in order (leaves at (t - its round's first) n: a
        round's products start at leaf 0 of the batch buffer)."""
        first = np.zeros(self.reps, np.int64)
        for t0, count in schedule:
            first[t0:t0 + count] = t0
        steps = np.zeros((len(instances) * self.reps, 4), np.uint32)
        for k, i in enumerate(instances):
            for t in range(self.reps):
                state = gc.product_state(self.seeds[i], t)
                steps[k * self.reps + t] = (state & 0xFFFFFFFF, state >> 32, self.n, (t - first[t]) * self.n)
        return steps

    def commit(self, stop_at: float | None = None) -> list[str]:
        self._ctx(0)
        per_context: dict[int, list[int]] = {}
        for i in range(len(self.seeds)):
            per_context.setdefault(i % len(self.contexts), []).append(i)
        flat: dict[int, list[bytes]] = {}
        errors: list[BaseException] = []

        def work(c: int, instances: list[int]) -> None:
            ctx = self.contexts[c]
            try:
                with ctx.lock:
                    commit = self._commit_gpu if ctx.hash_on == "gpu" else self._commit_host
                    roots = commit(ctx, instances, stop_at)
                for k, i in enumerate(instances):
                    flat[i] = roots[k]
            except Exception as exc:  # reported by commit(), never lost in a thread (a lost device, ...)
                errors.append(exc)

        if len(per_context) == 1:
            work(0, per_context[0])
        else:
            threads = [threading.Thread(target=work, args=item, name=f"gpu-challenge-{item[0]}")
                       for item in per_context.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if errors:
            raise GpuError(f"the GPU could not compute the challenge: {type(errors[0]).__name__}: {errors[0]}")
        self.product_roots = [flat[i] for i in range(len(self.seeds))]
        self.products = [len(r) for r in self.product_roots]
        self.upper = [gc.upper_levels(r, self.n) for r in self.product_roots]
        return [up[-1][0].hex() for up in self.upper]

    @staticmethod
    def _rounds(schedule: list[tuple[int, int]], stop_at: float | None) -> Iterator[tuple[int, int]]:
        """The rounds of `schedule` while one still fits before stop_at (the caller's loop body is the round,
        waited for): a round is begun only if the last one's time, scaled to its size, fits (the first always
        is)."""
        per_product_s = 0.0
        for t0, count in schedule:
            if stop_at is not None and t0 > 0 and time.perf_counter() + per_product_s * count > stop_at:
                return
            began = time.perf_counter()
            yield t0, count
            per_product_s = (time.perf_counter() - began) / count

    def _cap(self, limit: int, stop_at: float | None) -> int:
        """Products per round: all that fit the batch buffers, or at a roll call ~1/ROUNDS_PER_CHALLENGE of them
        (a round is waited for before the next is begun, so it is where the GPU can stop)."""
        if stop_at is None:
            return limit
        return max(1, min(limit, -(-self.reps // ROUNDS_PER_CHALLENGE)))

    def _commit_gpu(self, ctx: GpuContext, instances: list[int], stop_at: float | None) -> list[list[bytes]]:
        """Per round, for each instance: its products in groups of `slots` (gen, matmul each), one leaf dispatch
        per group, the tree levels down to each product's root, copied out. Without a stop, one read-back of 32
        bytes per product at the end; with one, a read-back per round (that is also the wait)."""
        n, reps, wgpu = self.n, self.reps, ctx.wgpu
        bufs = ctx.buffers(n)
        schedule = self._schedule(self._cap(bufs.batch, stop_at), ramp=stop_at is not None)
        total = len(instances) * reps
        # Steps are copied into the uniform before the pass that reads them (queue writes would all land before
        # the submission; copies are ordered with the passes)
        step_src = ctx.device.create_buffer_with_data(data=self._steps(instances, schedule),
                                                      usage=wgpu.BufferUsage.COPY_SRC)
        roots = ctx.device.create_buffer(size=32 * total, usage=wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC)
        height = n.bit_length() - 1
        done: list[list[bytes]] = [[] for _ in instances]
        for t0, count in self._rounds(schedule, stop_at):
            for k in range(len(instances)):
                encoder = ctx.device.create_command_encoder()
                for g0 in range(t0, t0 + count, bufs.slots):
                    group = min(bufs.slots, t0 + count - g0)
                    for t in range(g0, g0 + group):
                        encoder.copy_buffer_to_buffer(step_src, (k * reps + t) * STEP_BYTES, bufs.step, 0, STEP_BYTES)
                        self._product(encoder, ctx, bufs, t - g0)
                    # the group's first Step names where its leaves go; its rows are consecutive leaves
                    encoder.copy_buffer_to_buffer(step_src, (k * reps + g0) * STEP_BYTES, bufs.step, 0, STEP_BYTES)
                    _dispatch(encoder, ctx.pipelines["leaf"], bufs.groups["leaf"], _grid(group * n // 64))
                source, dest = bufs.leaves, bufs.half
                nodes = count * n
                for _ in range(height):  # each product's n leaves down to its root: aligned subtrees
                    nodes //= 2
                    _dispatch(encoder, ctx.pipelines["node"], ctx.level_group(bufs, source, dest, nodes),
                              _grid(math.ceil(nodes / 64)))
                    source, dest = dest, source
                encoder.copy_buffer_to_buffer(source, 0, roots, (k * reps + t0) * 32, count * 32)
                ctx.device.queue.submit([encoder.finish()])
            if stop_at is not None:  # waits for the round: what is done by the stop is what is committed
                for k in range(len(instances)):
                    done[k] += _digests(ctx.device.queue.read_buffer(roots, (k * reps + t0) * 32, count * 32), count)
        if stop_at is None:
            flat = _digests(ctx.device.queue.read_buffer(roots), total)  # waits for every submission above
            done = [flat[k * reps:(k + 1) * reps] for k in range(len(instances))]
        return done

    def _commit_host(self, ctx: GpuContext, instances: list[int], stop_at: float | None) -> list[list[bytes]]:
        """Each product computed, read back and hashed here (CPU adapters: see GpuContext), a round being one
        product of every instance."""
        bufs = ctx.buffers(self.n)
        schedule = self._schedule(1, ramp=False)
        steps = self._steps(instances, schedule)
        done: list[list[bytes]] = [[] for _ in instances]
        for t, _ in self._rounds(schedule, stop_at):
            for k in range(len(instances)):
                done[k].append(self._compute(ctx, bufs, steps[k * self.reps + t])[1][-1][0])
        return done

    def _compute(self, ctx: GpuContext, bufs: _Buffers, step: np.ndarray) -> tuple[bytes, list[list[bytes]]]:
        """One product into slot 0, read back and hashed here: C_t's bytes and its subtree's levels."""
        ctx.device.queue.write_buffer(bufs.step, 0, step)
        encoder = ctx.device.create_command_encoder()
        self._product(encoder, ctx, bufs, 0)
        ctx.device.queue.submit([encoder.finish()])
        c = bytes(ctx.device.queue.read_buffer(bufs.c, 0, 4 * self.n * self.n))
        return c, _host_levels(c, self.n)

    def open(self, rows: list[Any]) -> list[dict[str, Any]]:
        """rows: [[instance, leaf], ...] as the relay named them; invalid entries raise ValueError."""
        n = self.n
        wanted: dict[tuple[int, int], list[int]] = {}
        for item in rows:
            if (not isinstance(item, list) or len(item) != 2 or not all(type(v) is int for v in item)
                    or not 0 <= item[0] < len(self.upper) or not 0 <= item[1] < n * self.products[item[0]]):
                raise ValueError(f"not an [instance, leaf] of this challenge: {item!r:.60}")
            wanted.setdefault((item[0], item[1] // n), []).append(item[1] % n)
        opened: dict[tuple[int, int], tuple[bytes, list[bytes]]] = {}
        for (i, t), product_rows in wanted.items():
            values, sub = self._recompute(i, t)
            for r in product_rows:
                opened[(i, t * n + r)] = (values[r * 4 * n:(r + 1) * 4 * n], gc.proof(sub, self.upper[i], t, r))
        out = []
        for item in rows:
            values, siblings = opened[(item[0], item[1])]
            out.append({"instance": item[0], "row": item[1], "values": encode_row(np.frombuffer(values, "<f4")),
                        "proof": [s.hex() for s in siblings]})
        return out

    def _recompute(self, i: int, t: int) -> tuple[bytes, list[list[bytes]]]:
        """Product t of instance i again, read back and hashed here: C_t's bytes and its subtree's levels. Its
        root must be the committed one (on the GPU path this also checks the WGSL SHA-256 against hashlib)."""
        n, ctx = self.n, self._ctx(i)
        state = gc.product_state(self.seeds[i], t)
        with ctx.lock:
            c, sub = self._compute(ctx, ctx.buffers(n), np.array([state & 0xFFFFFFFF, state >> 32, n, 0], np.uint32))
        if sub[-1][0] != self.product_roots[i][t]:
            raise GpuError(f"product {t} of instance {i} did not recompute to its committed subtree root: the "
                           "device is not deterministic")
        return c, sub

    def product(self, i: int, t: int) -> np.ndarray:
        """C_t of instance i in full (n x n fp32), recomputed: for tests and for looking into a failed answer."""
        c, _ = self._recompute(i, t)
        return np.frombuffer(c, "<f4").reshape(self.n, self.n)

    def release(self) -> None:
        self.product_roots, self.upper, self.products = [], [], []


def context_for(profile: dict[str, Any]) -> tuple[GpuContext | None, str]:
    """The GpuContext a live session answers GPU challenges with, made once after the GPU probe (shader
    compilation stays outside every timed window), or None where the profile claims no fp32 GPU figure or
    the device cannot be opened; and a line for the operator."""
    gpus = profile.get("gpus") or []
    if not any(isinstance(g, dict) and (g.get("fp32_tflops") or 0) > 0 for g in gpus):
        return None, "no GPU fp32 figure in the profile: this node answers no GPU challenges"
    try:
        context = GpuContext()
    except (GpuError, ImportError) as exc:
        return None, f"the GPU cannot answer challenges ({exc}); its claim will not count"
    except Exception as exc:  # a driver failing in request_device: no GPU answers, not a crashed node
        return None, f"the GPU cannot answer challenges ({type(exc).__name__}: {exc}); its claim will not count"
    return context, f"GPU challenges answered on {context.name} ({context.backend})"
