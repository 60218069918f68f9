// Embedding backward: dW[id, :] += Σ_{t : ids[t] = id} dy[t, :], deterministic. The host groups
// the token positions by id (ascending t within an id: `order`, segment offsets `seg`, the
// distinct ids `uniq`), so each block owns one table row and sums its tokens in a fixed order in
// fp32 — no atomics, the same bits on every run. dW is fp32 [vocab, hidden].
// grid = distinct ids, block = 256.
extern "C" __global__ void KERNEL(embedding_bwd)(const act_t* __restrict__ dy, const int* __restrict__ order,
                                         const int* __restrict__ seg, const int* __restrict__ uniq,
                                         float* __restrict__ dW, int hidden) {
    int u = blockIdx.x, p0 = seg[u], p1 = seg[u + 1];
    float* row = dW + (long long)uniq[u] * hidden;
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
        float acc = 0.0f;
        for (int p = p0; p < p1; p++) acc += a2f(dy[(long long)order[p] * hidden + c]);
        row[c] += acc;
    }
}
