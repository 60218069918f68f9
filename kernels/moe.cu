// Sparse MoE on device: router softmax + top-k + renormalisation (with the routing record) fused
// with the per-expert count; grouping of (token, slot) pairs by expert in one block (parallel
// scan of the counts, the GEMM's tile list built from them, scatter); grouped expert GEMMs over
// that tile list — bf16 tensor cores (`mma.sync` m16n8k16, fp32 accumulation) for tiles of up
// to 64 rows, a weight-streaming tensor-core path for tiles of up to 16 rows (decode), and plain
// fp32 FMA tiles (the f32 build's path); SwiGLU; the weighted combine of the top-k expert outputs
// with the gated shared expert.

#define MOE_E_MAX 1024
#define MOE_K_MAX 32
// One warp per token: p = softmax(logits[t]) (f32), top-k by repeated warp argmax (ties: lower
// index, like torch.topk on CPU), w = p_top / Σ p_top. Optionally `forced` [T, k] replays a
// recorded routing (R3): then the same experts are used with weights from the current p.
// idx [T, k] int, w [T, k] f32. block = 128 (4 tokens per block). When `counts` [E] is given
// (zero on entry; moe_scan_scatter zeroes it again after use) each chosen expert is counted
// here: route and count are one launch.
extern "C" __global__ void KERNEL(router_topk)(const float* __restrict__ logits, int* __restrict__ idx,
                                       float* __restrict__ wts, const int* __restrict__ forced,
                                       int* __restrict__ counts, int T, int E, int K) {
    int lane = threadIdx.x & 31;
    int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    const float* lg = logits + (long long)t * E;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, lg[e]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += expf(lg[e] - mx);
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    u32 taken = 0u;  // lane-local bitmap: bit n set when expert lane + 32n is taken (E <= 1024)
    float tot = 0.0f;
    float pk[MOE_K_MAX]; int ik[MOE_K_MAX];
    for (int k = 0; k < K; k++) {
        float best = -1.0f; int bi = 0x7fffffff;
        if (forced) {
            bi = forced[(long long)t * K + k];
            best = (bi >= 0 && bi < E) ? expf(lg[bi] - mx) * inv : 0.0f;
        } else {
            for (int e = lane, n = 0; e < E; e += 32, n++) {
                if (taken & (1u << n)) continue;
                float p = expf(lg[e] - mx) * inv;
                if (p > best || (p == best && e < bi)) { best = p; bi = e; }
            }
            for (int o = 16; o > 0; o >>= 1) {
                float pb = __shfl_xor_sync(0xffffffffu, best, o);
                int ib = __shfl_xor_sync(0xffffffffu, bi, o);
                if (pb > best || (pb == best && ib < bi)) { best = pb; bi = ib; }
            }
            if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        }
        pk[k] = best; ik[k] = bi; tot += best;
    }
    if (lane == 0) {
        for (int k = 0; k < K; k++) {
            idx[(long long)t * K + k] = ik[k];
            wts[(long long)t * K + k] = a2f(f2a(pk[k] / tot));
            if (counts && ik[k] >= 0 && ik[k] < E) atomicAdd(&counts[ik[k]], 1);
        }
    }
}

// counts[e] = number of (t, k) pairs routed to e. counts must be zeroed. grid-stride over T*K.
extern "C" __global__ void KERNEL(moe_count)(const int* __restrict__ idx, int* __restrict__ counts, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        atomicAdd(&counts[idx[i]], 1);
}

