// The GPU challenge's helpers around matmul_f32.wgsl (capsule/gpu_challenge.py has the protocol):
//   gen   draws A_t and B_t on the GPU, bit for bit what capsule/challenge.py's splitmix64 draws on the relay;
//   leaf  hashes each row of C_t into its Merkle leaf, sha256(0x00 || row as little-endian fp32);
//   node  hashes pairs of nodes into their parent, sha256(0x01 || left || right).
// Why on the GPU: a GPU doing ~17 TFLOP/s does one n = 2048 product in ~1 ms (estimated), while the host takes
// 560 ms to draw its inputs (numpy) and 12.5 ms to hash its 16 MiB (measured on one Xeon core); only 32 bytes
// per product (its subtree root) leave the GPU.
// WGSL has no 64-bit integers: splitmix64 runs on (lo, hi) pairs of u32. Digests are kept as SHA-256's own
// big-endian words (digest byte 0 is the top byte of word 0).

struct Step { state_lo: u32, state_hi: u32, n: u32, leaf_base: u32 }   // one product's: copied in before it
struct Level { count: u32, pad0: u32, pad1: u32, pad2: u32 }            // nodes of the level being written

@group(0) @binding(0) var<storage, read_write> out_a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out_b: array<f32>;
@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read_write> leaves: array<u32>;
@group(0) @binding(5) var<storage, read> src: array<u32>;
@group(0) @binding(6) var<storage, read_write> dst: array<u32>;
@group(0) @binding(7) var<uniform> level: Level;

// ---- splitmix64 on u32 pairs (x = low word, y = high word) ----

fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    // the full 64-bit product of two u32, from 16-bit halves (every partial product fits in a u32)
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = p01 + p10;
    let mid_carry = select(0u, 0x10000u, mid < p01);
    let lo = p00 + (mid << 16u);
    let lo_carry = select(0u, 1u, lo < p00);
    return vec2<u32>(lo, p11 + (mid >> 16u) + mid_carry + lo_carry);
}

fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    // a * b mod 2^64: the cross terms only reach the high word
    let w = mul_wide(a.x, b.x);
    return vec2<u32>(w.x, w.y + a.x * b.y + a.y * b.x);
}

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

fn xor_shr(z: vec2<u32>, s: u32) -> vec2<u32> {
    // z ^ (z >> s), 0 < s < 32
    return vec2<u32>(z.x ^ ((z.x >> s) | (z.y << (32u - s))), z.y ^ (z.y >> s));
}

fn draw(index: u32) -> f32 {
    // draw `index` of the stream started at the product's state: capsule/challenge.py's _uniform_at
    let golden = vec2<u32>(0x7f4a7c15u, 0x9e3779b9u);
    var z = add64(vec2<u32>(step.state_lo, step.state_hi), mul64(vec2<u32>(index + 1u, 0u), golden));
    z = mul64(xor_shr(z, 30u), vec2<u32>(0x1ce4e5b9u, 0xbf58476du));
    z = mul64(xor_shr(z, 27u), vec2<u32>(0x133111ebu, 0x94d049bbu));
    z = xor_shr(z, 31u);
    // the top 24 bits, centred: an integer of magnitude <= 2^23, so the conversion and scaling are exact
    return f32(i32(z.y >> 8u) - 8388608) * (1.0 / 8388608.0);
}

// Grid (n / 64, 2 n): invocation (x, y) draws element x of row y of [A; B], i.e. draw y n + x.
@compute @workgroup_size(64)
fn gen(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = step.n;
    let index = gid.y * n + gid.x;
    if (gid.y < n) {
        out_a[index] = draw(index);
    } else {
        out_b[index - n * n] = draw(index);
    }
}

// ---- SHA-256 ----

const K = array<u32, 64>(
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u);

fn rotr(x: u32, s: u32) -> u32 {
    return (x >> s) | (x << (32u - s));
}

fn initial() -> array<u32, 8> {
    return array<u32, 8>(0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                         0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u);
}

fn sigma0(x: u32) -> u32 {
    return rotr(x, 7u) ^ rotr(x, 18u) ^ (x >> 3u);
}

fn sigma1(x: u32) -> u32 {
    return rotr(x, 17u) ^ rotr(x, 19u) ^ (x >> 10u);
}

