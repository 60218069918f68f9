// Sparse MoE on device: router softmax + top-k + renormalisation (with the routing record),
// grouping of (token, slot) pairs by expert (count, scan, scatter), a grouped expert GEMM over
// the groups (act_t in, fp32 accumulate), SwiGLU, the weighted combine of the top-k expert
// outputs with the gated shared expert.

#define MOE_E_MAX 1024
#define MOE_K_MAX 32
// One warp per token: p = softmax(logits[t]) (f32), top-k by repeated warp argmax (ties: lower
// index, like torch.topk on CPU), w = p_top / Σ p_top. Optionally `forced` [T, k] replays a
// recorded routing (R3): then the same experts are used with weights from the current p.
// idx [T, k] int, w [T, k] f32. block = 128 (4 tokens per block).
extern "C" __global__ void KERNEL(router_topk)(const float* __restrict__ logits, int* __restrict__ idx,
                                       float* __restrict__ wts, const int* __restrict__ forced,
                                       int T, int E, int K) {
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
        for (int k = 0; k < K; k++) { idx[(long long)t * K + k] = ik[k]; wts[(long long)t * K + k] = a2f(f2a(pk[k] / tot)); }
    }
}

// counts[e] = number of (t, k) pairs routed to e. counts must be zeroed. grid-stride over T*K.
extern "C" __global__ void KERNEL(moe_count)(const int* __restrict__ idx, int* __restrict__ counts, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        atomicAdd(&counts[idx[i]], 1);
}

// offsets[0..=E] = exclusive scan of counts; cursor = copy of offsets[0..E]. One block, 1 thread
// per expert chunk (E <= a few thousand; this is not on the critical path).
extern "C" __global__ void KERNEL(moe_scan)(const int* __restrict__ counts, int* __restrict__ offsets,
                                    int* __restrict__ cursor, int E) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        int acc = 0;
        for (int e = 0; e < E; e++) { offsets[e] = acc; cursor[e] = acc; acc += counts[e]; }
        offsets[E] = acc;
    }
}

// perm[row] = pair index (t*K + k) for rows grouped by expert. Deterministic order inside a group
// is not required for correctness (each row is independent); the combine sums by pair index.
extern "C" __global__ void KERNEL(moe_scatter)(const int* __restrict__ idx, int* __restrict__ cursor,
                                       int* __restrict__ perm, int* __restrict__ row_of_pair, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int r = atomicAdd(&cursor[idx[i]], 1);
        perm[r] = (int)i;
        row_of_pair[i] = r;
    }
}

#define GT 64   // output tile (rows x cols)
#define GK 32   // k step
// Grouped GEMM: for expert e (blockIdx.z), rows offsets[e]..offsets[e+1] of the grouped matrix:
//   out[row, n] = Σ_k in(row)[k] · W[e][n, k]        (W: [E, N, Kd] act_t, nn.Linear layout)
// in(row) = x[perm[row] / topk] when `gather` (token rows), else x[row] (already grouped rows).
// out is [rows_total, N] act_t. grid = (ceil(N/GT), ceil(max_rows/GT), E), block = 256.
// Each thread computes a 4x4 sub-tile. Plain fp32 FMA (a tensor-core path is future work).
extern "C" __global__ void KERNEL(grouped_gemm)(const act_t* __restrict__ x, const act_t* __restrict__ W,
                                        act_t* __restrict__ out, const int* __restrict__ offsets,
                                        const int* __restrict__ perm, int gather, int topk,
                                        int N, int Kd) {
    __shared__ float xs[GT][GK + 1];
    __shared__ float ws[GT][GK + 1];
    int e = blockIdx.z;
    int r0 = offsets[e] + blockIdx.y * GT, rend = offsets[e + 1];
    if (r0 >= rend) return;
    int n0 = blockIdx.x * GT;
    const act_t* We = W + (long long)e * N * Kd;
    int tr = (threadIdx.x / 16) * 4, tc = (threadIdx.x % 16) * 4;
    float acc[4][4];
    for (int a = 0; a < 4; a++) for (int c = 0; c < 4; c++) acc[a][c] = 0.0f;
    for (int k0 = 0; k0 < Kd; k0 += GK) {
        for (int p = threadIdx.x; p < GT * GK; p += blockDim.x) {
            int rr = p / GK, kk = p % GK, row = r0 + rr, k = k0 + kk;
            float xv = 0.0f;
            if (row < rend && k < Kd) {
                long long src = gather ? (long long)(perm[row] / topk) : (long long)row;
                xv = a2f(x[src * Kd + k]);
            }
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
