// Gated DeltaNet: causal depthwise conv + SiLU (prefill over a sequence, cached decode update),
// gates (beta, log-decay g), L2-normalisation of q/k, and the delta rule with an fp32 state:
// chunked (WY form) for prefill, recurrent for decode. Sequences are packed: tokens of sequence
// b are rows cu[b]..cu[b+1] of the batch; per-sequence states live in pools indexed by slots[b].

// Causal conv over packed sequences: x [T, C] raw projections, conv state pool [slots, C, K-1]
// (the previous K-1 inputs, oldest first), w [C, K]. y [T, C] = SiLU(conv). Updates the state
// to the last K-1 inputs. grid = (ceil(C/128), B), block = 128 (one thread per channel).
#define CONV_MAX_K 8
extern "C" __global__ void KERNEL(causal_conv)(const act_t* __restrict__ x, float* __restrict__ state,
                                       const act_t* __restrict__ w, act_t* __restrict__ y,
                                       const int* __restrict__ cu, const int* __restrict__ slots,
                                       int C, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (c >= C) return;
    float* st = state + ((long long)slots[b] * C + c) * (K - 1);
    // K <= CONV_MAX_K (checked on the host); the window and weights stay in registers: every
    // loop runs over the constant CONV_MAX_K, unrolled, so each index is a compile-time constant
    // (predicated by j < K), never a runtime one (which would put the arrays in local memory)
    float win[CONV_MAX_K], wk[CONV_MAX_K];
#pragma unroll
    for (int j = 0; j < CONV_MAX_K; j++) {
        win[j] = j < K - 1 ? st[j] : 0.0f;
        wk[j] = j < K ? a2f(w[(long long)c * K + j]) : 0.0f;
    }
    for (int t = cu[b]; t < cu[b + 1]; t++) {
        float xt = a2f(x[(long long)t * C + c]);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < CONV_MAX_K; j++) {
            if (j == K - 1) win[j] = xt;
            if (j < K) s += wk[j] * win[j];
        }
        y[(long long)t * C + c] = f2a(siluf_(a2f(f2a(s))));
#pragma unroll
        for (int j = 0; j + 1 < CONV_MAX_K; j++)
            if (j < K - 1) win[j] = win[j + 1];
    }
#pragma unroll
    for (int j = 0; j < CONV_MAX_K; j++)
        if (j < K - 1) st[j] = win[j];
}


// beta = sigmoid(b), g = -exp(A_log[h]) * softplus(a + dt_bias[h]) of element i of [T, Hv].
__device__ __forceinline__ void gdn_gate_at(const act_t* bb, const act_t* aa, const float* a_log,
                                            const float* dt_bias, float* beta, float* g, long long i, int h) {
    beta[i] = sigmoidf_(a2f(bb[i]));
    g[i] = -expf(a_log[h]) * softplusf_(a2f(aa[i]) + dt_bias[h]);
}

// Per token t and value head h: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias).
// b, a [T, Hv] act_t; beta, g [T, Hv] f32. grid-stride over T*Hv.
extern "C" __global__ void KERNEL(gdn_gates)(const act_t* __restrict__ bb, const act_t* __restrict__ aa,
                                     const float* __restrict__ a_log, const float* __restrict__ dt_bias,
                                     float* __restrict__ beta, float* __restrict__ g, int hv, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        gdn_gate_at(bb, aa, a_log, dt_bias, beta, g, i, (int)(i % hv));
}

