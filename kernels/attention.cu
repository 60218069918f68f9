// Gated full attention: q/gate split, partial NeoX RoPE, the paged KV cache (append through a
// block table), prefill (tiled flash-style, online softmax, causal) and decode (split-KV +
// combine, GQA) reading keys and values through the block table, and the sigmoid output gate.
//
// Paged KV cache: one pool per attention layer of fixed-size blocks, k and v each
// [blocks, Hkv, bs, hd] (bs = tokens per block). Row r of the step's block table bt
// [rows, bt_stride] lists the blocks of the r-th sequence of the batch in token order: the
// sequence's token at position p lives in block bt[r * bt_stride + p / bs], row p % bs.

// Split q_proj output qg [T, Hq, 2*hd] into q [T, Hq, hd] and gate [T, Hq*hd]. grid = T, block = 256
extern "C" __global__ void KERNEL(split_q_gate)(const act_t* __restrict__ qg, act_t* __restrict__ q,
                                        act_t* __restrict__ gate, int hq, int hd) {
    long long t = blockIdx.x;
    int n = hq * hd;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int h = i / hd, c = i % hd;
        const act_t* src = qg + t * 2 * n + (long long)h * 2 * hd;
        q[t * n + i] = src[c];
        gate[t * n + i] = src[hd + c];
    }
}

// Partial RoPE in place on x [T, heads, hd] (first `rot` dims, rotate_half / NeoX pairing),
// positions pos[T]. inv_freq[i] = theta^(-2i/rot); cos/sin are rounded to act_t when
// `round_cs` (HF casts them to the model dtype). grid = (T, heads), block = rot/2 (<= 1024)
extern "C" __global__ void KERNEL(rope_partial)(act_t* __restrict__ x, const int* __restrict__ pos, int hd, int rot,
                                        float theta, int round_cs) {
    int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x, half = rot / 2;
    if (i >= half) return;
    act_t* v = x + ((long long)t * gridDim.y + h) * hd;
    float inv = powf(theta, -2.0f * (float)i / (float)rot);
    float ang = (float)pos[t] * inv;
    float c = cosf(ang), s = sinf(ang);
    if (round_cs) { c = a2f(f2a(c)); s = a2f(f2a(s)); }
    float x1 = a2f(v[i]), x2 = a2f(v[i + half]);
    v[i] = f2a(x1 * c - x2 * s);
    v[i + half] = f2a(x2 * c + x1 * s);
}

// Offset of the (kv head g) row of position p of block-table row `row` in a paged pool.
__device__ __forceinline__ long long kv_row(const int* __restrict__ bt, int bt_stride, int row, int p,
                                          int hkv, int g, int bs, int hd) {
    long long blk = bt[(long long)row * bt_stride + p / bs];
    return ((blk * hkv + g) * bs + p % bs) * (long long)hd;
}

// Append k, v [T, Hkv, hd] of the batch's new tokens into the paged pool: token t belongs to
// block-table row seq_of_tok[t] at position cache_pos[t]. grid = T, block = 256
extern "C" __global__ void KERNEL(kv_append)(const act_t* __restrict__ k, const act_t* __restrict__ v,
                                     act_t* __restrict__ kc, act_t* __restrict__ vc,
                                     const int* __restrict__ cache_pos, const int* __restrict__ seq_of_tok,
                                     const int* __restrict__ bt, int bt_stride,
                                     int hkv, int hd, int bs, int blocks) {
    int t = blockIdx.x;
    int row = seq_of_tok[t];
    int p = cache_pos[t];
    if (p < 0 || p / bs >= bt_stride) return;  // checked on the host; never write out of bounds
    int blk = bt[(long long)row * bt_stride + p / bs];
    if (blk < 0 || blk >= blocks) return;
    for (int i = threadIdx.x; i < hkv * hd; i += blockDim.x) {
        int h = i / hd, c = i % hd;
        long long dst = kv_row(bt, bt_stride, row, p, hkv, h, bs, hd) + c;
        kc[dst] = k[(long long)t * hkv * hd + i];
        vc[dst] = v[(long long)t * hkv * hd + i];
    }
}

#ifndef ATT_HD_MAX
#define ATT_HD_MAX 256
#endif
#define ATT_TILE 32

