// Token-level losses on the device, from fp32 logits that never leave it (the LM head's output):
// per row, the log-probability of the row's target and the gradient of the row's loss term
// w.r.t. the logits, as src/train/loss.rs (SFT cross-entropy) and src/train/grpo.rs (GRPO
// clipped ratio with clip-higher, optional k3 KL) compute them:
//   dloss/dlogits = (g / denom) · (onehot(y) − softmax),  g = dloss_token/dlogp.
// Row r predicts target[r] (−1: no loss, zero gradient). Aggregation is token-level: every term
// is divided by the batch's token denominator (`inv_denom`), so micro-batches sum to the batch.

#define LOSS_SFT 0
#define LOSS_GRPO 1

// logits [rows, V] fp32; old/ref/adv [rows] fp32 (GRPO; ref may be null); loss, logp [rows] fp32
// out; dlogits [rows, V] act_t out. grid = rows, block = 256 (multiple of 32).
extern "C" __global__ void KERNEL(token_loss)(const float* __restrict__ logits, const int* __restrict__ target,
                                      const float* __restrict__ old, const float* __restrict__ ref,
                                      const float* __restrict__ adv, int mode, float clip_low,
                                      float clip_high, float kl_coef, float inv_denom, int V,
                                      float* __restrict__ loss, float* __restrict__ logp,
                                      act_t* __restrict__ dlogits) {
    __shared__ float scratch[32];
    long long r = blockIdx.x, base = r * V;
    int y = target[r];
    if (y < 0 || y >= V) {
        for (int j = threadIdx.x; j < V; j += blockDim.x) dlogits[base + j] = f2a(0.0f);
        if (threadIdx.x == 0) { loss[r] = 0.0f; logp[r] = 0.0f; }
        return;
    }
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, logits[base + j]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(logits[base + j] - m);
    float lse = m + logf(block_sum(s, scratch));
    float lp = logits[base + y] - lse;
    float l, g;
    if (mode == LOSS_SFT) {
        l = -lp;
        g = -1.0f;
    } else {
        float a = adv[r];
        float ratio = expf(lp - old[r]);
        float clipped = fminf(fmaxf(ratio, 1.0f - clip_low), 1.0f + clip_high);
        float un = ratio * a, cl = clipped * a;
        if (un <= cl) { l = -un; g = -un; } else { l = -cl; g = 0.0f; }
        if (kl_coef != 0.0f && ref) {
            float d = ref[r] - lp;
            l += kl_coef * (expf(d) - d - 1.0f);
            g += kl_coef * (1.0f - expf(d));
        }
    }
    float sc = g * inv_denom;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(logits[base + j] - lse);
        dlogits[base + j] = f2a(sc * ((j == y ? 1.0f : 0.0f) - p));
    }
    if (threadIdx.x == 0) { loss[r] = l * inv_denom; logp[r] = lp; }
}
