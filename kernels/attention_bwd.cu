// Backward of gated attention's position and score ops.
// rope_partial_bwd: the rotation of kernels/attention.cu is orthogonal, so its backward is the
// inverse rotation (angle −θ) of the gradient, in place; positions and the bf16 rounding of
// cos/sin (`round_cs`) as the forward.

// dx [T, H, hd] in place; pos [T]. grid = (T, H), block = rot/2 rounded up to a warp.
extern "C" __global__ void KERNEL(rope_partial_bwd)(act_t* __restrict__ dx, const int* __restrict__ pos, int hd,
                                            int rot, float theta, int round_cs) {
    int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x, half = rot / 2;
    if (i >= half) return;
    act_t* v = dx + ((long long)t * gridDim.y + h) * hd;
    float inv = powf(theta, -2.0f * (float)i / (float)rot);
    float ang = (float)pos[t] * inv;
    float c = cosf(ang), s = sinf(ang);
    if (round_cs) { c = a2f(f2a(c)); s = a2f(f2a(s)); }
    float g1 = a2f(v[i]), g2 = a2f(v[i + half]);
    v[i] = f2a(g1 * c + g2 * s);
    v[i + half] = f2a(g2 * c - g1 * s);
}

// merge_q_gate: the backward of split_q_gate — dq [T, Hq, hd] and dgate [T, Hq*hd] interleaved
// back per head into dqg [T, Hq, 2*hd] (the q_proj output's gradient). grid = T, block = 256.
extern "C" __global__ void KERNEL(merge_q_gate)(const act_t* __restrict__ dq, const act_t* __restrict__ dgate,
                                        act_t* __restrict__ dqg, int hq, int hd) {
    long long t = blockIdx.x;
    int n = hq * hd;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int h = i / hd, c = i % hd;
        act_t* dst = dqg + t * 2 * n + (long long)h * 2 * hd;
        dst[c] = dq[t * n + i];
        dst[hd + c] = dgate[t * n + i];
    }
}

// Causal softmax attention backward (flash-style: the probabilities are recomputed from q, k and
// the row's log-sum-exp, never stored), GQA, packed sequences: token t of the batch attends keys
// seq_start[t]..=t; q, dO, O, dq [T, Hq, hd]; k, v, dk, dv [T, Hkv, hd]; scale = 1/sqrt(hd).
// With P = softmax(scale·q·kᵀ), D_i = dO_i·O_i:  dS_ij = P_ij (dO_i·v_j − D_i),
//   dq_i = scale Σ_j dS_ij k_j,  dk_j = scale Σ_i dS_ij q_i,  dv_j = Σ_i P_ij dO_i
// (sums over the query heads of a KV head inside one block: no atomics, deterministic).
// Lanes split the head dims (d = lane + 32·c), warps split keys or queries; block = 128.
#define ATTB_HD_MAX 256
#define ATTB_C (ATTB_HD_MAX / 32)
#define ATTB_WARPS 4

// Dot product of two head vectors by one warp (every lane gets the sum).
__device__ __forceinline__ float head_dot(const act_t* __restrict__ a, const act_t* __restrict__ b, int hd, int lane) {
    float s = 0.0f;
    for (int d = lane; d < hd; d += 32) s += a2f(a[d]) * a2f(b[d]);
    return warp_sum(s);
}

// Sum the per-warp partial vectors acc[c] (dims lane + 32c) over the block's warps in warp order
// and write scale·sum as act_t to out[0..hd).
__device__ __forceinline__ void warps_reduce_store(float (&acc)[ATTB_C], float* red, act_t* out, int hd, float scale) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    for (int c = 0; c < ATTB_C; c++) red[wid * ATTB_HD_MAX + lane + 32 * c] = acc[c];
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float s = 0.0f;
        for (int w = 0; w < ATTB_WARPS; w++) s += red[w * ATTB_HD_MAX + d];
        out[d] = f2a(s * scale);
    }
}