// From the conv output y [T, 2*Hk*dk + Hv*dv] write fp32 q̂ = q/|q|·dk^-½, k̂ = k/|k| ([T, Hk, dk])
// and v ([T, Hv, dv]). When `bb` is given the block also computes the gates of its value heads
// (as gdn_gates: one launch fewer per GDN layer). grid = (T, Hk), block = 128 (dk <= 1024).
extern "C" __global__ void KERNEL(gdn_qkv_prep)(const act_t* __restrict__ y, float* __restrict__ qn, float* __restrict__ kn,
                                        float* __restrict__ v, const act_t* __restrict__ bb,
                                        const act_t* __restrict__ aa, const float* __restrict__ a_log,
                                        const float* __restrict__ dt_bias, float* __restrict__ beta,
                                        float* __restrict__ g, int hk, int hv, int dk, int dv, float eps) {
    __shared__ float scratch[32];
    long long t = blockIdx.x;
    int h = blockIdx.y;
    int conv = 2 * hk * dk + hv * dv;
    const act_t* row = y + t * conv;
    float sq = 0.0f, sk = 0.0f;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        float a = a2f(row[h * dk + i]), b = a2f(row[hk * dk + h * dk + i]);
        sq += a * a; sk += b * b;
    }
    float rq = rsqrtf(block_sum(sq, scratch) + eps) * rsqrtf((float)dk);
    float rk = rsqrtf(block_sum(sk, scratch) + eps);
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        qn[(t * hk + h) * dk + i] = a2f(row[h * dk + i]) * rq;
        kn[(t * hk + h) * dk + i] = a2f(row[hk * dk + h * dk + i]) * rk;
    }
    int per = hv / hk;  // this block also copies the value heads h*per .. h*per+per-1
    for (int i = threadIdx.x; i < per * dv; i += blockDim.x) {
        int vh = h * per + i / dv, c = i % dv;
        v[(t * hv + vh) * dv + c] = a2f(row[2 * hk * dk + vh * dv + c]);
    }
    if (bb)
        for (int i = threadIdx.x; i < per; i += blockDim.x) gdn_gate_at(bb, aa, a_log, dt_bias, beta, g, t * hv + h * per + i, h * per + i);
}

// Recurrent delta rule for decode (one token per sequence), state pool [slots, Hv, dk, dv] f32,
//   S' = e^g S + k δᵀ,  δ = β(v - e^g Sᵀk),  o = S'ᵀq = e^g Sᵀq + δ (k·q),
// so each state element is read once (into a register) and written once per step: pass 1 reads
// the thread's rows of S and forms its partial Sᵀk, Sᵀq and k·q; the parts are summed through
// shared memory; pass 2 writes S' from the registers. Columns are independent, so they are split
// over blocks: grid = (B, Hv, ceil(dv / C)), block = C · P threads with P = ceil(dk / GDN_ROWS)
// row parts and C = min(dv, GDN_REC_THREADS / P) columns (ops::gdn_recurrent_block): thread
// (p, c) owns column j = blockIdx.z·C + c, rows p·GDN_ROWS .. +GDN_ROWS (coalesced over c). At
// most GDN_REC_THREADS threads, the launch bound: the 32 state rows each thread keeps in
// registers (~160 registers) fit the register file only at that size (dk = dv = 128: P = 4,
// C = 64, 256 threads, 2 column blocks per head); one block per SM is asked for, so ptxas keeps
// everything in registers (with two it capped them at 128 and spilled).
// Dynamic shared memory: q[dk], k[dk], parts [2·P·C + P] floats.
#define GDN_ROWS 32
#define GDN_REC_THREADS 256
extern "C" __launch_bounds__(GDN_REC_THREADS, 1) __global__ void KERNEL(gdn_recurrent)(const float* __restrict__ qn, const float* __restrict__ kn,
                                         const float* __restrict__ v, const float* __restrict__ beta,
                                         const float* __restrict__ g, float* __restrict__ state,
                                         act_t* __restrict__ out, const int* __restrict__ slots,
                                         int hk, int hv, int dk, int dv) {
    DYNAMIC_SHARED(float, sh);
    int b = blockIdx.x, h = blockIdx.y, kh = h / (hv / hk);
    int P = (dk + GDN_ROWS - 1) / GDN_ROWS, C = blockDim.x / P;
    int c = threadIdx.x % C, p = threadIdx.x / C, j = blockIdx.z * C + c;
    float* qs = sh; float* ks = sh + dk; float* part = sh + 2 * dk;  // [P][C] Sᵀk, [P][C] Sᵀq, [P] k·q
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        qs[i] = qn[((long long)b * hk + kh) * dk + i];
        ks[i] = kn[((long long)b * hk + kh) * dk + i];
    }
    __syncthreads();
    // threads past P·C, or on a column past dv (the last column block), only join the barrier
    bool live = p < P && j < dv;
    float* S = state + ((long long)slots[b] * hv + h) * dk * dv;
    int i0 = p * GDN_ROWS, rows = live ? min(GDN_ROWS, dk - i0) : 0;
    float s[GDN_ROWS];
    float sk = 0.0f, sq = 0.0f, kq = 0.0f;
