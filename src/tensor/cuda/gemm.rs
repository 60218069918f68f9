//! Dense GEMMs through the device's cuBLAS-style GEMM: the linear layer
//! `out[m, n] = x[m, k] · W[n, k]ᵀ` (PyTorch `nn.Linear` layout) with inputs in the storage type
//! ([`Act`]: bf16 or f32) and fp32 accumulation, writing the storage type (projections) or fp32
//! (router logits, LM head, where the consumer wants full precision).

use super::gpu::{Act, DeviceBuffer, GemmElem, Gpu};
use crate::tensor::device::{DeviceError, Gemm, Result};

/// `out[m, n] = x[m, k] · w[n, k]ᵀ` (fp32 compute). Row-major C = X·Wᵀ is the column-major
/// product Cᵀ = W·Xᵀ, i.e. `gemm(T, N, n, m, k, W, k, X, k, C, n)`.
pub fn linear<A: Act, O: GemmElem>(
    gpu: &Gpu,
    x: &DeviceBuffer<A>,
    m: usize,
    k: usize,
    w: &DeviceBuffer<A>,
    n: usize,
    out: &mut DeviceBuffer<O>,
) -> Result<()> {
    if x.len() < m * k || w.len() < n * k || out.len() < m * n {
        return Err(DeviceError::Shape {
            op: "linear",
            msg: format!(
                "x {} w {} out {} too small for m={m} k={k} n={n}",
                x.len(),
                w.len(),
                out.len()
            ),
        });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let t = A::TYPE.gemm_type();
    gpu.gemm(&Gemm {
        trans_a: true,
        trans_b: false,
        m: n,
        n: m,
        k,
        alpha: 1.0,
        a: w.ptr(),
        a_type: t,
        lda: k,
        b: x.ptr(),
        b_type: t,
        ldb: k,
        beta: 0.0,
        c: out.ptr(),
        c_type: O::GEMM,
        ldc: n,
    })
}
