// Weight initialisation on device (benchmarks on random weights of the full model shape without
// moving 70 GB over PCIe): counter-based uniform values, and constant fill.

__device__ __forceinline__ u64 mix64(u64 x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// x[i] = act_t(lo + (hi - lo) * u(seed, i)). grid-stride.
extern "C" __global__ void KERNEL(fill_uniform)(act_t* __restrict__ x, long long n, u64 seed, float lo, float hi) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float u = (float)(mix64(seed ^ mix64((u64)i)) >> 40) * (1.0f / 16777216.0f);
        x[i] = f2a(lo + (hi - lo) * u);
    }
}

// x[i] = v. grid-stride.
extern "C" __global__ void KERNEL(fill_f32)(float* __restrict__ x, long long n, float v) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) x[i] = v;
}