fn round(s: ptr<function, array<u32, 8>>, k: u32, w: u32) {
    let a = (*s)[0];
    let e = (*s)[4];
    let t1 = (*s)[7] + (rotr(e, 6u) ^ rotr(e, 11u) ^ rotr(e, 25u)) + ((e & (*s)[5]) ^ (~e & (*s)[6])) + k + w;
    let t2 = (rotr(a, 2u) ^ rotr(a, 13u) ^ rotr(a, 22u)) + ((a & (*s)[1]) ^ (a & (*s)[2]) ^ ((*s)[1] & (*s)[2]));
    (*s)[7] = (*s)[6];
    (*s)[6] = (*s)[5];
    (*s)[5] = e;
    (*s)[4] = (*s)[3] + t1;
    (*s)[3] = (*s)[2];
    (*s)[2] = (*s)[1];
    (*s)[1] = a;
    (*s)[0] = t1 + t2;
}

// One 64-byte block, the message schedule kept in a 16-word ring. (Written out with constant indices instead,
// it ran 3x slower on lavapipe: more code than registers.)
fn compress(h: ptr<function, array<u32, 8>>, block: ptr<function, array<u32, 16>>) {
    var w = *block;
    var s = *h;
    for (var i = 0u; i < 64u; i++) {
        if (i >= 16u) {
            w[i & 15u] += sigma0(w[(i + 1u) & 15u]) + w[(i + 9u) & 15u] + sigma1(w[(i + 14u) & 15u]);
        }
        round(&s, K[i], w[i & 15u]);
    }
    for (var i = 0u; i < 8u; i++) {
        (*h)[i] += s[i];
    }
}

// The message 0x00 || row is shifted one byte against the floats: its word k (big-endian) is the top byte of
// float k - 1 (little-endian) followed by the three low bytes of float k.
fn shifted(prev: u32, cur: u32) -> u32 {
    return (prev & 0xff000000u) | ((cur & 0xffu) << 16u) | (cur & 0xff00u) | ((cur >> 16u) & 0xffu);
}

// One invocation per row of the products side by side in c (grid rows / 64): leaf leaf_base + row. n is a
// multiple of 64, so the 4 n + 1 message bytes fill n / 16 blocks but for one byte, which opens the padding block.
@compute @workgroup_size(64)
fn leaf(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = step.n;
    let row = gid.x;
    if (row * n >= arrayLength(&c)) {
        return;
    }
    let base = row * n;
    var h = initial();
    var block: array<u32, 16>;
    var prev = 0u;
    for (var k0 = 0u; k0 < n; k0 += 16u) {
        for (var j = 0u; j < 16u; j++) {
            let cur = bitcast<u32>(c[base + k0 + j]);
            block[j] = shifted(prev, cur);
            prev = cur;
        }
        compress(&h, &block);
    }
    block[0] = (prev & 0xff000000u) | 0x00800000u;
    for (var j = 1u; j < 15u; j++) {
        block[j] = 0u;
    }
    block[15] = (4u * n + 1u) * 8u;  // the message length in bits (the high word, block[14], is 0)
    compress(&h, &block);
    let out = (step.leaf_base + row) * 8u;
    for (var j = 0u; j < 8u; j++) {
        leaves[out + j] = h[j];
    }
}

// One invocation per parent (grid count / 64, rounded up): dst[j] = sha256(0x01 || src[2j] || src[2j+1]).
@compute @workgroup_size(64)
fn node(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let j = gid.x + gid.y * groups.x * 64u;
    if (j >= level.count) {
        return;
    }
    var d: array<u32, 16>;
    for (var i = 0u; i < 16u; i++) {
        d[i] = src[j * 16u + i];
    }
    var h = initial();
    var block: array<u32, 16>;
    block[0] = 0x01000000u | (d[0] >> 8u);
    for (var k = 1u; k < 16u; k++) {
        block[k] = (d[k - 1u] << 24u) | (d[k] >> 8u);
    }
    compress(&h, &block);
    block[0] = (d[15] << 24u) | 0x00800000u;
    for (var k = 1u; k < 15u; k++) {
        block[k] = 0u;
    }
    block[15] = 65u * 8u;
    compress(&h, &block);
    for (var i = 0u; i < 8u; i++) {
        dst[j * 8u + i] = h[i];
    }
}
