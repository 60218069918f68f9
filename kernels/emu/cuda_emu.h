// The CUDA emulation header: lets `kernels/prelude.cuh` + `kernels/*.cu` compile as C++17 with
// the host compiler, unchanged, so the emulated device (src/tensor/emu) runs the very kernels
// the GPU runs. Included (by the generated units of build.rs) before the prelude.
//
// Execution model (kernels/emu/runtime.cpp): every CUDA thread of a block is a real thread of
// control — a fiber (normal build; one OS thread runs a whole block) or an OS thread
// (EMU_OS_THREADS=1: the AddressSanitizer / ThreadSanitizer builds) — and `__syncthreads`,
// warp shuffles and votes are real rendezvous among them. Nothing here changes an algorithm.
//
// Conventions shared with NVRTC:
// - `__shared__` variables are per block: `static thread_local` with fibers (a block runs on one
//   OS thread, one block at a time per OS thread), `static` with OS threads (then one block runs
//   at a time in the whole process).
// - dynamic shared memory is declared `DYNAMIC_SHARED(float, sh);` (the prelude defines it as
//   `extern __shared__ float sh[]` for NVRTC); here it is the launch's per-block allocation.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <utility>
#include <vector>

#undef INFINITY  // the prelude defines its own (CUDA has no <math.h>)

#ifndef EMU_OS_THREADS
#define EMU_OS_THREADS 0
#endif

#define __global__
#define __device__ static  // per module, as a CUDA module: no clashes between files
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#if EMU_OS_THREADS
#define __shared__ static
#else
#define __shared__ static thread_local
#endif
#define DYNAMIC_SHARED(T, name) T* name = (T*)::emu::dynamic_shared()
#define EMU_MMA 1  // the prelude's mma_bf16_16816 calls emu::mma_m16n8k16_bf16
#define EMU_CP_ASYNC 1  // the prelude's cp_async_16 / commit / wait call emu::cp_async_*

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };

