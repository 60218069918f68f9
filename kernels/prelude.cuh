// Prelude prepended by the Rust side to every kernels/*.cu before NVRTC (or the emulator's host
// C++ compiler) compiles it (no CUDA headers are included anywhere). Every file is compiled
// twice, once per storage type of activations and weights (`act_t`):
//   default   act_t = bf16 as raw 16-bit storage with our own round-to-nearest-even conversions;
//   ACT_F32   act_t = float, every rounding to the storage type a no-op (the fp32 mode that is
//             checked against the CPU engine to 1e-4).
// Entry points are declared `KERNEL(name)` and get the suffix `_bf16` / `_f32`. Arithmetic is fp32
// in both variants; a2f / f2a convert storage <-> float.
typedef unsigned int u32;
typedef unsigned long long u64;
#define INFINITY __int_as_float(0x7f800000)
// Dynamic shared memory of the launch (`<<<grid, block, bytes>>>`): `DYNAMIC_SHARED(float, sh);`.
// The emulator (kernels/emu/cuda_emu.h) defines it as the block's own allocation.
#ifndef DYNAMIC_SHARED
#define DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

// The storage-dependent helpers carry the suffix too (`a2f` is `a2f_bf16` or `a2f_f32`), so the
// two builds of a file never define one symbol twice when linked into one host library.
#ifdef ACT_F32
typedef float act_t;
#define KERNEL(name) name##_f32
#define a2f a2f_f32
#define f2a f2a_f32
__device__ __forceinline__ float a2f(act_t h) { return h; }
__device__ __forceinline__ act_t f2a(float f) { return f; }
#else
typedef unsigned short act_t;
#define KERNEL(name) name##_bf16
#define a2f a2f_bf16
#define f2a f2a_bf16
__device__ __forceinline__ float a2f(act_t h) { return __uint_as_float(((u32)h) << 16); }
__device__ __forceinline__ act_t f2a(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (act_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (act_t)(u >> 16);
}
#endif

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x * sigmoidf_(x); }
// d SiLU(z)/dz = σ(z)(1 + z(1 − σ(z))) (backward kernels).
__device__ __forceinline__ float silu_gradf_(float z) { float s = sigmoidf_(z); return s * (1.0f + z * (1.0f - s)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum; every thread gets the result. `scratch` holds >= 32 floats. blockDim % 32 == 0.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[wid] = v;
    __syncthreads();
    float r = lane < nw ? scratch[lane] : 0.0f;
    return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[wid] = v;
    __syncthreads();
    float r = lane < nw ? scratch[lane] : -INFINITY;
    return warp_max(r);
}
