// Gated full attention: q/gate split, partial NeoX RoPE, the paged KV cache (append through a
// block table), prefill (flash-style: a tile of 16 query rows per block, K/V tiles staged in
// shared memory, online softmax, causal) and decode (split-KV with a host-chosen split count +
// combine, GQA rows sharing the staged K/V, lanes over keys) reading keys and values through the
// block table, and the sigmoid output gate.
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
// Query rows per block of the tiled kernels (prefill: consecutive tokens of one sequence; decode:
// the query heads of one KV head), 4 warps each owning rows w, w+4, w+8, w+12.
#define ATT_QT 16
#define ATT_WARPS 4
#define ATT_RPW (ATT_QT / ATT_WARPS)
#define ATT_ND (ATT_HD_MAX / 32)
// Row stride (elements) of the shared q/k/v tiles: an odd number of 32-bit words for even hd, so
// the lanes of a warp, each reading its own key at one dim, hit 32 different banks.
// The host mirrors it (ops::attn_shared_bytes).
#define ATT_LD(hd) ((hd) + (int)(sizeof(act_t) == 2 ? 2 : 1))

// Online-softmax state of the query rows a warp owns: max m, sum l, unnormalised output acc
// (lane owns dims lane + 32k).
struct AttRows {
    float m[ATT_RPW], l[ATT_RPW], acc[ATT_RPW][ATT_ND];
};

__device__ __forceinline__ void att_rows_init(AttRows& st) {
    for (int i = 0; i < ATT_RPW; i++) {
        st.m[i] = -INFINITY;
        st.l[i] = 0.0f;
        for (int k = 0; k < ATT_ND; k++) st.acc[i][k] = 0.0f;
    }
}

// Attend the query rows staged in qs [nrows, ld] (row r sees keys up to lim[r], both in shared
// memory) to keys [k0, k1) of block-table row `btrow`, KV head g. Keys and values are staged kt
// at a time in ks / vs [kt, ld] (one block-table lookup per element, every element read once
// per block); scores with lanes over keys (lane j: key j0 + j, a dot product over hd against the
// broadcast query row), the tile's max and sum by warp reductions, then the weighted sum with
// lanes over dims (each probability broadcast by a shuffle). Every thread of the block must call
// it with the same k0, k1 (it has barriers); the first barrier also publishes qs and lim.
__device__ void att_tile_pass(const act_t* qs, const int* lim, int nrows, int k0, int k1,
                              const act_t* __restrict__ kc, const act_t* __restrict__ vc,
                              const int* __restrict__ bt, int bt_stride, int btrow, int hkv, int g,
                              int bs, int hd, int kt, act_t* ks, act_t* vs, float scale, AttRows& st) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, ld = ATT_LD(hd);
    for (int j0 = k0; j0 < k1; j0 += kt) {
        int n = min(kt, k1 - j0);
        __syncthreads();  // the previous tile is consumed (and qs / lim are written)
        for (int i = threadIdx.x; i < n * hd; i += blockDim.x) {
            int j = i / hd, d = i % hd;
            long long off = kv_row(bt, bt_stride, btrow, j0 + j, hkv, g, bs, hd) + d;
            ks[j * ld + d] = kc[off];
            vs[j * ld + d] = vc[off];
        }
        __syncthreads();
        float s[ATT_RPW];
        for (int i = 0; i < ATT_RPW; i++) s[i] = 0.0f;
        if (lane < n) {
            const act_t* kr = ks + lane * ld;
            for (int d = 0; d < hd; d++) {
                float kd = a2f(kr[d]);
                for (int i = 0; i < ATT_RPW; i++) {
                    int r = w + ATT_WARPS * i;
                    if (r < nrows) s[i] += a2f(qs[r * ld + d]) * kd;
                }
            }
        }
        for (int i = 0; i < ATT_RPW; i++) {
            int r = w + ATT_WARPS * i;
            if (r >= nrows || j0 > lim[r]) continue;  // uniform over the warp
            float si = (lane < n && j0 + lane <= lim[r]) ? s[i] * scale : -INFINITY;
            float mn = fmaxf(st.m[i], warp_max(si));  // finite: key j0 is visible
            float corr = __expf(st.m[i] - mn);
            float p = si == -INFINITY ? 0.0f : __expf(si - mn);
            st.l[i] = st.l[i] * corr + warp_sum(p);
            for (int k = 0; k < ATT_ND; k++) st.acc[i][k] *= corr;
            int nn = min(n, lim[r] + 1 - j0);
            for (int j = 0; j < nn; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j);
                const act_t* vr = vs + j * ld;
                for (int k = 0; k < ATT_ND; k++) {
                    int d = lane + 32 * k;
                    if (d < hd) st.acc[i][k] += pj * a2f(vr[d]);
                }
            }
            st.m[i] = mn;
        }
    }
}

