// Sampling from logits on device, one block per sequence: greedy (temperature 0) or
// temperature + top-k + top-p with a seeded counter-based RNG, and the log-probability of the
// chosen token under the temperature-scaled full distribution. Thresholds for top-k / top-p are
// found by bisection on the probability value (no sort over the 248k vocabulary).

__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// logits [B, V] f32. params per sequence: temp[b], top_k[b] (0 = off), top_p[b] (1 = off),
// seed[b], step[b] (the RNG draws u = hash(seed, step)). Outputs token[b], logprob[b].
// block = 1024.
extern "C" __global__ void KERNEL(sample_tokens)(const float* __restrict__ logits, int V, const float* __restrict__ temp,
                                         const int* __restrict__ top_k, const float* __restrict__ top_p,
                                         const u64* __restrict__ seed, const u64* __restrict__ step,
                                         int* __restrict__ token, float* __restrict__ logprob) {
    __shared__ float scratch[32];
    __shared__ float tsum[1024];
    __shared__ int pick;
    __shared__ int amax;
    int b = blockIdx.x, tid = threadIdx.x, nth = blockDim.x;
    const float* lg = logits + (long long)b * V;
    float T = temp[b];
    float inv_t = T > 0.0f ? 1.0f / T : 1.0f;
    // max and argmax (lowest index on ties)
    float mx = -INFINITY; int am = 0x7fffffff;
    for (int i = tid; i < V; i += nth) { float x = lg[i]; if (x > mx || (x == mx && i < am)) { mx = x; am = i; } }
    if (tid == 0) amax = 0x7fffffff;
    float gmax = block_max(mx, scratch);  // (contains barriers: amax is initialised)
    if (mx == gmax) atomicMin(&amax, am);
    __syncthreads();
    float s = 0.0f;
    for (int i = tid; i < V; i += nth) s += expf((lg[i] - gmax) * inv_t);
    float lse = logf(block_sum(s, scratch));  // log Σ e^{(x-max)/T}
    if (T <= 0.0f) {
        if (tid == 0) { token[b] = amax; logprob[b] = (lg[amax] - gmax) - lse; }
        return;
    }
    // keep set = { i : p_i >= thr }. top-k: largest thr with count(p >= thr) >= k.
    // top-p: largest thr with mass(p >= thr) >= top_p. Bisection on log-prob thresholds.
    float lo = -1e30f;  // keep everything
    int K = top_k[b];
    float P = top_p[b];
    if (K > 0 && K < V) {
        float a = -80.0f, c = 0.0f;  // log-prob range searched
        for (int it = 0; it < 40; it++) {
            float mid = 0.5f * (a + c);
            float cnt = 0.0f;
            for (int i = tid; i < V; i += nth) cnt += ((lg[i] - gmax) * inv_t - lse >= mid) ? 1.0f : 0.0f;
            if (block_sum(cnt, scratch) >= (float)K) a = mid; else c = mid;
        }
        lo = fmaxf(lo, a);
    }
    if (P < 1.0f) {
        float a = -80.0f, c = 0.0f;
        for (int it = 0; it < 40; it++) {
            float mid = 0.5f * (a + c);
            float m = 0.0f;
            for (int i = tid; i < V; i += nth) { float lp = (lg[i] - gmax) * inv_t - lse; m += lp >= mid ? expf(lp) : 0.0f; }
            if (block_sum(m, scratch) >= P) a = mid; else c = mid;
        }
        lo = fmaxf(lo, a);
    }
    // inverse-CDF draw over the kept set in index order: contiguous slices per thread
    int per = (V + nth - 1) / nth, i0 = tid * per, i1 = min(V, i0 + per);
    float ms = 0.0f;
    for (int i = i0; i < i1; i++) { float lp = (lg[i] - gmax) * inv_t - lse; if (lp >= lo) ms += expf(lp); }
    tsum[tid] = ms;
    __syncthreads();
    if (tid == 0) {
        float tot = 0.0f;
        for (int i = 0; i < nth; i++) tot += tsum[i];
        u64 r = splitmix64(seed[b] ^ splitmix64(step[b]));
        float u = (float)((r >> 40) * (1.0 / 16777216.0)) * tot;  // 24-bit uniform in [0, tot)
        int th = nth - 1;
        float acc = 0.0f;
        for (int i = 0; i < nth; i++) { if (acc + tsum[i] > u) { th = i; break; } acc += tsum[i]; }
        tsum[0] = u - acc;
        pick = th;
    }
    __syncthreads();
    if (tid == pick) {
        float u = tsum[0], acc = 0.0f; int chosen = -1, last = -1;
        for (int i = i0; i < i1; i++) {
            float lp = (lg[i] - gmax) * inv_t - lse;
            if (lp < lo) continue;
            last = i; acc += expf(lp);
            if (acc > u) { chosen = i; break; }
        }
        if (chosen < 0) chosen = last >= 0 ? last : amax;  // rounding at the slice end
        token[b] = chosen;
        logprob[b] = (lg[chosen] - gmax) * inv_t - lse;
    }
}
