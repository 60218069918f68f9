// Embedding gather, zero-centred (1+w) RMSNorm with fused residual add, and the GDN gated RMSNorm.

// out[t, :] = table[ids[t], :]   grid = T, block = 256
extern "C" __global__ void embedding(const bf16* __restrict__ table, const int* __restrict__ ids,
                                     bf16* __restrict__ out, int hidden, int vocab) {
    int t = blockIdx.x;
    int id = ids[t];
    bool ok = id >= 0 && id < vocab;
    const bf16* row = table + (long long)(ok ? id : 0) * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out[(long long)t * hidden + i] = ok ? row[i] : (bf16)0x7fc0;  // NaN marks a bad id
}

// Optional residual add then RMSNorm1p per row:
//   if (delta) resid += delta;   out = resid * rsqrt(mean(resid^2) + eps) * (1 + w)
// resid is bf16 [rows, d] (updated in place, rounded like HF's residual stream).
// grid = rows, block = 256 (multiple of 32)
extern "C" __global__ void add_rms_norm_1p(bf16* __restrict__ resid, const bf16* __restrict__ delta,
                                           const bf16* __restrict__ w, bf16* __restrict__ out, int d,
                                           float eps) {
    __shared__ float scratch[32];
    long long base = (long long)blockIdx.x * d;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float x = bf2f(resid[base + i]);
        if (delta) {
            x = bf2f(f2bf(x + bf2f(delta[base + i])));
            resid[base + i] = f2bf(x);
        }
        ss += x * x;
    }
    float r = rsqrtf(block_sum(ss, scratch) / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float x = bf2f(resid[base + i]);
        out[base + i] = f2bf(x * r * (1.0f + bf2f(w[i])));
    }
}

// Per-head RMSNorm1p in place over `hd` (q_norm / k_norm): x is [rows, heads, hd] with a row
// stride of `stride` elements and head stride `hstride`. grid = (rows, heads), block = 32..256.
extern "C" __global__ void head_rms_norm_1p(bf16* __restrict__ x, const bf16* __restrict__ w, int hd,
                                            int stride, int hstride, float eps) {
    __shared__ float scratch[32];
    bf16* v = x + (long long)blockIdx.x * stride + (long long)blockIdx.y * hstride;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) { float a = bf2f(v[i]); ss += a * a; }
    float r = rsqrtf(block_sum(ss, scratch) / (float)hd + eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) v[i] = f2bf(bf2f(v[i]) * r * (1.0f + bf2f(w[i])));
}

// GDN output norm: per (token, value head) over dv, plain weight, SiLU gate:
//   out = bf16( w * bf16(o * rsqrt(mean o^2 + eps)) ) * SiLU(z)
// o, z, out: [T, Hv, dv] bf16. grid = (T, Hv), block = 128.
extern "C" __global__ void gated_rms_norm(const bf16* __restrict__ o, const bf16* __restrict__ z,
                                          const bf16* __restrict__ w, bf16* __restrict__ out, int dv,
                                          float eps) {
    __shared__ float scratch[32];
    long long base = ((long long)blockIdx.x * gridDim.y + blockIdx.y) * dv;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dv; i += blockDim.x) { float a = bf2f(o[base + i]); ss += a * a; }
    float r = rsqrtf(block_sum(ss, scratch) / (float)dv + eps);
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float n = bf2f(f2bf(bf2f(o[base + i]) * r));
        float y = bf2f(f2bf(bf2f(w[i]) * n));
        out[base + i] = f2bf(y * siluf_(bf2f(z[base + i])));
    }
}

// dst[r, :] = src[rows[r], :] (e.g. the last token of each sequence before the head). grid = R, block = 256
extern "C" __global__ void gather_rows(const bf16* __restrict__ src, const int* __restrict__ rows,
                                       bf16* __restrict__ dst, int d) {
    long long r = blockIdx.x, s = rows[r];
    for (int i = threadIdx.x; i < d; i += blockDim.x) dst[r * d + i] = src[s * d + i];
}
