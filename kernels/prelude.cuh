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

// bf16 bits of a float (round to nearest even, NaN kept quiet), whatever the storage type: the
// operands of the bf16 tensor-core instructions.
__device__ __forceinline__ u32 bf16_bits(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (u >> 16) | 0x40u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

// d += A·B on tensor cores for one warp: `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`,
// per-lane fragments as in the PTX ISA (groupID g = lane/4, t = lane%4; two bf16 per register,
// lower column/row in the low half):
//   a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]
//   b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
//   d[0..1] = D[g][2t..2t+1], d[2..3] = D[g+8][2t..2t+1]
// Every lane of the warp must execute it. Inline PTX on the GPU (no header); the emulator
// (kernels/emu/cuda_emu.h, which defines EMU_MMA) exchanges the 32 lanes' fragments and computes
// the same lane mapping on the CPU.
#ifdef EMU_MMA
__device__ __forceinline__ void mma_bf16_16816(float* d, const u32* a, const u32* b) { ::emu::mma_m16n8k16_bf16(d, a, b); }
#else
__device__ __forceinline__ void mma_bf16_16816(float* d, const u32* a, const u32* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// Asynchronous global -> shared copies (sm_80+): cp_async_16 copies 16 bytes (dst and src
// 16-byte aligned), zero-filling the destination past `src_bytes` (0..16; 0 reads nothing);
// cp_async_commit closes a group of the thread's copies; CP_ASYNC_WAIT(n) waits until at most the
// n newest groups are in flight. The data is visible to the issuing thread after its wait and to
// the block after a __syncthreads that follows every thread's wait. The emulator
// (kernels/emu/cuda_emu.h, EMU_CP_ASYNC) performs each copy inside the issuing thread's wait.
#ifdef EMU_CP_ASYNC
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, unsigned src_bytes) { ::emu::cp_async_16(dst, src, src_bytes); }
__device__ __forceinline__ void cp_async_commit() { ::emu::cp_async_commit(); }
#define CP_ASYNC_WAIT(n) ::emu::cp_async_wait(n)
#else
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, unsigned src_bytes) {
    asm volatile("{\n .reg .u64 a;\n .reg .u32 s;\n cvta.to.shared.u64 a, %0;\n cvt.u32.u64 s, a;\n"
                 " cp.async.cg.shared.global [s], [%1], 16, %2;\n}"
                 :: "l"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
#define CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory")
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
