// Backward of the norms of kernels/norm.cu, fp32 arithmetic, gradients w.r.t. activations in the
// storage type (act_t) and w.r.t. weights in fp32. The same formulas as the CPU trainer
// (src/train/ops.rs): with r = rsqrt(mean x^2 + eps), x̂ = x·r and gn = dL/dx̂,
//   dx = r · (gn − x̂ · mean(gn ⊙ x̂)).
// Weight gradients are a second, column-parallel kernel (`norm_dw`) that sums the rows in order
// (deterministic, no atomics), reading the per-row r saved by the dx kernel.

// r = rsqrt(mean x^2 + eps) of one row (every thread gets it).
__device__ __forceinline__ float row_rstd(const act_t* __restrict__ x, int d, float eps, float* scratch) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) { float a = a2f(x[i]); ss += a * a; }
    return rsqrtf(block_sum(ss, scratch) / (float)d + eps);
}

// Zero-centred RMSNorm y = x̂ ⊙ (1 + w) over rows of width d (also the per-head q/k norm with
// rows = tokens·heads). x, dy, dx: [rows, d] act_t; w [d]; rstd [rows] fp32 out.
// grid = rows, block = 256 (multiple of 32).
extern "C" __global__ void KERNEL(rms_norm_1p_bwd)(const act_t* __restrict__ x, const act_t* __restrict__ w,
                                           const act_t* __restrict__ dy, act_t* __restrict__ dx,
                                           float* __restrict__ rstd, int d, float eps) {
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * d;
    float r = row_rstd(x + base, d, eps, scratch);
    float dot = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        dot += a2f(dy[base + i]) * (1.0f + a2f(w[i])) * a2f(x[base + i]) * r;
    float mean = block_sum(dot, scratch) / (float)d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float xi = a2f(x[base + i]), gn = a2f(dy[base + i]) * (1.0f + a2f(w[i]));
        dx[base + i] = f2a(r * (gn - xi * r * mean));
    }
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// GDN gated RMSNorm y = w ⊙ x̂ ⊙ SiLU(z) (rows = tokens·value heads, width d = dv): dx, dz
// (act_t) and rstd. grid = rows, block = 128.
extern "C" __global__ void KERNEL(gated_rms_norm_bwd)(const act_t* __restrict__ x, const act_t* __restrict__ z,
                                              const act_t* __restrict__ w, const act_t* __restrict__ dy,
                                              act_t* __restrict__ dx, act_t* __restrict__ dz,
                                              float* __restrict__ rstd, int d, float eps) {
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * d;
    float r = row_rstd(x + base, d, eps, scratch);
    float dot = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float xh = a2f(x[base + i]) * r, zi = a2f(z[base + i]), g = a2f(dy[base + i]) * a2f(w[i]);
        dz[base + i] = f2a(g * xh * silu_gradf_(zi));
        dot += g * siluf_(zi) * xh;
    }
    float mean = block_sum(dot, scratch) / (float)d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float xi = a2f(x[base + i]), gn = a2f(dy[base + i]) * a2f(w[i]) * siluf_(a2f(z[base + i]));
        dx[base + i] = f2a(r * (gn - xi * r * mean));
    }
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// Weight gradient of either norm: dw[i] += Σ_rows dy[r,i] · x[r,i] · rstd[r] · (z ? SiLU(z[r,i]) : 1),
// rows summed in order (fp32). grid-stride over the d columns.
extern "C" __global__ void KERNEL(norm_dw)(const act_t* __restrict__ x, const act_t* __restrict__ dy,
                                   const act_t* __restrict__ z, const float* __restrict__ rstd,
                                   float* __restrict__ dw, int rows, int d) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < d; i += gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int r = 0; r < rows; r++) {
            long long o = (long long)r * d + i;
            float g = a2f(dy[o]) * a2f(x[o]) * rstd[r];
            acc += z ? g * siluf_(a2f(z[o])) : g;
        }
        dw[i] += acc;
    }
}

// The residual path of `add_rms_norm_1p` in the backward: the stream's gradient gets the norm
// branch's, acc += g over n values (act_t; fp32 sum, rounded once). Grid-stride.
extern "C" __global__ void KERNEL(residual_grad_add)(act_t* __restrict__ acc, const act_t* __restrict__ g,
                                             long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc[i] = f2a(a2f(acc[i]) + a2f(g[i]));
}