namespace emu {
// What the kernel sees of its block and its thread (the runtime extends both).
struct BlockInfo {
    uint3 bid;
    dim3 bdim, gdim;
    void* dyn;
};
// A cp.async copy issued by a thread and not yet waited for (see cp_async_16 below).
struct PendingCopy {
    char* dst;
    const char* src;
    unsigned src_bytes, group;
};
struct ThreadInfo {
    uint3 tid;
    unsigned linear, lane, warp;
    BlockInfo* blk;
    std::vector<PendingCopy> pending;  // this thread's cp.async copies in flight
    unsigned committed = 0;            // cp.async.commit_group count
};
// The CUDA thread running on this OS thread now (the fiber scheduler switches it).
extern thread_local ThreadInfo* cur;

inline void* dynamic_shared() { return cur->blk->dyn; }
// Block-wide barrier; the call site identifies it (divergent barriers are reported).
void syncthreads(const char* file, int line);
// Warp rendezvous of the lanes in `mask`: deposits `value`, returns after every lane of `mask`
// arrived, with all 32 deposited values in `out`. `op` names the intrinsic for error messages.
void warp_exchange(unsigned mask, uint64_t value, uint64_t* out, const char* op);
// Aborts the block with an error message (the launch reports it with the kernel's name).
[[noreturn]] void fail(const char* fmt, ...);

enum ShflMode { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_BFLY };

// PTX `shfl.sync` semantics (CUDA's __shfl_*_sync with `width` = c operand ((32-w)<<8)|clamp).
template <class T>
inline T shfl(ShflMode mode, unsigned mask, T var, int b, int width) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 64 bits");
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail("shuffle width %d is not a power of two in 1..32", width);
    uint64_t bits = 0, all[32];
    memcpy(&bits, &var, sizeof(T));
    warp_exchange(mask, bits, all, "__shfl_sync");
    int lane = (int)cur->lane;
    int segmask = (32 - width) & 0x1f;
    int cval = mode == SHFL_UP ? 0 : 0x1f;
    int max_lane = (lane & segmask) | (cval & ~segmask);
    int min_lane = lane & segmask;
    int j = lane;
    bool ok = false;
    switch (mode) {
        case SHFL_UP: j = lane - b; ok = j >= max_lane; break;
        case SHFL_DOWN: j = lane + b; ok = j <= max_lane; break;
        case SHFL_BFLY: j = lane ^ (b & 0x1f); ok = j <= max_lane; break;
        case SHFL_IDX: j = min_lane | (b & 0x1f & ~segmask); ok = j <= max_lane; break;
    }
    if (!ok) j = lane;
    if (!((mask >> j) & 1u)) fail("shuffle by lane %d reads lane %d, which is not in mask 0x%08x", lane, j, mask);
    T r;
    memcpy(&r, &all[j], sizeof(T));
    return r;
}
// Tensor cores: `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` (d += A·B) for the
// calling lane. The whole warp must call it (a full-mask rendezvous: a missing lane is a
// reported deadlock, a partial warp an error); each lane deposits its A and B registers, the
// 16x16 A and 16x8 B are assembled by the PTX ISA fragment tables (groupID g = lane/4,
// threadID_in_group t = lane%4, two bf16 per 32-bit register, the lower index in the low half):
//   A: reg0 = A[g][2t,2t+1], reg1 = A[g+8][2t,2t+1], reg2 = A[g][2t+8,2t+9], reg3 = A[g+8][2t+8,2t+9]
//   B: reg0 = B[2t,2t+1][g], reg1 = B[2t+8,2t+9][g]
//   C/D (f32): d0 = D[g][2t], d1 = D[g][2t+1], d2 = D[g+8][2t], d3 = D[g+8][2t+1]
// and the lane's four outputs are computed in fp32 (bf16 products are exact in fp32) in k order.
inline float bf16_lo(uint32_t r) { float f; uint32_t u = r << 16; memcpy(&f, &u, 4); return f; }
inline float bf16_hi(uint32_t r) { float f; uint32_t u = r & 0xffff0000u; memcpy(&f, &u, 4); return f; }
inline void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b) {
    uint64_t a01[32], a23[32], bb[32];
    warp_exchange(0xffffffffu, (uint64_t)a[0] | ((uint64_t)a[1] << 32), a01, "mma.sync");
    warp_exchange(0xffffffffu, (uint64_t)a[2] | ((uint64_t)a[3] << 32), a23, "mma.sync");
    warp_exchange(0xffffffffu, (uint64_t)b[0] | ((uint64_t)b[1] << 32), bb, "mma.sync");
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        uint32_t r[4] = {(uint32_t)a01[l], (uint32_t)(a01[l] >> 32), (uint32_t)a23[l], (uint32_t)(a23[l] >> 32)};
        for (int i = 0; i < 4; i++) {
            int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
            A[row][col] = bf16_lo(r[i]);
            A[row][col + 1] = bf16_hi(r[i]);
        }
        uint32_t q[2] = {(uint32_t)bb[l], (uint32_t)(bb[l] >> 32)};
        for (int i = 0; i < 2; i++) {
            B[2 * t + 8 * i][g] = bf16_lo(q[i]);
            B[2 * t + 8 * i + 1][g] = bf16_hi(q[i]);
        }
    }
    int g = (int)cur->lane >> 2, t = (int)cur->lane & 3;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float s = d[i];
        for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
        d[i] = s;
    }
}
// Asynchronous copies (sm_80 `cp.async.cg.shared.global [dst], [src], 16, src_bytes` with
// `cp.async.commit_group` / `cp.async.wait_group n`). On the GPU the 16 bytes land in shared
// memory at some moment between the issue and the wait that completes their group, so the model
// takes the latest one: the copy is queued by the issuing thread and performed by it (reading
// the global source, zero-filling past src_bytes) inside its wait_group. Hence a thread that
// reads the destination before its wait sees the old contents (wrong numbers in a parity test),
// and another thread that reads it after the wait without a __syncthreads between races with the
// issuing thread's write (reported by ThreadSanitizer in the OS-thread engine), as on the GPU.
// Not modelled: a source changed between the issue and the wait (the GPU may read either).
inline void cp_async_16(void* dst, const void* src, unsigned src_bytes) {
    if ((uintptr_t)dst % 16 || (src_bytes && (uintptr_t)src % 16))
        fail("cp.async: 16-byte copy with a misaligned address (dst %p, src %p)", dst, src);
    if (src_bytes > 16) fail("cp.async: src-size %u > 16", src_bytes);
    cur->pending.push_back(PendingCopy{(char*)dst, (const char*)src, src_bytes, cur->committed});
}
inline void cp_async_commit() { cur->committed++; }
// Complete every committed group but the newest n.
inline void cp_async_wait(unsigned n) {
    unsigned done = cur->committed > n ? cur->committed - n : 0;
    std::vector<PendingCopy>& q = cur->pending;
    size_t keep = 0;
    for (size_t i = 0; i < q.size(); i++) {
        if (q[i].group < done) {
            memcpy(q[i].dst, q[i].src, q[i].src_bytes);
            memset(q[i].dst + q[i].src_bytes, 0, 16 - q[i].src_bytes);
        } else {
            q[keep++] = q[i];
        }
    }
    q.resize(keep);
}
inline unsigned vote_ballot(unsigned mask, int pred) {
    uint64_t all[32];
    warp_exchange(mask, pred ? 1 : 0, all, "vote");
    unsigned r = 0;
    for (int l = 0; l < 32; l++)
        if (((mask >> l) & 1u) && all[l]) r |= 1u << l;
    return r;
}
}  // namespace emu