// Grouping in one block (blockDim a multiple of 32, >= E, E <= MOE_E_MAX), after the counts:
//   offsets[0..=E] = exclusive scan of counts (warp shuffles, then one warp over the warp sums);
//   the GEMM's tile list: expert e owns ceil(counts[e] / tile_m) tiles, written in expert order
//     as (e, first row) pairs to tiles[2·j], tiles[2·j+1]; *ntiles = their number;
//   perm[row] = pair index (t·K + k) of each grouped row and row_of_pair[pair] = row (rows within
//     a group in arrival order of a shared-memory cursor: each row is independent, the combine
//     sums by pair index, so the result does not depend on it);
//   counts zeroed again for the next routing.
extern "C" __global__ void KERNEL(moe_scan_scatter)(const int* __restrict__ idx, int* __restrict__ counts,
                                            int* __restrict__ offsets, int* __restrict__ perm,
                                            int* __restrict__ row_of_pair, int* __restrict__ tiles,
                                            int* __restrict__ ntiles, long long n, int E, int tile_m) {
    __shared__ int cursor[MOE_E_MAX];
    __shared__ int wrow[32], wtile[32];
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
    int c = tid < E ? counts[tid] : 0;
    int nt = (c + tile_m - 1) / tile_m;
    int ic = c, it = nt;  // inclusive scans within the warp
    for (int o = 1; o < 32; o <<= 1) {
        int a = __shfl_up_sync(0xffffffffu, ic, o), b = __shfl_up_sync(0xffffffffu, it, o);
        if (lane >= o) { ic += a; it += b; }
    }
    if (lane == 31) { wrow[w] = ic; wtile[w] = it; }
    __syncthreads();
    if (w == 0) {
        int a = lane < nw ? wrow[lane] : 0, b = lane < nw ? wtile[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int x = __shfl_up_sync(0xffffffffu, a, o), y = __shfl_up_sync(0xffffffffu, b, o);
            if (lane >= o) { a += x; b += y; }
        }
        wrow[lane] = a; wtile[lane] = b;  // inclusive over warps
    }
    __syncthreads();
    int off = (w > 0 ? wrow[w - 1] : 0) + ic - c;
    int toff = (w > 0 ? wtile[w - 1] : 0) + it - nt;
    if (tid < E) {
        offsets[tid] = off;
        cursor[tid] = off;
        for (int j = 0; j < nt; j++) { tiles[2 * (toff + j)] = tid; tiles[2 * (toff + j) + 1] = off + j * tile_m; }
        counts[tid] = 0;
    }
    if (tid == E - 1) { offsets[E] = off + c; *ntiles = toff + nt; }
    __syncthreads();
    for (long long i = tid; i < n; i += blockDim.x) {
        int r = atomicAdd(&cursor[idx[i]], 1);
        perm[r] = (int)i;
        row_of_pair[i] = r;
    }
}

// The row of the input that grouped row `row` reads: the token row x[perm[row] / topk] when
// `gather`, else the grouped row itself.
__device__ __forceinline__ long long moe_src_row(const int* perm, int gather, int topk, int row) {
    return gather ? (long long)(perm[row] / topk) : (long long)row;
}

#define GT 64   // output tile (rows x cols)
#define GK 32   // k step
// Grouped GEMM, plain fp32 FMA (the f32 build's path): tile j = blockIdx.y of the device tile
// list (blocks past *ntiles exit), rows r0 .. min(r0 + tile_m, offsets[e+1]) of expert e:
//   out[row, n] = Σ_k in(row)[k] · W[e][n, k]        (W: [E, N, Kd] act_t, nn.Linear layout)
// in(row) = x[perm[row] / topk] when `gather` (token rows), else x[row] (already grouped rows).
// out is [rows_total, N] act_t. grid = (ceil(N/GT), max tiles), block = 256, tile_m <= GT.
// Each thread computes a 4x4 sub-tile.
extern "C" __global__ void KERNEL(grouped_gemm)(const act_t* __restrict__ x, const act_t* __restrict__ W,
                                        act_t* __restrict__ out, const int* __restrict__ offsets,
                                        const int* __restrict__ perm, const int* __restrict__ tiles,
                                        const int* __restrict__ ntiles, int gather, int topk,
                                        int N, int Kd, int tile_m) {
    __shared__ float xs[GT][GK + 1];
    __shared__ float ws[GT][GK + 1];
    int j = blockIdx.y;
    if (j >= *ntiles) return;
    int e = tiles[2 * j], r0 = tiles[2 * j + 1], rend = min(r0 + tile_m, offsets[e + 1]);
    int n0 = blockIdx.x * GT;
    const act_t* We = W + (long long)e * N * Kd;
    int tr = (threadIdx.x / 16) * 4, tc = (threadIdx.x % 16) * 4;
    float acc[4][4];
    for (int a = 0; a < 4; a++) for (int c = 0; c < 4; c++) acc[a][c] = 0.0f;
    for (int k0 = 0; k0 < Kd; k0 += GK) {
        for (int p = threadIdx.x; p < GT * GK; p += blockDim.x) {
            int rr = p / GK, kk = p % GK, row = r0 + rr, k = k0 + kk;
            float xv = 0.0f;
            if (row < rend && k < Kd) xv = a2f(x[moe_src_row(perm, gather, topk, row) * Kd + k]);
            xs[rr][kk] = xv;
            int n = n0 + rr;
            ws[rr][kk] = (n < N && k < Kd) ? a2f(We[(long long)n * Kd + k]) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < GK; kk++) {
            float xa[4], wb[4];
            for (int a = 0; a < 4; a++) xa[a] = xs[tr + a][kk];
            for (int c = 0; c < 4; c++) wb[c] = ws[tc + c][kk];
            for (int a = 0; a < 4; a++) for (int c = 0; c < 4; c++) acc[a][c] += xa[a] * wb[c];
        }
        __syncthreads();
    }
    for (int a = 0; a < 4; a++) {
        int row = r0 + tr + a;
        if (row >= rend) continue;
        for (int c = 0; c < 4; c++) { int n = n0 + tc + c; if (n < N) out[(long long)row * N + n] = f2a(acc[a][c]); }
    }
}

