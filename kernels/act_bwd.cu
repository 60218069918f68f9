// Backward of the elementwise activations of the forward: SwiGLU h = SiLU(g) ⊙ u (separate gate/up
// tensors as `silu_mul`, or fused gate|up rows as `swiglu`) and the sigmoid output gate
// o' = o ⊙ σ(gate) of gated attention. fp32 arithmetic, act_t in and out; grid-stride loops.

// dg = dh ⊙ u ⊙ SiLU'(g), du = dh ⊙ SiLU(g) over n values.
extern "C" __global__ void KERNEL(silu_mul_bwd)(const act_t* __restrict__ g, const act_t* __restrict__ u,
                                        const act_t* __restrict__ dh, act_t* __restrict__ dg,
                                        act_t* __restrict__ du, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float gv = a2f(g[i]), d = a2f(dh[i]);
        dg[i] = f2a(d * a2f(u[i]) * silu_gradf_(gv));
        du[i] = f2a(d * siluf_(gv));
    }
}

// Fused layout: gu [rows, 2I] (gate | up), dh [rows, I] -> dgu [rows, 2I].
extern "C" __global__ void KERNEL(swiglu_bwd)(const act_t* __restrict__ gu, const act_t* __restrict__ dh,
                                      act_t* __restrict__ dgu, int I, long long rows) {
    long long n = rows * I;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / I, c = i % I, gi = r * 2 * I + c;
        float gv = a2f(gu[gi]), uv = a2f(gu[gi + I]), d = a2f(dh[i]);
        dgu[gi] = f2a(d * uv * silu_gradf_(gv));
        dgu[gi + I] = f2a(d * siluf_(gv));
    }
}

// Gated attention output o' = o ⊙ σ(gate): d_o = dy ⊙ σ, dgate = dy ⊙ o ⊙ σ(1 − σ).
extern "C" __global__ void KERNEL(sigmoid_gate_mul_bwd)(const act_t* __restrict__ o, const act_t* __restrict__ gate,
                                                const act_t* __restrict__ dy, act_t* __restrict__ d_o,
                                                act_t* __restrict__ dgate, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float s = sigmoidf_(a2f(gate[i])), d = a2f(dy[i]);
        d_o[i] = f2a(d * s);
        dgate[i] = f2a(d * a2f(o[i]) * s * (1.0f - s));
    }
}
