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