// Two consecutive k elements of a row as one bf16x2 register (lower k in the low half), zero
// past Kd. In the f32 build the values are rounded to bf16 (the tensor-core GEMM is bf16).
__device__ __forceinline__ u32 moe_pair(const act_t* row, int k, int Kd) {
    u32 lo = k < Kd ? bf16_bits(a2f(row[k])) : 0u;
    u32 hi = k + 1 < Kd ? bf16_bits(a2f(row[k + 1])) : 0u;
    return lo | (hi << 16);
}

#define MOE_SWIGLU 1
#define MOE_NO_CP_ASYNC 2
#define MT 64   // tensor-core tile: 64 rows x 64 cols, 4 warps as 2 x 2 (32 x 32 each)
#define MK 32   // k step staged in shared memory (two k16 mma steps)
#define MKP 40  // padded shared row (bf16 elements)
// Grouped GEMM on tensor cores (same contract as grouped_gemm; tile_m <= MT): per k step the
// tile's 64 input rows (gathered through perm) and 64 weight rows are staged as bf16 in shared
// memory; each warp computes 32 x 32 outputs as 2 x 4 mma.sync m16n8k16 fragments (PTX ISA
// fragment layouts: A row-major from the input rows, B "col" = weight rows, which are k-major).
// Warps whose 32 rows lie past the tile's rows skip their mma. grid = (ceil(N/64), max tiles),
// block = 128. `flags`: MOE_SWIGLU (below), MOE_NO_CP_ASYNC (stage by plain stores: the
// `cp-async` run-time switch, tensor::cuda::switches).
// MOE_SWIGLU (W = the fused gate|up weights [E, 2N, Kd]): the output is act [rows, N] =
// act_t(SiLU(g)) · u of the bf16-rounded g = x·W[c], u = x·W[N + c] (the swiglu kernel's
// rounding), computed in the epilogue — the gate|up rows never go to memory. A block then covers
// 32 act columns: its 64 staged weight rows are gate/up/gate/up in 16-row groups, so each warp's
// four fragments hold gate and up of the same 16 columns. grid = (ceil(N/32), max tiles).
__device__ __forceinline__ float swiglu_pair(float g, float u) { return a2f(f2a(siluf_(a2f(f2a(g))))) * a2f(f2a(u)); }
// The weight row staged in row r of a 64-row B tile whose first output column is n0.
__device__ __forceinline__ int moe_wrow(int r, int n0, int N, int swiglu) {
    if (!swiglu) return n0 + r;
    int q = r >> 4, c = n0 + ((q >> 1) << 4) + (r & 15);
    return c < N ? c + (q & 1) * N : 2 * N;  // 2N: past the weights (zero)
}
// Stage k step k0 of a tensor-core tile into shared A (64 input rows, gathered through perm) and
// B (64 weight rows, moe_wrow order), zero past the tile's rows, the weights and Kd. bf16 build
// with Kd % 8 == 0 and 16-byte aligned x, W, unless `plain`: 16-byte cp.async copies (8 bf16,
// zero-filled past Kd), completed by the caller's CP_ASYNC_WAIT; otherwise (f32 build, other
// Kd, `plain`) converted pairs by plain stores.
__device__ __forceinline__ void moe_stage(unsigned short (*as)[MKP], unsigned short (*bs)[MKP],
                                          const act_t* __restrict__ x, const act_t* __restrict__ We,
                                          const int* __restrict__ perm, int gather, int topk, int r0, int rend,
                                          int n0, int N, int wrows, int Kd, int k0, int swiglu, int plain) {
#ifndef ACT_F32
    if (!plain && (Kd & 7) == 0 && (((u64)x | (u64)We) & 15) == 0) {
        for (int p = threadIdx.x; p < 2 * MT * (MK / 8); p += blockDim.x) {
            int wt = p >= MT * (MK / 8), q = p % (MT * (MK / 8)), rr = q / (MK / 8), kk = (q % (MK / 8)) * 8;
            const act_t* src;
            bool ok;
            if (!wt) {
                int row = r0 + rr;
                ok = row < rend;
                src = ok ? x + moe_src_row(perm, gather, topk, row) * Kd : x;
            } else {
                int n = moe_wrow(rr, n0, N, swiglu);
                ok = n < wrows;
                src = ok ? We + (long long)n * Kd : We;
            }
            int valid = ok ? max(0, min(8, Kd - (k0 + kk))) : 0;
            cp_async_16(wt ? &bs[rr][kk] : &as[rr][kk], valid ? src + k0 + kk : src, (unsigned)valid * 2u);
        }
        return;
    }
#endif
    for (int p = threadIdx.x; p < MT * (MK / 2); p += blockDim.x) {
        int rr = p / (MK / 2), kk = (p % (MK / 2)) * 2, row = r0 + rr, n = moe_wrow(rr, n0, N, swiglu);
        u32 xa = row < rend ? moe_pair(x + moe_src_row(perm, gather, topk, row) * Kd, k0 + kk, Kd) : 0u;
        u32 wb = n < wrows ? moe_pair(We + (long long)n * Kd, k0 + kk, Kd) : 0u;
        as[rr][kk] = (unsigned short)(xa & 0xffffu); as[rr][kk + 1] = (unsigned short)(xa >> 16);
        bs[rr][kk] = (unsigned short)(wb & 0xffffu); bs[rr][kk + 1] = (unsigned short)(wb >> 16);
    }
}
extern "C" __global__ void KERNEL(grouped_gemm_mma)(const act_t* __restrict__ x, const act_t* __restrict__ W,
                                            act_t* __restrict__ out, const int* __restrict__ offsets,
                                            const int* __restrict__ perm, const int* __restrict__ tiles,
                                            const int* __restrict__ ntiles, int gather, int topk,
                                            int N, int Kd, int tile_m, int flags) {
    alignas(16) __shared__ unsigned short as[2][MT][MKP];  // double-buffered k steps
    alignas(16) __shared__ unsigned short bs[2][MT][MKP];
    int swiglu = flags & MOE_SWIGLU, plain = flags & MOE_NO_CP_ASYNC;
    int j = blockIdx.y;
    if (j >= *ntiles) return;
    int e = tiles[2 * j], r0 = tiles[2 * j + 1], rend = min(r0 + tile_m, offsets[e + 1]);
    int n0 = blockIdx.x * (swiglu ? MT / 2 : MT), wrows = swiglu ? 2 * N : N;
    const act_t* We = W + (long long)e * wrows * Kd;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;  // the warp's sub-tile
    int g = lane >> 2, tq = lane & 3;                 // PTX groupID, threadID_in_group
    bool active = r0 + wm < rend;                     // warp-uniform
    // accumulators in registers: every index into acc, af, bfr below is a compile-time constant
    // (fully unrolled loops of constant trip count; the kernel resource audit fails on a frame)
    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.0f;
    // k steps double-buffered: step s+1 is staged (cp.async) while step s is multiplied
    int nk = (Kd + MK - 1) / MK;
    moe_stage(as[0], bs[0], x, We, perm, gather, topk, r0, rend, n0, N, wrows, Kd, 0, swiglu, plain);
    cp_async_commit();  // group 0: step 0
    for (int s = 0; s < nk; s++) {
        int buf = s & 1;
        if (s + 1 < nk)
            moe_stage(as[buf ^ 1], bs[buf ^ 1], x, We, perm, gather, topk, r0, rend, n0, N, wrows, Kd,
                      (s + 1) * MK, swiglu, plain);
        cp_async_commit();  // group s+1 (empty on the last step)
        CP_ASYNC_WAIT(1);   // groups <= s, i.e. step s's copies of this thread, have landed
        __syncthreads();    // ... and every thread's
        if (active) {
#pragma unroll
            for (int ks = 0; ks < MK; ks += 16) {
                u32 af[2][4], bfr[4][2];
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    int ra = wm + mi * 16 + g, c0 = ks + 2 * tq;
                    af[mi][0] = as[buf][ra][c0] | ((u32)as[buf][ra][c0 + 1] << 16);
                    af[mi][1] = as[buf][ra + 8][c0] | ((u32)as[buf][ra + 8][c0 + 1] << 16);
                    af[mi][2] = as[buf][ra][c0 + 8] | ((u32)as[buf][ra][c0 + 9] << 16);
                    af[mi][3] = as[buf][ra + 8][c0 + 8] | ((u32)as[buf][ra + 8][c0 + 9] << 16);
                }
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    int nb = wn + ni * 8 + g, c0 = ks + 2 * tq;
                    bfr[ni][0] = bs[buf][nb][c0] | ((u32)bs[buf][nb][c0 + 1] << 16);
                    bfr[ni][1] = bs[buf][nb][c0 + 8] | ((u32)bs[buf][nb][c0 + 9] << 16);
                }
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) mma_bf16_16816(acc[mi][ni], af[mi], bfr[ni]);
            }
        }
        __syncthreads();  // buffer buf is free for step s+2
    }
    CP_ASYNC_WAIT(0);
    if (!active) return;
    // swiglu: fragments 0, 1 hold gate and 2, 3 up of the same columns (written from 0, 1 only)
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            if (swiglu && ni >= 2) continue;
#pragma unroll
            for (int h = 0; h < 2; h++) {  // accumulator rows g (c0, c1) and g + 8 (c2, c3)
                int row = r0 + wm + mi * 16 + g + 8 * h;
                if (row >= rend) continue;
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    float a = acc[mi][ni][2 * h + q];
                    int n = n0 + (swiglu ? wn / 2 : wn) + ni * 8 + 2 * tq + q;
                    if (swiglu) a = swiglu_pair(a, acc[mi][(ni + 2) & 3][2 * h + q]);
                    if (n < N) out[(long long)row * N + n] = f2a(a);
                }
            }
        }
}