// Per (query t, head h): lse = log Σ_j exp(scale·q·k_j) over its keys and D = dO·O (fp32).
// grid = (T, Hq), block = 128.
extern "C" __global__ void KERNEL(attn_bwd_prep)(const act_t* __restrict__ q, const act_t* __restrict__ k,
                                         const act_t* __restrict__ o, const act_t* __restrict__ dout,
                                         const int* __restrict__ seq_start, float* __restrict__ lse,
                                         float* __restrict__ dsum, int hq, int hkv, int hd, float scale) {
    __shared__ float wm[ATTB_WARPS], wl[ATTB_WARPS];
    int t = blockIdx.x, h = blockIdx.y, g = h / (hq / hkv);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const act_t* qv = q + ((long long)t * hq + h) * hd;
    float m = -INFINITY, l = 0.0f;  // this warp's online max and sum over its keys
    for (int j = seq_start[t] + wid; j <= t; j += ATTB_WARPS) {
        float s = head_dot(qv, k + ((long long)j * hkv + g) * hd, hd, lane) * scale;
        float mn = fmaxf(m, s);
        l = l * expf(m - mn) + expf(s - mn);
        m = mn;
    }
    if (lane == 0) { wm[wid] = m; wl[wid] = l; }
    float dd = head_dot(dout + ((long long)t * hq + h) * hd, o + ((long long)t * hq + h) * hd, hd, lane);
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = -INFINITY, L = 0.0f;
        for (int w = 0; w < ATTB_WARPS; w++) M = fmaxf(M, wm[w]);
        for (int w = 0; w < ATTB_WARPS; w++) if (wl[w] > 0.0f) L += wl[w] * expf(wm[w] - M);
        lse[(long long)t * hq + h] = M + logf(L);
        dsum[(long long)t * hq + h] = dd;
    }
}

// dq per (query t, head h): warps split the keys. grid = (T, Hq), block = 128.
extern "C" __global__ void KERNEL(attn_bwd_dq)(const act_t* __restrict__ q, const act_t* __restrict__ k,
                                       const act_t* __restrict__ v, const act_t* __restrict__ dout,
                                       const float* __restrict__ lse, const float* __restrict__ dsum,
                                       const int* __restrict__ seq_start, act_t* __restrict__ dq, int hq,
                                       int hkv, int hd, float scale) {
    __shared__ float red[ATTB_WARPS * ATTB_HD_MAX];
    int t = blockIdx.x, h = blockIdx.y, g = h / (hq / hkv);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    long long row = (long long)t * hq + h;
    const act_t *qv = q + row * hd, *dov = dout + row * hd;
    float L = lse[row], D = dsum[row];
    float acc[ATTB_C];
    for (int c = 0; c < ATTB_C; c++) acc[c] = 0.0f;
    for (int j = seq_start[t] + wid; j <= t; j += ATTB_WARPS) {
        const act_t *kj = k + ((long long)j * hkv + g) * hd, *vj = v + ((long long)j * hkv + g) * hd;
        float p = expf(head_dot(qv, kj, hd, lane) * scale - L);
        float ds = p * (head_dot(dov, vj, hd, lane) - D);
        for (int c = 0; c < ATTB_C; c++) { int d = lane + 32 * c; if (d < hd) acc[c] += ds * a2f(kj[d]); }
    }
    warps_reduce_store(acc, red, dq + row * hd, hd, scale);
}

// dk, dv per (key j, KV head g): warps split the (query head of the group, query i ≥ j of the
// same sequence) pairs. seq_end[j] = one past the last token of j's sequence.
// grid = (T, Hkv), block = 128.
extern "C" __global__ void KERNEL(attn_bwd_dkv)(const act_t* __restrict__ q, const act_t* __restrict__ k,
                                        const act_t* __restrict__ v, const act_t* __restrict__ dout,
                                        const float* __restrict__ lse, const float* __restrict__ dsum,
                                        const int* __restrict__ seq_end, act_t* __restrict__ dk,
                                        act_t* __restrict__ dv, int hq, int hkv, int hd, float scale) {
    __shared__ float red[ATTB_WARPS * ATTB_HD_MAX];
    int j = blockIdx.x, g = blockIdx.y, G = hq / hkv;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    long long kr = (long long)j * hkv + g;
    const act_t *kj = k + kr * hd, *vj = v + kr * hd;
    int nq = seq_end[j] - j;
    float ak[ATTB_C], av[ATTB_C];
    for (int c = 0; c < ATTB_C; c++) { ak[c] = 0.0f; av[c] = 0.0f; }
    for (int pi = wid; pi < G * nq; pi += ATTB_WARPS) {
        int h = g * G + pi / nq, i = j + pi % nq;
        long long row = (long long)i * hq + h;
        const act_t *qi = q + row * hd, *doi = dout + row * hd;
        float p = expf(head_dot(qi, kj, hd, lane) * scale - lse[row]);
        float ds = p * (head_dot(doi, vj, hd, lane) - dsum[row]);
        for (int c = 0; c < ATTB_C; c++) {
            int d = lane + 32 * c;
            if (d < hd) { ak[c] += ds * a2f(qi[d]); av[c] += p * a2f(doi[d]); }
        }
    }
    warps_reduce_store(ak, red, dk + kr * hd, hd, scale);
    __syncthreads();
    warps_reduce_store(av, red, dv + kr * hd, hd, 1.0f);
}