// Prefill attention (flash-style): one block per (query token, head); keys of the same sequence
// read through its block-table row from the paged cache in tiles of ATT_TILE with an online softmax. A query at cache position p
// sees keys 0..=p (causal). q [T, Hq, hd]; out [T, Hq, hd]. block = 128, hd <= ATT_HD_MAX.
// Each thread owns output dims d = threadIdx.x + k*blockDim.x.
extern "C" __global__ void KERNEL(attn_prefill)(const act_t* __restrict__ q, const act_t* __restrict__ kc,
                                        const act_t* __restrict__ vc, act_t* __restrict__ out,
                                        const int* __restrict__ cache_pos, const int* __restrict__ seq_of_tok,
                                        const int* __restrict__ bt, int bt_stride,
                                        int hq, int hkv, int hd, int bs, float scale) {
    __shared__ float qs[ATT_HD_MAX];
    __shared__ float sc[ATT_TILE];
    __shared__ float scratch[32];
    int t = blockIdx.x, h = blockIdx.y, g = h / (hq / hkv);
    int row = seq_of_tok[t];
    int p = cache_pos[t];
    const act_t* qv = q + ((long long)t * hq + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = a2f(qv[d]) * scale;
    float acc[ATT_HD_MAX / 32];
    for (int k = 0; k < ATT_HD_MAX / 32; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    for (int j0 = 0; j0 <= p; j0 += ATT_TILE) {
        int n = min(ATT_TILE, p + 1 - j0);
        // scores: one warp per key, lanes split the head dims
        for (int j = wid; j < n; j += nw) {
            const act_t* kr = kc + kv_row(bt, bt_stride, row, j0 + j, hkv, g, bs, hd);
            float s = 0.0f;
            for (int d = lane; d < hd; d += 32) s += qs[d] * a2f(kr[d]);
            s = warp_sum(s);
            if (lane == 0) sc[j] = s;
        }
        __syncthreads();
        float tm = -INFINITY;
        for (int j = 0; j < n; j++) tm = fmaxf(tm, sc[j]);
        float mn = fmaxf(m, tm);
        float corr = __expf(m - mn);
        l *= corr;
        for (int k = 0; k < ATT_HD_MAX / 32; k++) acc[k] *= corr;
        for (int j = 0; j < n; j++) {
            float pj = __expf(sc[j] - mn);
            l += pj;
            const act_t* vr = vc + kv_row(bt, bt_stride, row, j0 + j, hkv, g, bs, hd);
            int k = 0;
            for (int d = threadIdx.x; d < hd; d += blockDim.x, k++) acc[k] += pj * a2f(vr[d]);
        }
        m = mn;
        __syncthreads();
    }
    (void)scratch;
    act_t* o = out + ((long long)t * hq + h) * hd;
    int k = 0;
    for (int d = threadIdx.x; d < hd; d += blockDim.x, k++) o[d] = f2a(acc[k] / l);
}

// Decode attention, split-KV: one block per (sequence, kv head, split); the block handles all
// Hq/Hkv query heads of that kv head (GQA: each cache row is read once for the group).
// Partial results (unnormalised acc, max m, sum l) go to part_* for attn_decode_combine.
// q [B, Hq, hd] (one token per sequence), lens[b] = keys visible (cache length incl. new token),
// read through block-table row b.
// block = 128 (4 warps); each warp owns query heads w, w+4, ...; lanes split hd.
#define DEC_GROUP_MAX 16
extern "C" __global__ void KERNEL(attn_decode_split)(const act_t* __restrict__ q, const act_t* __restrict__ kc,
                                             const act_t* __restrict__ vc, const int* __restrict__ lens,
                                             const int* __restrict__ bt, int bt_stride,
                                             float* __restrict__ part_acc,
                                             float* __restrict__ part_ml, int hq, int hkv, int hd,
                                             int bs, int split_len, float scale) {
    int b = blockIdx.x, g = blockIdx.y, sp = blockIdx.z, nsplit = gridDim.z;
    int grp = hq / hkv;
    int len = lens[b];
    int j0 = sp * split_len, j1 = min(len, j0 + split_len);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int hh = wid; hh < grp; hh += nw) {
        int h = g * grp + hh;
        const act_t* qv = q + ((long long)b * hq + h) * hd;
        float qr[ATT_HD_MAX / 32], acc[ATT_HD_MAX / 32];
        int nd = (hd + 31) / 32;
        for (int k = 0; k < nd; k++) {
            int d = lane + 32 * k;
            qr[k] = d < hd ? a2f(qv[d]) * scale : 0.0f;
            acc[k] = 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        for (int j = j0; j < j1; j++) {
            const act_t* kr = kc + kv_row(bt, bt_stride, b, j, hkv, g, bs, hd);
            float s = 0.0f;
            for (int k = 0; k < nd; k++) { int d = lane + 32 * k; if (d < hd) s += qr[k] * a2f(kr[d]); }
            s = warp_sum(s);
            float mn = fmaxf(m, s), corr = __expf(m - mn), pj = __expf(s - mn);
            l = l * corr + pj;
            const act_t* vr = vc + kv_row(bt, bt_stride, b, j, hkv, g, bs, hd);
            for (int k = 0; k < nd; k++) { int d = lane + 32 * k; acc[k] = acc[k] * corr + (d < hd ? pj * a2f(vr[d]) : 0.0f); }
            m = mn;
        }
        long long pi = ((long long)b * hq + h) * nsplit + sp;
        for (int k = 0; k < nd; k++) { int d = lane + 32 * k; if (d < hd) part_acc[pi * hd + d] = acc[k]; }
        if (lane == 0) { part_ml[pi * 2] = m; part_ml[pi * 2 + 1] = l; }
    }
}

// Merge the splits: out[b, h, :] = Σ_s e^{m_s - M} acc_s / Σ_s e^{m_s - M} l_s. grid = (B, Hq), block = hd<=256
extern "C" __global__ void KERNEL(attn_decode_combine)(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                                               act_t* __restrict__ out, int hq, int hd, int nsplit) {
    int b = blockIdx.x, h = blockIdx.y;
    long long p0 = ((long long)b * hq + h) * nsplit;
    float M = -INFINITY;
    for (int s = 0; s < nsplit; s++) M = fmaxf(M, part_ml[(p0 + s) * 2]);
    float L = 0.0f;
    for (int s = 0; s < nsplit; s++) { float m = part_ml[(p0 + s) * 2]; if (m > -INFINITY) L += __expf(m - M) * part_ml[(p0 + s) * 2 + 1]; }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < nsplit; s++) { float m = part_ml[(p0 + s) * 2]; if (m > -INFINITY) a += __expf(m - M) * part_acc[(p0 + s) * hd + d]; }
        out[((long long)b * hq + h) * hd + d] = f2a(a / L);
    }
}

// o *= sigmoid(gate), elementwise over n values. grid-stride.
extern "C" __global__ void KERNEL(sigmoid_gate_mul)(act_t* __restrict__ o, const act_t* __restrict__ gate, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        o[i] = f2a(a2f(o[i]) * sigmoidf_(a2f(gate[i])));
}
