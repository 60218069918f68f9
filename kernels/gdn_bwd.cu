// Backward of the Gated DeltaNet's causal depthwise conv + SiLU (kernels/gdn.cu `causal_conv`)
// over packed sequences, through the conv state: the forward's starting state (the K-1 inputs
// before each sequence, fp32 [slots, C, K-1], oldest first; null = zero history) enters the
// pre-activations, and its gradient is returned (`dstate`, same layout; may be null).
// pre[t, c] = Σ_j w[c, j]·in(t + j − (K−1)), y = SiLU(pre); given dy = dL/dy:
//   dpre = dy·SiLU'(pre),  dx[u] = Σ_j dpre[u + K−1 − j]·w[j],  dw[c, j] += Σ_t dpre[t]·in(t + j − (K−1)).
// One thread per channel walks every sequence backwards in time (sequences in order, so the fp32
// weight gradient is summed in a fixed order: deterministic). grid = ceil(C/128), block = 128.

#define CONV_K_MAX 8

extern "C" __global__ void KERNEL(causal_conv_bwd)(const act_t* __restrict__ x, const float* __restrict__ state,
                                           const act_t* __restrict__ w, const act_t* __restrict__ dy,
                                           act_t* __restrict__ dx, float* __restrict__ dstate,
                                           float* __restrict__ dw, const int* __restrict__ cu,
                                           const int* __restrict__ slots, int B, int C, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float wk[CONV_K_MAX], dwk[CONV_K_MAX];
    for (int j = 0; j < K; j++) { wk[j] = a2f(w[(long long)c * K + j]); dwk[j] = 0.0f; }
    for (int b = 0; b < B; b++) {
        int s = cu[b], e = cu[b + 1];
        const float* st = state ? state + ((long long)slots[b] * C + c) * (K - 1) : nullptr;
        // in(u) for u in [s − (K−1), e): the state before the sequence, then x.
#define CONV_IN(u) ((u) >= s ? a2f(x[(long long)(u) * C + c]) : (st ? st[(K - 1) + (u) - s] : 0.0f))
        float dpw[CONV_K_MAX];  // dpw[m] = dpre[t + m] (0 past the sequence's end)
        for (int m = 0; m < K; m++) dpw[m] = 0.0f;
        for (int t = e - 1; t >= s; t--) {
            for (int m = K - 1; m > 0; m--) dpw[m] = dpw[m - 1];
            float pre = 0.0f;
            for (int j = 0; j < K; j++) pre += wk[j] * CONV_IN(t + j - (K - 1));
            float dp = a2f(dy[(long long)t * C + c]) * silu_gradf_(pre);
            dpw[0] = dp;
            for (int j = 0; j < K; j++) dwk[j] += dp * CONV_IN(t + j - (K - 1));
            float g = 0.0f;
            for (int m = 0; m < K; m++) g += dpw[m] * wk[K - 1 - m];
            dx[(long long)t * C + c] = f2a(g);
        }
        // dstate[i] is in(u) for u = s − (K−1) + i: Σ_m dpre[u + m]·w[K−1−m] over u + m >= s.
        if (dstate) {
            float* ds = dstate + ((long long)slots[b] * C + c) * (K - 1);
            for (int i = 0; i < K - 1; i++) {
                float g = 0.0f;
                for (int m = K - 1 - i; m < K; m++) g += dpw[m - (K - 1 - i)] * wk[K - 1 - m];
                ds[i] = g;
            }
        }
#undef CONV_IN
    }
    for (int j = 0; j < K; j++) dw[(long long)c * K + j] += dwk[j];
}

