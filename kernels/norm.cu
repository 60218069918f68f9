// Embedding gather, zero-centred (1+w) RMSNorm with fused residual add, and the GDN gated RMSNorm.

// out[t, :] = table[ids[t], :]   grid = T, block = 256
extern "C" __global__ void KERNEL(embedding)(const act_t* __restrict__ table, const int* __restrict__ ids,
                                     act_t* __restrict__ out, int hidden, int vocab) {
    int t = blockIdx.x;
    int id = ids[t];
    bool ok = id >= 0 && id < vocab;
    const act_t* row = table + (long long)(ok ? id : 0) * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out[(long long)t * hidden + i] = ok ? row[i] : f2a(__int_as_float(0x7fc00000));  // NaN marks a bad id
}

// Optional residual add then RMSNorm1p per row:
//   if (delta) resid += delta;   out = resid * rsqrt(mean(resid^2) + eps) * (1 + w)
// resid is act_t [rows, d] (updated in place, rounded like HF's residual stream).
// grid = rows, block = 256 (multiple of 32)
extern "C" __global__ void KERNEL(add_rms_norm_1p)(act_t* __restrict__ resid, const act_t* __restrict__ delta,
                                           const act_t* __restrict__ w, act_t* __restrict__ out, int d,
                                           float eps) {
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * d;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float x = a2f(resid[base + i]);
        if (delta) {
            x = a2f(f2a(x + a2f(delta[base + i])));
            resid[base + i] = f2a(x);
        }
        ss += x * x;
    }
    float r = rsqrtf(block_sum(ss, scratch) / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float x = a2f(resid[base + i]);
        out[base + i] = f2a(x * r * (1.0f + a2f(w[i])));
    }
}

// Per-head RMSNorm1p in place over `hd` (q_norm / k_norm): x is [rows, heads, hd] with a row
// stride of `stride` elements and head stride `hstride`. grid = (rows, heads), block = 32..256.
extern "C" __global__ void KERNEL(head_rms_norm_1p)(act_t* __restrict__ x, const act_t* __restrict__ w, int hd,
                                            int stride, int hstride, float eps) {
    __shared__ float scratch[32];
    act_t* v = x + (long long)blockIdx.x * stride + (long long)blockIdx.y * hstride;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) { float a = a2f(v[i]); ss += a * a; }
    float r = rsqrtf(block_sum(ss, scratch) / (float)hd + eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) v[i] = f2a(a2f(v[i]) * r * (1.0f + a2f(w[i])));
}

// GDN output norm: per (token, value head) over dv, plain weight, SiLU gate:
//   out = act_t( w * act_t(o * rsqrt(mean o^2 + eps)) ) * SiLU(z)
// o, z, out: [T, Hv, dv] act_t. grid = (T, Hv), block = 128.
extern "C" __global__ void KERNEL(gated_rms_norm)(const act_t* __restrict__ o, const act_t* __restrict__ z,
                                          const act_t* __restrict__ w, act_t* __restrict__ out, int dv,
                                          float eps) {
    __shared__ float scratch[32];
    long long base = ((long long)blockIdx.x * gridDim.y + blockIdx.y) * dv;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dv; i += blockDim.x) { float a = a2f(o[base + i]); ss += a * a; }
    float r = rsqrtf(block_sum(ss, scratch) / (float)dv + eps);
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float n = a2f(f2a(a2f(o[base + i]) * r));
        float y = a2f(f2a(a2f(w[i]) * n));
        out[base + i] = f2a(y * siluf_(a2f(z[base + i])));
    }
}

// dst[r, :] = src[rows[r], :] (e.g. the last token of each sequence before the head). grid = R, block = 256
extern "C" __global__ void KERNEL(gather_rows)(const act_t* __restrict__ src, const int* __restrict__ rows,
                                       act_t* __restrict__ dst, int d) {
    long long r = blockIdx.x, s = rows[r];
    for (int i = threadIdx.x; i < d; i += blockDim.x) dst[r * d + i] = src[s * d + i];
}