#pragma unroll
    for (int r = 0; r < GDN_ROWS; r++) {
        if (r < rows) {
            float x = S[(long long)(i0 + r) * dv + j];
            s[r] = x;
            sk += x * ks[i0 + r];
            sq += x * qs[i0 + r];
            kq += ks[i0 + r] * qs[i0 + r];
        }
    }
    if (live) {
        part[p * C + c] = sk;
        part[(P + p) * C + c] = sq;
        if (c == 0) part[2 * P * C + p] = kq;
    }
    __syncthreads();
    if (!live) return;
    float a = 0.0f, cs = 0.0f, kqt = 0.0f;
    for (int pp = 0; pp < P; pp++) { a += part[pp * C + c]; cs += part[(P + pp) * C + c]; kqt += part[2 * P * C + pp]; }
    float decay = expf(g[(long long)b * hv + h]), bt = beta[(long long)b * hv + h];
    float d = bt * (v[((long long)b * hv + h) * dv + j] - decay * a);
#pragma unroll
    for (int r = 0; r < GDN_ROWS; r++)
        if (r < rows) S[(long long)(i0 + r) * dv + j] = decay * s[r] + ks[i0 + r] * d;
    if (p == 0) out[((long long)b * hv + h) * dv + j] = f2a(decay * cs + d * kqt);
}

#define GDN_CHUNK 64
// Chunked delta rule (prefill). Per chunk of c <= GDN_CHUNK tokens (local i, j):
//   γ = cumsum g;  A_ij = β_i (k̂_i·k̂_j) e^{γ_i-γ_j} (j<i);  U = L⁻¹(β V);  W = L⁻¹(β e^γ K̂)
//   Pm_ij = (q̂_i·k̂_j) e^{γ_i-γ_j} (j<=i)
//   Vn = U - W S;  O_i = e^{γ_i} q̂_i S + Σ_{j<=i} Pm_ij Vn_j
//   S = e^{γ_c-1} S + Σ_j e^{γ_c-1 - γ_j} k̂_j Vn_jᵀ
// U, W, Pm depend on the chunk only, so they are computed for every chunk of every sequence in
// parallel (gdn_chunk_prep); the state pass (gdn_chunk_state, one block per (sequence, value
// head)) then only does Vn, O and the state update, chunks in order. gdn_chunked is the
// one-kernel form (everything in the state pass) for a scratch of one chunk per (sequence, head).
// The parts below are called by every thread of a block of 256 (they contain barriers).
#define GDN_QH(t) (qn + ((long long)(t) * hk + kh) * dk)
#define GDN_KH(t) (kn + ((long long)(t) * hk + kh) * dk)
#define GDN_VV(t) (v + ((long long)(t) * hv + h) * dv)

// γ (cumulative log-decay) and β of the chunk's tokens t0..t0+c-1 into shared gam / bet.
__device__ void gdn_chunk_gates(const float* __restrict__ beta, const float* __restrict__ g, int t0, int c,
                                int hv, int h, float* gam, float* bet) {
    if (threadIdx.x == 0) {
        float acc = 0.0f;
        for (int i = 0; i < c; i++) { acc += g[(long long)(t0 + i) * hv + h]; gam[i] = acc; bet[i] = beta[(long long)(t0 + i) * hv + h]; }
    }
    __syncthreads();
}

// A (strict lower part, in shared A) and the forward substitutions U [c, dv], W [c, dk] (rows in
// order, columns in parallel).
__device__ void gdn_chunk_uw(const float* __restrict__ kn, const float* __restrict__ v, int t0, int c, int hk,
                             int kh, int hv, int h, int dk, int dv, const float* gam, const float* bet,
                             float (*A)[GDN_CHUNK], float* U, float* W) {
    int nth = blockDim.x, tid = threadIdx.x;
    for (int p = tid; p < c * c; p += nth) {
        int i = p / c, j = p % c;
        float a = 0.0f;
        if (j < i) {
            const float* ki = GDN_KH(t0 + i); const float* kj = GDN_KH(t0 + j);
            for (int r = 0; r < dk; r++) a += ki[r] * kj[r];
            a *= bet[i] * expf(gam[i] - gam[j]);
        }
        A[i][j] = a;
    }
    __syncthreads();
    for (int i = 0; i < c; i++) {
        for (int col = tid; col < dv + dk; col += nth) {
            float x;
            if (col < dv) {
                x = bet[i] * GDN_VV(t0 + i)[col];
                for (int j = 0; j < i; j++) x -= A[i][j] * U[j * dv + col];
                U[i * dv + col] = x;
            } else {
                int r = col - dv;
                x = bet[i] * expf(gam[i]) * GDN_KH(t0 + i)[r];
                for (int j = 0; j < i; j++) x -= A[i][j] * W[j * dk + r];
                W[i * dk + r] = x;
            }
        }
        __syncthreads();
    }
}