#define ST_N 64  // weight-streaming tile: 16 rows x 64 cols, 4 warps x 16 cols
// Weight-streaming grouped GEMM for tiles of at most 16 rows (decode: 1–16 rows per expert), same
// contract as grouped_gemm with tile_m <= 16. The GEMM is bandwidth-bound on the weights: no
// shared-memory staging, each weight element is loaded once straight into a B fragment register
// (4 lanes of a group read 16 contiguous bytes of a weight row), the few input rows come in as A
// fragments (cached), two mma.sync m16n8k16 per warp and k16 step. grid = (ceil(N/64), max tiles),
// block = 128. `flags` as grouped_gemm_mma (MOE_NO_CP_ASYNC has nothing to turn off here);
// with MOE_SWIGLU a warp's two fragments are gate and up of the same 8 act columns (combined in
// registers), a block covers 32 act columns: grid.x = ceil(N/32).
extern "C" __global__ void KERNEL(grouped_gemm_stream)(const act_t* __restrict__ x, const act_t* __restrict__ W,
                                               act_t* __restrict__ out, const int* __restrict__ offsets,
                                               const int* __restrict__ perm, const int* __restrict__ tiles,
                                               const int* __restrict__ ntiles, int gather, int topk,
                                               int N, int Kd, int tile_m, int flags) {
    int swiglu = flags & MOE_SWIGLU;
    int j = blockIdx.y;
    if (j >= *ntiles) return;
    int e = tiles[2 * j], r0 = tiles[2 * j + 1], rend = min(r0 + min(tile_m, 16), offsets[e + 1]);
    const act_t* We = W + (long long)e * (swiglu ? 2 * N : N) * Kd;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int g = lane >> 2, tq = lane & 3;
    int wcols = swiglu ? 8 : 16;  // output columns per warp
    int nw0 = blockIdx.x * 4 * wcols + warp * wcols;
    if (nw0 >= N) return;  // warp-uniform: the whole warp leaves
    const act_t* xr0 = r0 + g < rend ? x + moe_src_row(perm, gather, topk, r0 + g) * Kd : nullptr;
    const act_t* xr8 = r0 + g + 8 < rend ? x + moe_src_row(perm, gather, topk, r0 + g + 8) * Kd : nullptr;
    // registers only: every index into wr, acc, af, bfr is a compile-time constant (unrolled)
    const act_t* wr[2];
#pragma unroll
    for (int ni = 0; ni < 2; ni++) {
        int n = swiglu ? nw0 + g : nw0 + ni * 8 + g;  // swiglu: gate row n, up row N + n
        wr[ni] = n < N ? We + ((long long)n + (swiglu ? ni * (long long)N : 0)) * Kd : nullptr;
    }
    float acc[2][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[a][c] = 0.0f;
    for (int k0 = 0; k0 < Kd; k0 += 16) {
        int c0 = k0 + 2 * tq;
        u32 af[4];
        af[0] = xr0 ? moe_pair(xr0, c0, Kd) : 0u;
        af[1] = xr8 ? moe_pair(xr8, c0, Kd) : 0u;
        af[2] = xr0 ? moe_pair(xr0, c0 + 8, Kd) : 0u;
        af[3] = xr8 ? moe_pair(xr8, c0 + 8, Kd) : 0u;
#pragma unroll
        for (int ni = 0; ni < 2; ni++) {
            u32 bfr[2];
            bfr[0] = wr[ni] ? moe_pair(wr[ni], c0, Kd) : 0u;
            bfr[1] = wr[ni] ? moe_pair(wr[ni], c0 + 8, Kd) : 0u;
            mma_bf16_16816(acc[ni], af, bfr);
        }
    }
#pragma unroll
    for (int ni = 0; ni < 2; ni++) {
        if (swiglu && ni == 1) continue;  // swiglu: fragment 0 gate, 1 up of the same columns
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int row = r0 + g + 8 * h;
            if (row >= rend) continue;
#pragma unroll
            for (int q = 0; q < 2; q++) {
                int n = nw0 + ni * 8 + 2 * tq + q;
                float a = swiglu ? swiglu_pair(acc[0][2 * h + q], acc[1][2 * h + q]) : acc[ni][2 * h + q];
                if (n < N) out[(long long)row * N + n] = f2a(a);
            }
        }
    }
}

