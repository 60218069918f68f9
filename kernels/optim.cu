// AdamW on the device, the training side's optimizer (semantics of src/train/optim.rs, which are
// torch.optim.AdamW's): fp32 master weights and fp32 moments, bias correction, decoupled weight
// decay, global-norm gradient clipping computed on the device, and the serving copy of each
// weight (`act_t`: bf16 in the bf16 build, f32 in the f32 build) rewritten from the master after
// the update, in place, so the engine's kernels read the new weights without a host round trip.
//
// One step is three launches per parameter set (host: src/train/device_optim.rs):
//   adamw_sq_norm      once per gradient buffer: per-block sums of g² (double) into `partials`;
//   adamw_clip_scale   one block: norm = sqrt(Σ partials), clip scale → `stats` (double[2]);
//   adamw_update       once per parameter: reads the scale from `stats` (no host sync).
// Reductions are tree sums in a fixed order: a run is deterministic.

#define OPT_THREADS 256

// Tree sum of `sh[0..OPT_THREADS)` in place; the block's total ends in sh[0].
__device__ __forceinline__ void opt_block_tree_sum(double* sh) {
    __syncthreads();
    for (int s = OPT_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
}

// partials[offset + blockIdx.x] = Σ g[i]² over the block's grid-stride share of g[0..n).
// Launch: OPT_THREADS threads per block, any grid.
extern "C" __global__ void KERNEL(adamw_sq_norm)(const float* __restrict__ g, long long n,
                                                 double* __restrict__ partials, int offset) {
    __shared__ double sh[OPT_THREADS];
    double acc = 0.0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double x = (double)g[i];
        acc += x * x;
    }
    sh[threadIdx.x] = acc;
    opt_block_tree_sum(sh);
    if (threadIdx.x == 0) partials[offset + blockIdx.x] = sh[0];
}

// One block of OPT_THREADS: stats[0] = global norm = sqrt(Σ partials[0..count)); stats[1] = the
// factor every gradient is multiplied by: max_norm / (norm + 1e-6) when `clip` is set, the norm
// exceeds max_norm and is finite, else 1 (exactly optim.rs's `AdamW::clip`).
extern "C" __global__ void KERNEL(adamw_clip_scale)(const double* __restrict__ partials, int count,
                                                    int clip, float max_norm, double* __restrict__ stats) {
    __shared__ double sh[OPT_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
    sh[threadIdx.x] = acc;
    opt_block_tree_sum(sh);
    if (threadIdx.x == 0) {
        double norm = sqrt(sh[0]);
        bool finite = norm <= 1.7976931348623157e308;  // false for +inf and NaN
        double scale = 1.0;
        if (clip && norm > (double)max_norm && finite) scale = (double)max_norm / (norm + 1e-6);
        stats[0] = norm;
        stats[1] = scale;
    }
}

// One AdamW update of n elements (grid-stride): g ← g·scale (scale = (float)stats[1]);
// m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²; p ← p·(1 − lr·wd); p ← p − lr·(m/bc1)/(√(v/bc2) + eps);
// serve[i] ← p rounded to the storage type (round to nearest even for bf16) when serve is set.
// bc1 = 1 − β1^t, bc2 = 1 − β2^t and lr (schedule applied) come from the host, as on the CPU.
extern "C" __global__ void KERNEL(adamw_update)(float* __restrict__ p, float* __restrict__ m,
                                                float* __restrict__ v, const float* __restrict__ g,
                                                act_t* __restrict__ serve, long long n,
                                                const double* __restrict__ stats, float lr, float beta1,
                                                float beta2, float eps, float wd, float bc1, float bc2) {
    float scale = (float)stats[1];
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = g[i] * scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        float denom = sqrtf(vi / bc2) + eps;
        float pi = p[i] * (1.0f - lr * wd);
        pi -= lr * (mi / bc1) / denom;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (serve) serve[i] = f2a(pi);
    }
}
