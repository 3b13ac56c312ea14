// Device memory bandwidth: dst = src over vec4<f32>, one element per invocation. Bytes moved per
// element = 32 (16 read + 16 written). A 2D grid lifts the 65535-workgroups-per-dimension limit.

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i < arrayLength(&src)) {
        dst[i] = src[i];
    }
}