// The tensor-core lane probe: one warp runs one mma.sync m16n8k16 on raw per-lane registers
// a [32][4], b [32][2], c [32][4] -> d [32][4]. Tests fill the registers from matrices by the PTX
// ISA fragment tables and read d back by them, on the GPU and on the emulator alike. block = 32.
extern "C" __global__ void KERNEL(mma_probe)(const u32* __restrict__ a, const u32* __restrict__ b,
                                     const float* __restrict__ c, float* __restrict__ d) {
    int l = threadIdx.x & 31;
    u32 ar[4], br[2];
    float acc[4];
    for (int i = 0; i < 4; i++) { ar[i] = a[l * 4 + i]; acc[i] = c[l * 4 + i]; }
    for (int i = 0; i < 2; i++) br[i] = b[l * 2 + i];
    mma_bf16_16816(acc, ar, br);
    for (int i = 0; i < 4; i++) d[l * 4 + i] = acc[i];
}

// SwiGLU on fused gate|up rows: gu [rows, 2I] -> act [rows, I] = act_t(SiLU(g)) * u. grid-stride.
extern "C" __global__ void KERNEL(swiglu)(const act_t* __restrict__ gu, act_t* __restrict__ act, int I, long long rows) {
    long long n = rows * I;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / I; int c = (int)(i % I);
        float g = a2f(gu[r * 2 * I + c]), u = a2f(gu[r * 2 * I + I + c]);
        act[i] = f2a(a2f(f2a(siluf_(g))) * u);
    }
}

