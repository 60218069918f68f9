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

/// Row-major fp32 `c[m, n] = alpha · op(a) · op(b) + beta · c`, where `op(a)` is `[m, k]`
/// (`a` stored `[m, k]`, or `[k, m]` when `ta`) and `op(b)` is `[k, n]` (`b` stored `[k, n]`,
/// or `[n, k]` when `tb`). Row-major C = op(A)·op(B) is the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ.
#[allow(clippy::too_many_arguments)] // a GEMM's operands, sizes and scalars
pub fn matmul_f32(
    gpu: &Gpu,
    trans: (bool, bool),
    mnk: (usize, usize, usize),
    alpha: f32,
    a: &DeviceBuffer<f32>,
    b: &DeviceBuffer<f32>,
    beta: f32,
    c: &mut DeviceBuffer<f32>,
) -> Result<()> {
    matmul(gpu, trans, mnk, alpha, a, b, beta, c)
}

/// [`matmul_f32`] with inputs of storage type `T` and the output in `C` (fp32 compute; e.g.
/// bf16 operands accumulated into an fp32 gradient, or an fp32 product rounded into bf16).
#[allow(clippy::too_many_arguments)] // a GEMM's operands, sizes and scalars
pub fn matmul<T: GemmElem, C: GemmElem>(
    gpu: &Gpu,
    (ta, tb): (bool, bool),
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    a: &DeviceBuffer<T>,
    b: &DeviceBuffer<T>,
    beta: f32,
    c: &mut DeviceBuffer<C>,
) -> Result<()> {
    if a.len() < m * k || b.len() < k * n || c.len() < m * n {
        return Err(DeviceError::Shape {
            op: "matmul",
            msg: format!("a {} b {} c {} too small for m={m} n={n} k={k}", a.len(), b.len(), c.len()),
        });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let t = T::GEMM;
    gpu.gemm(&Gemm {
        trans_a: tb,
        trans_b: ta,
        m: n,
        n: m,
        k,
        alpha,
        a: b.ptr(),
        a_type: t,
        lda: if tb { k } else { n },
        b: a.ptr(),
        b_type: t,
        ldb: if ta { m } else { k },
        beta,
        c: c.ptr(),
        c_type: C::GEMM,
        ldc: n,
    })
}