// Gates backward: β = σ(b), g = −exp(A_log[h])·softplus(a + dt_bias[h]). From dβ, dg [T, Hv] (fp32,
// the delta rule's backward): db = dβ·β(1 − β), da = dg·(−exp(A_log))·softplus'(a + dt_bias)
// (act_t), and the per-head parameter gradients d_alog[h] += Σ_t dg·g, d_dt[h] += Σ_t da, summed
// over t in order by one thread per head. grid = ceil(Hv/128), block = 128.
extern "C" __global__ void KERNEL(gdn_gates_bwd)(const act_t* __restrict__ bb, const act_t* __restrict__ aa,
                                         const float* __restrict__ a_log, const float* __restrict__ dt_bias,
                                         const float* __restrict__ dbeta, const float* __restrict__ dg,
                                         act_t* __restrict__ db, act_t* __restrict__ da,
                                         float* __restrict__ d_alog, float* __restrict__ d_dt, int T, int hv) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= hv) return;
    float ea = expf(a_log[h]), sa = 0.0f, sd = 0.0f;
    for (int t = 0; t < T; t++) {
        long long i = (long long)t * hv + h;
        float beta = sigmoidf_(a2f(bb[i])), x = a2f(aa[i]) + dt_bias[h];
        db[i] = f2a(dbeta[i] * beta * (1.0f - beta));
        float sp_grad = x > 20.0f ? 1.0f : sigmoidf_(x);
        float dav = dg[i] * -ea * sp_grad;
        da[i] = f2a(dav);
        sa += dg[i] * (-ea * softplusf_(x));
        sd += dav;
    }
    d_alog[h] += sa;
    d_dt[h] += sd;
}

// ---------------------------------------------------------------- the gated delta rule
// Backward of the delta rule (kernels/gdn.cu gdn_chunked, from zero states; one state per
// (sequence, value head h), key head kh = h / (hv/hk) as in the forward), the same math as
// train::layers::delta_rule::backward. Per step t (recurrent form, fp32 state S [dk, dv]):
//   S̃ = e^g S_prev,  m = S̃ᵀk,  δ = β(v − m),  S = S̃ + k δᵀ,  o = Sᵀq.
// Backward of step t, dS the gradient w.r.t. S after the step:
//   dS += q doᵀ;  dq = S do;  dδ = dSᵀk;  dk = dS δ + S̃ dm  (dm = −β dδ);  dv = β dδ;
//   dβ = dδ·(v − m);  dS̃ = dS + k dmᵀ;  dg = Σ dS̃ ∘ S̃;  dS ← e^g dS̃.
// Pass 1 runs each sequence forward, saving the state at the start of every chunk of `chunk`
// tokens in `starts` ([Σ_b chunks_b, hv, dk, dv]; sequence b's chunks begin at coff[b]). Pass 2
// walks the chunks backwards: the chunk's per-step states are recomputed from its start into
// `work` ([B·hv, chunk + 2, dk, dv]: chunk + 1 states, then dS), then back-propagated step by
// step. One block per (sequence, value head), thread j < dv owns column j of S and dS (column
// work needs no reduction); the sums over columns (dq, dk per row; dβ, dg) are done after a
// barrier by one thread per row (or thread 0) in column order: deterministic. dq, dk are per
// value head ([t, hv, dk]; gdn_heads_sum adds the heads of each key head). grid = (B, hv),
// block = dv rounded up to a warp (dv <= 256).
#define DELTA_BWD_MAX 256

// One recurrent step on column j (prev may equal next: each element is read before written).
// Returns m_j = (e^g S_prev)ᵀk at column j.
__device__ __forceinline__ float delta_step_col(const float* prev, float* next, const float* k, float vj,
                                                float bt, float decay, int dk, int dv, int j) {
    float m = 0.0f;
    for (int a = 0; a < dk; a++) m += decay * prev[a * dv + j] * k[a];
    float d = bt * (vj - m);
    for (int a = 0; a < dk; a++) next[a * dv + j] = decay * prev[a * dv + j] + k[a] * d;
    return m;
}