// Same for separate gate/up tensors (shared expert): act = SiLU(g) * u.
extern "C" __global__ void KERNEL(silu_mul)(const act_t* __restrict__ g, const act_t* __restrict__ u, act_t* __restrict__ act, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        act[i] = f2a(a2f(f2a(siluf_(a2f(g[i])))) * a2f(u[i]));
}

// out[t, :] = Σ_k w[t,k] · y[row_of_pair[t*K+k], :]  +  sigmoid(sg[t]) · shared[t, :]
// (k summed in slot order: deterministic). sg [T] is x·w_sgᵀ (act_t); shared may be null.
// grid = T, block = 256.
extern "C" __global__ void KERNEL(moe_combine)(const act_t* __restrict__ y, const int* __restrict__ row_of_pair,
                                       const float* __restrict__ wts, const act_t* __restrict__ shared,
                                       const act_t* __restrict__ sg, act_t* __restrict__ out, int H, int K) {
    long long t = blockIdx.x;
    float gate = shared ? sigmoidf_(a2f(sg[t])) : 0.0f;
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < K; k++) a += wts[t * K + k] * a2f(y[(long long)row_of_pair[t * K + k] * H + c]);
        if (shared) a = a2f(f2a(a)) + a2f(f2a(gate * a2f(shared[t * H + c])));
        out[t * H + c] = f2a(a);
    }
}