// Pm (j <= i, zero above the diagonal) into P [c, GDN_CHUNK], then a barrier.
__device__ void gdn_chunk_pm(const float* __restrict__ qn, const float* __restrict__ kn, int t0, int c, int hk,
                             int kh, int dk, const float* gam, float* P) {
    for (int p = threadIdx.x; p < c * c; p += blockDim.x) {
        int i = p / c, j = p % c;
        float a = 0.0f;
        if (j <= i) {
            const float* qi = GDN_QH(t0 + i); const float* kj = GDN_KH(t0 + j);
            for (int r = 0; r < dk; r++) a += qi[r] * kj[r];
            a *= expf(gam[i] - gam[j]);
        }
        P[i * GDN_CHUNK + j] = a;
    }
    __syncthreads();
}

// The state-dependent part: Vn = U - W S (in place in U), the outputs, the state update.
__device__ void gdn_chunk_apply(const float* __restrict__ qn, const float* __restrict__ kn, int t0, int c,
                                int hk, int kh, int hv, int h, int dk, int dv, const float* gam,
                                const float* P, float* U, const float* W, float* S, act_t* __restrict__ out) {
    int nth = blockDim.x, tid = threadIdx.x;
    for (int p = tid; p < c * dv; p += nth) {
        int i = p / dv, col = p % dv;
        float x = U[i * dv + col];
        for (int r = 0; r < dk; r++) x -= W[i * dk + r] * S[r * dv + col];
        U[i * dv + col] = x;
    }
    __syncthreads();
    for (int p = tid; p < c * dv; p += nth) {
        int i = p / dv, col = p % dv;
        const float* qi = GDN_QH(t0 + i);
        float o = 0.0f;
        for (int r = 0; r < dk; r++) o += qi[r] * S[r * dv + col];
        o *= expf(gam[i]);
        for (int j = 0; j <= i; j++) o += P[i * GDN_CHUNK + j] * U[j * dv + col];
        out[((long long)(t0 + i) * hv + h) * dv + col] = f2a(o);
    }
    __syncthreads();
    float gl = gam[c - 1];
    for (int p = tid; p < dk * dv; p += nth) {
        int r = p / dv, col = p % dv;
        float s = expf(gl) * S[p];
        for (int j = 0; j < c; j++) s += expf(gl - gam[j]) * GDN_KH(t0 + j)[r] * U[j * dv + col];
        S[p] = s;
    }
    __syncthreads();
}

// One-kernel chunked delta rule: one block per (sequence, value head), chunks in order, U/W in
// a global scratch [B*Hv, GDN_CHUNK, dk+dv] (fp32), A then Pm in shared memory. block = 256.
extern "C" __global__ void KERNEL(gdn_chunked)(const float* __restrict__ qn, const float* __restrict__ kn,
                                       const float* __restrict__ v, const float* __restrict__ beta,
                                       const float* __restrict__ g, float* __restrict__ state,
                                       act_t* __restrict__ out, float* __restrict__ scratch,
                                       const int* __restrict__ cu, const int* __restrict__ slots,
                                       int hk, int hv, int dk, int dv) {
    __shared__ float A[GDN_CHUNK][GDN_CHUNK];   // strict lower part: A; later Pm (incl. diagonal)
    __shared__ float gam[GDN_CHUNK];
    __shared__ float bet[GDN_CHUNK];
    int b = blockIdx.x, h = blockIdx.y, kh = h / (hv / hk);
    float* S = state + ((long long)slots[b] * hv + h) * dk * dv;
    float* U = scratch + ((long long)b * hv + h) * GDN_CHUNK * (dk + dv);  // [C, dv]
    float* W = U + GDN_CHUNK * dv;                                          // [C, dk]
    for (int t0 = cu[b]; t0 < cu[b + 1]; t0 += GDN_CHUNK) {
        int c = min(GDN_CHUNK, cu[b + 1] - t0);
        gdn_chunk_gates(beta, g, t0, c, hv, h, gam, bet);
        gdn_chunk_uw(kn, v, t0, c, hk, kh, hv, h, dk, dv, gam, bet, A, U, W);
        gdn_chunk_pm(qn, kn, t0, c, hk, kh, dk, gam, &A[0][0]);
        gdn_chunk_apply(qn, kn, t0, c, hk, kh, hv, h, dk, dv, gam, &A[0][0], U, W, S, out);
    }
}

