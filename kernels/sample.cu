// Sampling from logits on device, one block per sequence, with the CPU engine's semantics
// (src/engine/sampler.rs): temperature 0 = greedy (argmax, lowest id on ties); otherwise divide by
// the temperature, keep the top_k largest (ties towards the lower id), softmax, keep the smallest
// most-likely-first prefix whose probability reaches top_p, renormalise, and draw by inverse CDF
// over the kept tokens most likely first — or over the whole vocabulary in id order when nothing
// is truncated. The uniform draw u[b] in [0, 1) comes from the sequence's own random stream on
// the host, one per sampled token, so a seeded run picks the CPU's tokens when the logits agree.
// Outputs: token, logprob = log_softmax(logits)[token] (the policy's: temperature 1, untruncated)
// and sampling_logprob (under the distribution actually sampled; 0 when greedy).
// Probabilities are summed in double as on the CPU. Reductions go through shared memory.

#define SAMPLE_THREADS 1024
#define SAMPLE_MAX_KEEP 2048

// Block-wide double sum (every thread gets it). blockDim.x == SAMPLE_THREADS.
__device__ __forceinline__ double block_sum_d(double v, double* red) {
    int tid = threadIdx.x;
    __syncthreads();
    red[tid] = v;
    __syncthreads();
    for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    return red[0];
}

// Block-wide argmax of (value, -index): the largest value, lowest index on ties. Every thread gets
// the index (-1 when no thread had a candidate).
__device__ __forceinline__ int block_argmax(float v, int i, float* rv, int* ri) {
    int tid = threadIdx.x;
    __syncthreads();
    rv[tid] = v; ri[tid] = i;
    __syncthreads();
    for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) {
            float ov = rv[tid + s]; int oi = ri[tid + s];
            if (oi >= 0 && (ri[tid] < 0 || ov > rv[tid] || (ov == rv[tid] && oi < ri[tid]))) { rv[tid] = ov; ri[tid] = oi; }
        }
        __syncthreads();
    }
    return ri[0];
}