extern "C" __global__ void KERNEL(gdn_delta_bwd)(const float* __restrict__ qn, const float* __restrict__ kn,
                                         const float* __restrict__ v, const float* __restrict__ beta,
                                         const float* __restrict__ g, const act_t* __restrict__ dout,
                                         float* __restrict__ dqh, float* __restrict__ dkh, float* __restrict__ dvo,
                                         float* __restrict__ dbeta, float* __restrict__ dg,
                                         float* __restrict__ starts, float* __restrict__ work,
                                         const int* __restrict__ cu, const int* __restrict__ coff,
                                         int hk, int hv, int dk, int dv, int chunk) {
    __shared__ float s_do[DELTA_BWD_MAX], s_del[DELTA_BWD_MAX], s_dm[DELTA_BWD_MAX];
    __shared__ float s_pb[DELTA_BWD_MAX], s_pg[DELTA_BWD_MAX];  // per-column parts of dβ, dg
    int b = blockIdx.x, h = blockIdx.y, kh = h / (hv / hk), j = threadIdx.x;
    bool col = j < dv;
    long long ss = (long long)dk * dv;
    float* st = work + ((long long)b * hv + h) * (chunk + 2) * ss;  // states of the chunk
    float* dS = st + (long long)(chunk + 1) * ss;
    int s = cu[b], e = cu[b + 1];
#define KROW(t) (kn + ((long long)(t) * hk + kh) * dk)
#define QROW(t) (qn + ((long long)(t) * hk + kh) * dk)
#define HT(t) ((long long)(t) * hv + h)
#define START(ci) (starts + ((long long)(coff[b] + (ci)) * hv + h) * ss)
    // Pass 1: chunk-start states (st[0] is the running state).
    if (col) {
        for (int a = 0; a < dk; a++) { st[a * dv + j] = 0.0f; dS[a * dv + j] = 0.0f; }
        for (int t0 = s, ci = 0; t0 < e; t0 += chunk, ci++) {
            float* c0 = START(ci);
            for (int a = 0; a < dk; a++) c0[a * dv + j] = st[a * dv + j];
            for (int t = t0; t < min(t0 + chunk, e); t++)
                delta_step_col(st, st, KROW(t), v[HT(t) * dv + j], beta[HT(t)], expf(g[HT(t)]), dk, dv, j);
        }
    }
    // Pass 2: chunks backwards.
    for (int ci = (e - s + chunk - 1) / chunk - 1; ci >= 0; ci--) {
        int t0 = s + ci * chunk, l = min(chunk, e - t0);
        if (col) {
            const float* c0 = START(ci);
            for (int a = 0; a < dk; a++) st[a * dv + j] = c0[a * dv + j];
            for (int i = 0; i < l; i++) {
                int t = t0 + i;
                delta_step_col(st + i * ss, st + (i + 1) * ss, KROW(t), v[HT(t) * dv + j], beta[HT(t)],
                               expf(g[HT(t)]), dk, dv, j);
            }
        }
        for (int i = l - 1; i >= 0; i--) {
            int t = t0 + i;
            const float *q = QROW(t), *k = KROW(t), *sp = st + i * ss, *sn = st + (i + 1) * ss;
            float decay = expf(g[HT(t)]), bt = beta[HT(t)];
            if (col) {
                float d_o = a2f(dout[HT(t) * dv + j]), vj = v[HT(t) * dv + j], m = 0.0f, dd = 0.0f;
                for (int a = 0; a < dk; a++) m += decay * sp[a * dv + j] * k[a];
                for (int a = 0; a < dk; a++) {
                    float x = dS[a * dv + j] + q[a] * d_o;
                    dS[a * dv + j] = x;
                    dd += x * k[a];
                }
                dvo[HT(t) * dv + j] = bt * dd;
                s_do[j] = d_o;
                s_del[j] = bt * (vj - m);
                s_dm[j] = -bt * dd;
                s_pb[j] = dd * (vj - m);
            }
            __syncthreads();
            for (int r = threadIdx.x; r < dk; r += blockDim.x) {
                float aq = 0.0f, ak = 0.0f, am = 0.0f;
                for (int c = 0; c < dv; c++) {
                    aq += sn[r * dv + c] * s_do[c];
                    ak += dS[r * dv + c] * s_del[c];
                }
                for (int c = 0; c < dv; c++) am += decay * sp[r * dv + c] * s_dm[c];
                dqh[HT(t) * dk + r] = aq;
                dkh[HT(t) * dk + r] = ak + am;
            }
            if (threadIdx.x == 0) {
                float x = 0.0f;
                for (int c = 0; c < dv; c++) x += s_pb[c];
                dbeta[HT(t)] = x;
            }
            __syncthreads();
            if (col) {
                float dm = s_dm[j], pg = 0.0f;
                for (int a = 0; a < dk; a++) {
                    float x = dS[a * dv + j] + k[a] * dm;
                    pg += x * decay * sp[a * dv + j];
                    dS[a * dv + j] = decay * x;
                }
                s_pg[j] = pg;
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                float x = 0.0f;
                for (int c = 0; c < dv; c++) x += s_pg[c];
                dg[HT(t)] = x;
            }
        }
    }
#undef KROW
#undef QROW
#undef HT
#undef START
}

