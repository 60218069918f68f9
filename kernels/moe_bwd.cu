// Backward of the sparse MoE block of kernels/moe.cu, with the experts of the forward replayed
// (the top-k choice is not differentiated): the weighted combine (gradients of the router
// weights, of each routed row and of the gated shared expert), the router's renormalisation and
// softmax, grouped expert GEMMs for the input gradient (dY·W_e) and the weight gradient
// (Σ_rows dYᵀ·X, per expert over its rows, fp32), and the sum of each token's routed input
// gradients. Deterministic: rows are grouped in ascending pair order (`moe_scatter_stable`) and
// every sum runs in a fixed order, without atomics. Formulas as src/train/layers/moe.rs.

#define BT 64   // output tile
#define BK 32   // reduction step

// Stable grouping: perm[offsets[e] + j] = the j-th pair (ascending t·K + k) routed to e, and
// row_of_pair its inverse. offsets from moe_count + moe_scan. grid = E, block = 32 (one warp).
extern "C" __global__ void KERNEL(moe_scatter_stable)(const int* __restrict__ idx, const int* __restrict__ offsets,
                                              int* __restrict__ perm, int* __restrict__ row_of_pair, long long n) {
    int e = blockIdx.x, lane = threadIdx.x;
    int base = offsets[e];
    for (long long i0 = 0; i0 < n; i0 += 32) {
        long long i = i0 + lane;
        int hit = i < n && idx[i] == e;
        unsigned b = __ballot_sync(0xffffffffu, hit);
        if (hit) {
            int r = base + __popc(b & ((1u << lane) - 1u));
            perm[r] = (int)i;
            row_of_pair[i] = r;
        }
        base += __popc(b);
    }
}

// Combine backward, per token t (grid = T, block = 256):
//   dwts[t,k] = dy_t · y[row(t,k)],  dye[row(t,k)] = wts[t,k] · dy_t,
//   shared (optional): dshared_t = σ(sg_t) · dy_t,  dsg_t = (dy_t · shared_t) · σ(1 − σ).
extern "C" __global__ void KERNEL(moe_combine_bwd)(const act_t* __restrict__ dy, const act_t* __restrict__ y,
                                           const int* __restrict__ row_of_pair, const float* __restrict__ wts,
                                           const act_t* __restrict__ shared, const act_t* __restrict__ sg,
                                           float* __restrict__ dwts, act_t* __restrict__ dye,
                                           act_t* __restrict__ dshared, act_t* __restrict__ dsg, int H, int K) {
    __shared__ float scratch[32];
    long long t = blockIdx.x;
    for (int k = 0; k < K; k++) {
        long long row = row_of_pair[t * K + k];
        float w = wts[t * K + k], s = 0.0f;
        for (int c = threadIdx.x; c < H; c += blockDim.x) {
            float d = a2f(dy[t * H + c]);
            s += d * a2f(y[row * H + c]);
            dye[row * H + c] = f2a(w * d);
        }
        s = block_sum(s, scratch);
        if (threadIdx.x == 0) dwts[t * K + k] = s;
    }
    if (shared) {
        float g = sigmoidf_(a2f(sg[t])), s = 0.0f;
        for (int c = threadIdx.x; c < H; c += blockDim.x) {
            float d = a2f(dy[t * H + c]);
            s += d * a2f(shared[t * H + c]);
            dshared[t * H + c] = f2a(g * d);
        }
        s = block_sum(s, scratch);
        if (threadIdx.x == 0) dsg[t] = f2a(s * g * (1.0f - g));
    }
}

// Router backward, one warp per token (block = 128): p = softmax(logits_t), S = Σ_k p[idx_k],
//   dp[idx_k] = (dwts_k − Σ_j wts_j dwts_j) / S,   dlogits_e = p_e (dp_e − Σ p·dp).
extern "C" __global__ void KERNEL(router_bwd)(const float* __restrict__ logits, const int* __restrict__ idx,
                                      const float* __restrict__ wts, const float* __restrict__ dwts,
                                      act_t* __restrict__ dlogits, int T, int E, int K) {
    int lane = threadIdx.x & 31;
    int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    const float* lg = logits + (long long)t * E;
    const int* it = idx + (long long)t * K;
    const float *wt = wts + (long long)t * K, *dw = dwts + (long long)t * K;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, lg[e]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += expf(lg[e] - mx);
    float inv = 1.0f / warp_sum(sum);
    float S = 0.0f, wdw = 0.0f;
    for (int k = 0; k < K; k++) { S += expf(lg[it[k]] - mx) * inv; wdw += wt[k] * dw[k]; }
    float pdp = 0.0f;
    for (int k = 0; k < K; k++) pdp += expf(lg[it[k]] - mx) * inv * (dw[k] - wdw) / S;
    for (int e = lane; e < E; e += 32) {
        float dp = 0.0f;
        for (int k = 0; k < K; k++) if (it[k] == e) dp += (dw[k] - wdw) / S;
        dlogits[(long long)t * E + e] = f2a(expf(lg[e] - mx) * inv * (dp - pdp));
    }
}