// Floats of the parallel form's scratch per (chunk, value head): U [C, dv], W [C, dk], Pm [C, C].
#define GDN_CHUNK_SCR(dk, dv) ((long long)GDN_CHUNK * ((dk) + (dv) + GDN_CHUNK))

// Parallel form, part 1: U, W and Pm of every chunk of every sequence, one block per (chunk,
// value head); chunks are numbered over the batch in sequence order (sequence b's first chunk is
// Σ_{b'<b} ceil(len_b' / C)), a block past the last chunk exits. Writes the chunk's slice of
// scratch [chunks, Hv, C·(dv + dk + C)]. grid = (ceil(T/C) + B, Hv), block = 256.
extern "C" __global__ void KERNEL(gdn_chunk_prep)(const float* __restrict__ qn, const float* __restrict__ kn,
                                          const float* __restrict__ v, const float* __restrict__ beta,
                                          const float* __restrict__ g, float* __restrict__ scratch,
                                          const int* __restrict__ cu, int nseq, int hk, int hv, int dk, int dv) {
    __shared__ float A[GDN_CHUNK][GDN_CHUNK];
    __shared__ float gam[GDN_CHUNK];
    __shared__ float bet[GDN_CHUNK];
    int gc = blockIdx.x, h = blockIdx.y, kh = h / (hv / hk);
    int b = 0, first = 0;  // the chunk's sequence and that sequence's first chunk
    for (; b < nseq; b++) {
        int n = (cu[b + 1] - cu[b] + GDN_CHUNK - 1) / GDN_CHUNK;
        if (gc < first + n) break;
        first += n;
    }
    if (b == nseq) return;  // uniform over the block
    int t0 = cu[b] + (gc - first) * GDN_CHUNK, c = min(GDN_CHUNK, cu[b + 1] - t0);
    float* U = scratch + ((long long)gc * hv + h) * GDN_CHUNK_SCR(dk, dv);
    float* W = U + GDN_CHUNK * dv;
    float* P = W + GDN_CHUNK * dk;
    gdn_chunk_gates(beta, g, t0, c, hv, h, gam, bet);
    gdn_chunk_uw(kn, v, t0, c, hk, kh, hv, h, dk, dv, gam, bet, A, U, W);
    gdn_chunk_pm(qn, kn, t0, c, hk, kh, dk, gam, P);
}

// Parallel form, part 2: the state pass, one block per (sequence, value head), chunks in order:
// Pm staged in shared memory, then Vn, outputs and the fp32 state update from gdn_chunk_prep's
// U and W. grid = (B, Hv), block = 256.
extern "C" __global__ void KERNEL(gdn_chunk_state)(const float* __restrict__ qn, const float* __restrict__ kn,
                                           const float* __restrict__ beta, const float* __restrict__ g,
                                           float* __restrict__ state, act_t* __restrict__ out,
                                           float* __restrict__ scratch, const int* __restrict__ cu,
                                           const int* __restrict__ slots, int hk, int hv, int dk, int dv) {
    __shared__ float Pm[GDN_CHUNK * GDN_CHUNK];
    __shared__ float gam[GDN_CHUNK];
    __shared__ float bet[GDN_CHUNK];
    int b = blockIdx.x, h = blockIdx.y, kh = h / (hv / hk);
    float* S = state + ((long long)slots[b] * hv + h) * dk * dv;
    int gc = 0;
    for (int bb = 0; bb < b; bb++) gc += (cu[bb + 1] - cu[bb] + GDN_CHUNK - 1) / GDN_CHUNK;
    for (int t0 = cu[b]; t0 < cu[b + 1]; t0 += GDN_CHUNK, gc++) {
        int c = min(GDN_CHUNK, cu[b + 1] - t0);
        float* U = scratch + ((long long)gc * hv + h) * GDN_CHUNK_SCR(dk, dv);
        float* W = U + GDN_CHUNK * dv;
        const float* P = W + GDN_CHUNK * dk;
        for (int p = threadIdx.x; p < c * GDN_CHUNK; p += blockDim.x) Pm[p] = P[p];
        gdn_chunk_gates(beta, g, t0, c, hv, h, gam, bet);  // its barrier also publishes Pm
        gdn_chunk_apply(qn, kn, t0, c, hk, kh, hv, h, dk, dv, gam, Pm, U, W, S, out);
    }
}
#undef GDN_QH
#undef GDN_KH
#undef GDN_VV