#define threadIdx (::emu::cur->tid)
#define blockIdx (::emu::cur->blk->bid)
#define blockDim (::emu::cur->blk->bdim)
#define gridDim (::emu::cur->blk->gdim)
#define warpSize 32
#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)

template <class T> inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return emu::shfl(emu::SHFL_IDX, m, v, src, w); }
template <class T> inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return emu::shfl(emu::SHFL_UP, m, v, (int)d, w); }
template <class T> inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return emu::shfl(emu::SHFL_DOWN, m, v, (int)d, w); }
template <class T> inline T __shfl_xor_sync(unsigned m, T v, int lm, int w = 32) { return emu::shfl(emu::SHFL_BFLY, m, v, lm, w); }
inline unsigned __ballot_sync(unsigned m, int p) { return emu::vote_ballot(m, p); }
inline int __all_sync(unsigned m, int p) { return emu::vote_ballot(m, p) == m; }
inline int __any_sync(unsigned m, int p) { return emu::vote_ballot(m, p) != 0; }
inline void __syncwarp(unsigned m = 0xffffffffu) { uint64_t all[32]; emu::warp_exchange(m, 0, all, "__syncwarp"); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline void __trap() { emu::fail("__trap() called"); }

// Bit casts and fast math (the GPU's approximate intrinsics are the libm functions here).
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
template <class T> inline T __ldg(const T* p) { return *p; }

// Atomics: real (relaxed, as CUDA's) atomic read-modify-writes on host memory.
#define EMU_ATOMIC_INT(T)                                                                              \
    inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }              \
    inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }              \
    inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }              \
    inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }                \
    inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }              \
    inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }            \
    inline T atomicCAS(T* p, T cmp, T v) {                                                             \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);           \
        return cmp;                                                                                    \
    }                                                                                                  \
    inline T atomicMin(T* p, T v) {                                                                    \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                  \
        while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return old;                                                                                    \
    }                                                                                                  \
    inline T atomicMax(T* p, T v) {                                                                    \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                  \
        while (v > old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return old;                                                                                    \
    }
EMU_ATOMIC_INT(int)
EMU_ATOMIC_INT(unsigned)
EMU_ATOMIC_INT(unsigned long long)
#undef EMU_ATOMIC_INT
inline float atomicAdd(float* p, float v) {
    unsigned* u = (unsigned*)p;
    unsigned old = __atomic_load_n(u, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(u, &old, __float_as_uint(__uint_as_float(old) + v), true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return __uint_as_float(old);
}
inline float atomicExch(float* p, float v) {
    return __uint_as_float(__atomic_exchange_n((unsigned*)p, __float_as_uint(v), __ATOMIC_RELAXED));
}

// ---- launch thunks: one table entry per `extern "C" __global__` (generated by build.rs) ----
namespace emu {
// One argument from the host: tag ('p' pointer, 'i' int, 'u' unsigned, 'l' long long,
// 'U' unsigned long long, 'f' float) and its bits.
struct Arg {
    uint32_t tag;
    uint64_t bits;
};
struct Entry {
    const char* name;
    const char* file;
    void (*fn)();
    unsigned nparams;
    const char* tags;  // nparams tags
    void (*invoke)(void (*)(), const Arg*);
};
template <class T> struct Tag;
template <class T> struct Tag<T*> { static constexpr char c = 'p'; };
template <> struct Tag<int> { static constexpr char c = 'i'; };
template <> struct Tag<unsigned> { static constexpr char c = 'u'; };
template <> struct Tag<long long> { static constexpr char c = 'l'; };
template <> struct Tag<unsigned long long> { static constexpr char c = 'U'; };
template <> struct Tag<float> { static constexpr char c = 'f'; };
template <class T> inline T unpack(const Arg& a) {
    if constexpr (Tag<T>::c == 'p') {
        return (T)(uintptr_t)a.bits;
    } else {
        T v;
        memcpy(&v, &a.bits, sizeof(T));
        return v;
    }
}
template <class... P, size_t... I>
inline void invoke_seq(void (*f)(P...), const Arg* a, std::index_sequence<I...>) {
    f(unpack<P>(a[I])...);
}
template <class... P> void invoke(void (*f)(), const Arg* a) {
    invoke_seq(reinterpret_cast<void (*)(P...)>(f), a, std::index_sequence_for<P...>{});
}
template <class... P> struct Tags { static constexpr char s[sizeof...(P) + 1] = {Tag<P>::c..., 0}; };
template <class... P> Entry make_entry(const char* name, const char* file, void (*f)(P...)) {
    return Entry{name, file, reinterpret_cast<void (*)()>(f), (unsigned)sizeof...(P), Tags<P...>::s, &invoke<P...>};
}
}  // namespace emu