// Grouped input gradient: for the rows of expert e (blockIdx.z), out[row, k] (+)= Σ_n dy[row, n]·W[e][n, k]
// (W: [E, N, Kd], nn.Linear layout). grid = (ceil(Kd/BT), ceil(max_rows/BT), E), block = 256.
extern "C" __global__ void KERNEL(grouped_gemm_dx)(const act_t* __restrict__ dy, const act_t* __restrict__ W,
                                           act_t* __restrict__ out, const int* __restrict__ offsets, int N,
                                           int Kd, int accumulate) {
    __shared__ float ys[BT][BK + 1];
    __shared__ float ws[BK][BT + 1];
    int e = blockIdx.z;
    int r0 = offsets[e] + blockIdx.y * BT, rend = offsets[e + 1];
    if (r0 >= rend) return;
    int k0 = blockIdx.x * BT;
    const act_t* We = W + (long long)e * N * Kd;
    int tr = (threadIdx.x / 16) * 4, tc = (threadIdx.x % 16) * 4;
    float acc[4][4];
    for (int a = 0; a < 4; a++) for (int c = 0; c < 4; c++) acc[a][c] = 0.0f;
    for (int n0 = 0; n0 < N; n0 += BK) {
        for (int p = threadIdx.x; p < BT * BK; p += blockDim.x) {
            int rr = p / BK, nn = p % BK, row = r0 + rr, n = n0 + nn;
            ys[rr][nn] = (row < rend && n < N) ? a2f(dy[(long long)row * N + n]) : 0.0f;
            int n2 = n0 + p / BT, kk = k0 + p % BT;
            ws[p / BT][p % BT] = (n2 < N && kk < Kd) ? a2f(We[(long long)n2 * Kd + kk]) : 0.0f;
        }
        __syncthreads();
        for (int nn = 0; nn < BK; nn++) {
            float ya[4], wb[4];
            for (int a = 0; a < 4; a++) ya[a] = ys[tr + a][nn];
            for (int c = 0; c < 4; c++) wb[c] = ws[nn][tc + c];
            for (int a = 0; a < 4; a++) for (int c = 0; c < 4; c++) acc[a][c] += ya[a] * wb[c];
        }
        __syncthreads();
    }
    for (int a = 0; a < 4; a++) {
        int row = r0 + tr + a;
        if (row >= rend) continue;
        for (int c = 0; c < 4; c++) {
            int k = k0 + tc + c;
            if (k >= Kd) continue;
            long long o = (long long)row * Kd + k;
            out[o] = f2a(accumulate ? a2f(out[o]) + acc[a][c] : acc[a][c]);
        }
    }
}

// Grouped weight gradient: dW[e][n, k] += Σ_{rows of e, in order} dy[row, n] · in(row)[k], fp32.
// in(row) = x[perm[row] / topk] when `gather` (token rows), else x[row] (grouped rows).
// grid = (ceil(Kd/BT), ceil(N/BT), E), block = 256.
extern "C" __global__ void KERNEL(grouped_gemm_dw)(const act_t* __restrict__ dy, const act_t* __restrict__ x,
                                           float* __restrict__ dW, const int* __restrict__ offsets,
                                           const int* __restrict__ perm, int gather, int topk, int N, int Kd) {
    __shared__ float ds[BK][BT + 1];
    __shared__ float xs[BK][BT + 1];
    int e = blockIdx.z;
    int r0 = offsets[e], rend = offsets[e + 1];
    if (r0 >= rend) return;
    int k0 = blockIdx.x * BT, n0 = blockIdx.y * BT;
    int tr = (threadIdx.x / 16) * 4, tc = (threadIdx.x % 16) * 4;
    float acc[4][4];
    for (int a = 0; a < 4; a++) for (int c = 0; c < 4; c++) acc[a][c] = 0.0f;
    for (int rb = r0; rb < rend; rb += BK) {
        for (int p = threadIdx.x; p < BK * BT; p += blockDim.x) {
            int rr = p / BT, cc = p % BT, row = rb + rr;
            bool in = row < rend;
            ds[rr][cc] = (in && n0 + cc < N) ? a2f(dy[(long long)row * N + n0 + cc]) : 0.0f;
            long long src = in ? (gather ? (long long)(perm[row] / topk) : (long long)row) : 0;
            xs[rr][cc] = (in && k0 + cc < Kd) ? a2f(x[src * Kd + k0 + cc]) : 0.0f;
        }
        __syncthreads();
        for (int rr = 0; rr < BK; rr++) {
            float da[4], xb[4];
            for (int a = 0; a < 4; a++) da[a] = ds[rr][tr + a];
            for (int c = 0; c < 4; c++) xb[c] = xs[rr][tc + c];
            for (int a = 0; a < 4; a++) for (int c = 0; c < 4; c++) acc[a][c] += da[a] * xb[c];
        }
        __syncthreads();
    }
    float* We = dW + (long long)e * N * Kd;
    for (int a = 0; a < 4; a++) {
        int n = n0 + tr + a;
        if (n >= N) continue;
        for (int c = 0; c < 4; c++) { int k = k0 + tc + c; if (k < Kd) We[(long long)n * Kd + k] += acc[a][c]; }
    }
}

// dx[t, :] (+)= Σ_k dxr[row_of_pair[t·K + k], :] in slot order (the routed rows' input gradients
// back onto their tokens). grid = T, block = 256.
extern "C" __global__ void KERNEL(moe_gather_add)(const act_t* __restrict__ dxr, const int* __restrict__ row_of_pair,
                                          act_t* __restrict__ dx, int H, int K, int accumulate) {
    long long t = blockIdx.x;
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        float a = accumulate ? a2f(dx[t * H + c]) : 0.0f;
        for (int k = 0; k < K; k++) a += a2f(dxr[(long long)row_of_pair[t * K + k] * H + c]);
        dx[t * H + c] = f2a(a);
    }
}
