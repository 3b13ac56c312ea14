// C = A * B for n x n row-major fp32 matrices, n a multiple of 64.
// A 16x16 workgroup computes a 64x64 tile of C, each invocation a 4x4 block held in registers; the
// K dimension is walked 16 at a time through workgroup memory. 256 invocations per workgroup: the
// WebGPU minimum limit, so the same shader runs on phones, browsers and servers.

struct Params { n: u32 }

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

const TILE: u32 = 64u;
const KT: u32 = 16u;
var<workgroup> a_tile: array<f32, 1024>; // 64 rows x 16
var<workgroup> b_tile: array<f32, 1024>; // 16 x 64 columns

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let n = params.n;
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let flat = lid.y * 16u + lid.x;
    var acc: array<f32, 16>;
    for (var k0 = 0u; k0 < n; k0 += KT) {
        for (var i = 0u; i < 4u; i++) {
            let e = flat + i * 256u;
            a_tile[e] = a[(row0 + e / KT) * n + k0 + e % KT];
            b_tile[e] = b[(k0 + e / TILE) * n + col0 + e % TILE];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < KT; kk++) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                av[i] = a_tile[(lid.y * 4u + i) * KT + kk];
                bv[i] = b_tile[kk * TILE + lid.x * 4u + i];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] += av[i] * bv[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
            c[(row0 + lid.y * 4u + i) * n + col0 + lid.x * 4u + j] = acc[i * 4u + j];
        }
    }
}