// Prefill attention (flash-style, tiled): one block per (tile of ATT_QT consecutive packed query
// tokens, query head); a tile that spans sequences is processed one sequence (segment) at a time.
// A segment's query rows are staged once in shared memory, then the keys 0..=max position of its
// sequence pass through shared memory kt at a time (read through its block-table row), each read
// once for the ATT_QT rows; a query at cache position p sees keys 0..=p (causal); online softmax.
// q [T, Hq, hd]; out [T, Hq, hd]. grid = (ceil(T / ATT_QT), Hq), block = 32·ATT_WARPS,
// dynamic shared = (ATT_QT + 2·kt)·ATT_LD(hd)·sizeof(act_t); hd <= ATT_HD_MAX.
extern "C" __global__ void KERNEL(attn_prefill)(const act_t* __restrict__ q, const act_t* __restrict__ kc,
                                        const act_t* __restrict__ vc, act_t* __restrict__ out,
                                        const int* __restrict__ cache_pos, const int* __restrict__ seq_of_tok,
                                        const int* __restrict__ bt, int bt_stride,
                                        int hq, int hkv, int hd, int bs, float scale, int t_total, int kt) {
    DYNAMIC_SHARED(act_t, att_sh);
    __shared__ int lim[ATT_QT];
    int ld = ATT_LD(hd);
    act_t* qs = att_sh;
    act_t* ks = qs + ATT_QT * ld;
    act_t* vs = ks + kt * ld;
    int h = blockIdx.y, g = h / (hq / hkv);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int tile1 = min(t_total, (int)blockIdx.x * ATT_QT + ATT_QT);
    for (int s0 = blockIdx.x * ATT_QT; s0 < tile1;) {
        int row = seq_of_tok[s0], s1 = s0 + 1, pmax = cache_pos[s0];
        while (s1 < tile1 && seq_of_tok[s1] == row) pmax = max(pmax, cache_pos[s1++]);
        int nrows = s1 - s0;
        __syncthreads();  // the previous segment's rows are consumed
        for (int i = threadIdx.x; i < nrows * hd; i += blockDim.x) {
            int r = i / hd, d = i % hd;
            qs[r * ld + d] = q[((long long)(s0 + r) * hq + h) * hd + d];
        }
        if ((int)threadIdx.x < nrows) lim[threadIdx.x] = cache_pos[s0 + threadIdx.x];
        AttRows st;
        att_rows_init(st);
        att_tile_pass(qs, lim, nrows, 0, pmax + 1, kc, vc, bt, bt_stride, row, hkv, g, bs, hd, kt, ks, vs,
                      scale, st);
        for (int i = 0; i < ATT_RPW; i++) {
            int r = w + ATT_WARPS * i;
            if (r >= nrows) continue;
            act_t* o = out + ((long long)(s0 + r) * hq + h) * hd;
            for (int k = 0; k < ATT_ND; k++) {
                int d = lane + 32 * k;
                if (d < hd) o[d] = f2a(st.acc[i][k] / st.l[i]);
            }
        }
        s0 = s1;
    }
}

// Decode attention, split-KV: one block per (sequence, kv head, split); the block's query rows
// are the Hq/Hkv query heads of that kv head (GQA: each cache row is staged once for the group),
// all seeing keys 0..len-1; the split's keys [sp·split_len, min(len, (sp+1)·split_len)) pass
// through shared memory kt at a time as in attn_prefill (lanes over keys, warp reductions).
// The host picks the split count from the step's longest context (ops::decode_splits).
// Partial results (unnormalised acc, max m, sum l; an empty split gives m = -inf, l = 0) go to
// part_* for attn_decode_combine. q [B, Hq, hd] (one token per sequence), lens[b] = keys
// visible (cache length incl. the new token), read through block-table row b.
// block = 32·ATT_WARPS, Hq/Hkv <= ATT_QT, dynamic shared as attn_prefill.
extern "C" __global__ void KERNEL(attn_decode_split)(const act_t* __restrict__ q, const act_t* __restrict__ kc,
                                             const act_t* __restrict__ vc, const int* __restrict__ lens,
                                             const int* __restrict__ bt, int bt_stride,
                                             float* __restrict__ part_acc,
                                             float* __restrict__ part_ml, int hq, int hkv, int hd,
                                             int bs, int split_len, float scale, int kt) {
    DYNAMIC_SHARED(act_t, att_sh);
    __shared__ int lim[ATT_QT];
    int b = blockIdx.x, g = blockIdx.y, sp = blockIdx.z, nsplit = gridDim.z;
    int grp = hq / hkv, ld = ATT_LD(hd);
    act_t* qs = att_sh;
    act_t* ks = qs + ATT_QT * ld;
    act_t* vs = ks + kt * ld;
    int len = lens[b];
    int j0 = sp * split_len, j1 = min(len, j0 + split_len);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < grp * hd; i += blockDim.x) {
        int r = i / hd, d = i % hd;
        qs[r * ld + d] = q[((long long)b * hq + g * grp + r) * hd + d];
    }
    if ((int)threadIdx.x < grp) lim[threadIdx.x] = len - 1;
    AttRows st;
    att_rows_init(st);
    if (j0 < j1)
        att_tile_pass(qs, lim, grp, j0, j1, kc, vc, bt, bt_stride, b, hkv, g, bs, hd, kt, ks, vs, scale, st);
    for (int i = 0; i < ATT_RPW; i++) {
        int r = w + ATT_WARPS * i;
        if (r >= grp) continue;
        long long pi = ((long long)b * hq + g * grp + r) * nsplit + sp;
        for (int k = 0; k < ATT_ND; k++) {
            int d = lane + 32 * k;
            if (d < hd) part_acc[pi * hd + d] = st.acc[i][k];
        }
        if (lane == 0) { part_ml[pi * 2] = st.m[i]; part_ml[pi * 2 + 1] = st.l[i]; }
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