// Sums the per-value-head gradients x [T, hv, d] over the value heads of each key head, in head
// order: y [T, hk, d] (overwritten). grid-stride over n = T·hk·d.
extern "C" __global__ void KERNEL(gdn_heads_sum)(const float* __restrict__ x, float* __restrict__ y, int hk, int hv,
                                         int d, long long n) {
    int per = hv / hk;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long t = i / ((long long)hk * d);
        int kh = (int)(i / d % hk), a = (int)(i % d);
        float s = 0.0f;
        for (int p = 0; p < per; p++) s += x[(t * hv + kh * per + p) * d + a];
        y[i] = s;
    }
}

// Backward of gdn_qkv_prep (kernels/gdn.cu): from dq̂, dk̂ [T, hk, dk] and dv [T, hv, dv] (fp32)
// writes dy [T, 2·hk·dk + hv·dv] (act_t; every element overwritten). For x = a head's q or k row
// of y, ŷ = s·x·r with r = (Σx² + eps)^-½ (s = dk^-½ for q, 1 for k):
//   dx = s·(r·dŷ − r³·x·(x·dŷ));  the value heads are copied. grid = (T, hk), block = 128.
extern "C" __global__ void KERNEL(gdn_qkv_prep_bwd)(const act_t* __restrict__ y, const float* __restrict__ dqn,
                                            const float* __restrict__ dkn, const float* __restrict__ dvv,
                                            act_t* __restrict__ dy, int hk, int hv, int dk, int dv, float eps) {
    __shared__ float scratch[32];
    long long t = blockIdx.x;
    int h = blockIdx.y, conv = 2 * hk * dk + hv * dv;
    const act_t* row = y + t * conv;
    act_t* drow = dy + t * conv;
    const float* gq = dqn + (t * hk + h) * dk;
    const float* gk = dkn + (t * hk + h) * dk;
    float sq = 0.0f, sk = 0.0f, xq = 0.0f, xk = 0.0f;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        float a = a2f(row[h * dk + i]), b = a2f(row[hk * dk + h * dk + i]);
        sq += a * a; sk += b * b; xq += a * gq[i]; xk += b * gk[i];
    }
    float rq = rsqrtf(block_sum(sq, scratch) + eps), rk = rsqrtf(block_sum(sk, scratch) + eps);
    xq = block_sum(xq, scratch);
    xk = block_sum(xk, scratch);
    float sc = rsqrtf((float)dk);
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        float a = a2f(row[h * dk + i]), b = a2f(row[hk * dk + h * dk + i]);
        drow[h * dk + i] = f2a(sc * (rq * gq[i] - rq * rq * rq * a * xq));
        drow[hk * dk + h * dk + i] = f2a(rk * gk[i] - rk * rk * rk * b * xk);
    }
    int per = hv / hk;  // this block copies the value heads h*per .. h*per+per-1
    for (int i = threadIdx.x; i < per * dv; i += blockDim.x) {
        int vh = h * per + i / dv, c = i % dv;
        drow[2 * hk * dk + vh * dv + c] = f2a(dvv[(t * hv + vh) * dv + c]);
    }
}