// logits [B, V] f32; temp[b], top_k[b] (0 = off), top_p[b] (1 = off), u[b]. grid = B,
// block = SAMPLE_THREADS, the launch bound (so ptxas keeps to the 64 registers per thread a
// 1024-thread block may have; unbounded it used 68). With truncation at most SAMPLE_MAX_KEEP
// tokens are kept (checked on the host for top_k); a row whose nucleus without top-k needs more
// gets token -1 (and zero log-probabilities): the host samples it from its logits with the same u.
extern "C" __launch_bounds__(SAMPLE_THREADS) __global__ void KERNEL(sample_tokens)(const float* __restrict__ logits, int V, const float* __restrict__ temp,
                                         const int* __restrict__ top_k, const float* __restrict__ top_p,
                                         const double* __restrict__ u, int* __restrict__ token,
                                         float* __restrict__ logprob, float* __restrict__ sampling_logprob) {
    __shared__ double red[SAMPLE_THREADS];
    __shared__ float rv[SAMPLE_THREADS];
    __shared__ int ri[SAMPLE_THREADS];
    __shared__ int keep_id[SAMPLE_MAX_KEEP];
    __shared__ double slice[SAMPLE_THREADS];
    __shared__ int pick_thread;
    __shared__ double pick_acc;
    int b = blockIdx.x, tid = threadIdx.x, nth = blockDim.x;
    const float* lg = logits + (long long)b * V;
    // argmax (lowest id on ties) and the policy's log-normaliser
    float mx = -INFINITY; int am = -1;
    for (int i = tid; i < V; i += nth) { float x = lg[i]; if (am < 0 || x > mx) { mx = x; am = i; } }
    am = block_argmax(mx, am, rv, ri);
    float gmax = lg[am];
    double s1 = 0.0;
    for (int i = tid; i < V; i += nth) s1 += (double)expf(lg[i] - gmax);
    double log_z = (double)gmax + log(block_sum_d(s1, red));
    float T = temp[b];
    int K = top_k[b];
    float P = top_p[b];
    double ub = u[b];
    int chosen;
    double slp;
    if (T == 0.0f) {
        chosen = am; slp = 0.0;
    } else if ((K <= 0 || K >= V) && P >= 1.0f) {
        // whole vocabulary, id order: contiguous slices per thread, f32 weights summed in double
        float inv_t = 1.0f / T;
        int per = (V + nth - 1) / nth, i0 = min(V, tid * per), i1 = min(V, i0 + per);
        double ms = 0.0;
        for (int i = i0; i < i1; i++) ms += (double)expf((lg[i] - gmax) * inv_t);
        slice[tid] = ms;
        double total = block_sum_d(ms, red);
        __syncthreads();
        if (tid == 0) {
            double target = ub * total, acc = 0.0;
            int th = -1;
            for (int j = 0; j < nth; j++) { if (target < acc + slice[j]) { th = j; break; } acc += slice[j]; }
            pick_thread = th; pick_acc = acc;
            if (th < 0) {  // rounding past the end: the last token with a positive weight
                int last = 0;
                for (int i = V - 1; i >= 0; i--) if (expf((lg[i] - gmax) * inv_t) > 0.0f) { last = i; break; }
                ri[0] = last;
            }
        }
        __syncthreads();
        if (pick_thread >= 0 && tid == pick_thread) {
            double target = ub * total, acc = pick_acc;
            int c = i1 - 1;
            for (int i = i0; i < i1; i++) { acc += (double)expf((lg[i] - gmax) * inv_t); if (target < acc) { c = i; break; } }
            ri[0] = c;
        }
        __syncthreads();
        chosen = ri[0];
        slp = log((double)expf((lg[chosen] - gmax) * inv_t) / total);
    } else {
        // candidates most likely first, by repeated argmax below the previous one in (value, -id)
        double t = (double)fmaxf(T, 1.17549435e-38f);
        int n = (K > 0 && K < V) ? min(K, SAMPLE_MAX_KEEP) : V;
        double m_t = (double)gmax / t;
        double total = 0.0;
        if (n == V) {
            double s = 0.0;
            for (int i = tid; i < V; i += nth) s += exp((double)lg[i] / t - m_t);
            total = block_sum_d(s, red);
        }
        float pv = INFINITY; int pi = -1;  // previous candidate
        int kept = 0;
        double cum = 0.0;
        int limit = min(n, SAMPLE_MAX_KEEP);
        for (int c = 0; c < limit; c++) {
            float bv = -INFINITY; int bi = -1;
            for (int i = tid; i < V; i += nth) {
                float x = lg[i];
                bool below = pi < 0 || x < pv || (x == pv && i > pi);
                if (below && (bi < 0 || x > bv)) { bv = x; bi = i; }
            }
            int next = block_argmax(bv, bi, rv, ri);
            if (next < 0) break;
            if (tid == 0) keep_id[c] = next;
            pv = lg[next]; pi = next;
            kept = c + 1;
            if (n == V && P < 1.0f) {  // nucleus without top-k: stop once it holds top_p
                cum += exp((double)pv / t - m_t) / total;
                if (cum >= (double)P) break;
            }
        }
        if (n == V && P < 1.0f && V > SAMPLE_MAX_KEEP && kept == SAMPLE_MAX_KEEP && cum < (double)P) {
            // the nucleus needs more candidates than the block keeps: the host samples this row
            // (uniform across the block: every thread computed the same kept and cum)
            if (tid == 0) { token[b] = -1; logprob[b] = 0.0f; sampling_logprob[b] = 0.0f; }
            return;
        }
        cum = 0.0;
        __syncthreads();
        if (n < V) {  // top-k: normalise over the k candidates
            double s = 0.0;
            for (int c = 0; c < kept; c++) s += exp((double)lg[keep_id[c]] / t - m_t);
            total = s;
        }
        if (P < 1.0f) {  // nucleus over the (renormalised) candidates
            int k2 = kept;
            for (int c = 0; c < kept; c++) {
                cum += exp((double)lg[keep_id[c]] / t - m_t) / total;
                if (cum >= (double)P) { k2 = c + 1; break; }
            }
            kept = k2;
        }
        double mass = 0.0;
        for (int c = 0; c < kept; c++) mass += exp((double)lg[keep_id[c]] / t - m_t) / total;
        double acc = 0.0;
        int pick = kept - 1;
        for (int c = 0; c < kept; c++) {
            acc += exp((double)lg[keep_id[c]] / t - m_t) / total / mass;
            if (ub < acc) { pick = c; break; }
        }
        chosen = keep_id[pick];
        slp = log(exp((double)lg[chosen] / t - m_t) / total / mass);
    }
    if (tid == 0) {
        token[b] = chosen;
        logprob[b] = (float)((double)lg[chosen] - log_z);
        sampling_logprob[b] = (float)slp;
    }
}
