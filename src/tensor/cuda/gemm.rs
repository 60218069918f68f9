//! Dense GEMMs through the device's cuBLAS-style GEMM: the linear layer
//! `out[m, n] = x[m, k] · W[n, k]ᵀ` (PyTorch `nn.Linear` layout) with inputs in the storage type
//! ([`Act`]: bf16 or f32) and fp32 accumulation, writing the storage type (projections) or fp32
//! (router logits, LM head, where the consumer wants full precision).

use super::gpu::{Act, DeviceBuffer, Elem, GemmElem, Gpu};
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
    let (x, w) = (View::dense(x, k), View::dense(w, k));
    matmul_views(gpu, (false, true), (m, n, k), 1.0, x, w, 0.0, ViewMut::dense(out, n))
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
    let a = View::dense(a, if ta { m } else { k });
    let b = View::dense(b, if tb { k } else { n });
    matmul_views(gpu, (ta, tb), (m, n, k), alpha, a, b, beta, ViewMut::dense(c, n))
}

/// A row-major matrix inside a device buffer: it starts at element `at` and its rows are `ld`
/// elements apart (a block of rows, or a column range of a wider matrix).
#[derive(Clone, Copy)]
pub struct View<'a, T: Elem> {
    pub buf: &'a DeviceBuffer<T>,
    pub at: usize,
    pub ld: usize,
}

impl<'a, T: Elem> View<'a, T> {
    /// The whole buffer as rows of `ld` elements.
    pub fn dense(buf: &'a DeviceBuffer<T>, ld: usize) -> Self {
        View { buf, at: 0, ld }
    }
}

/// The output form of [`View`].
pub struct ViewMut<'a, T: Elem> {
    pub buf: &'a mut DeviceBuffer<T>,
    pub at: usize,
    pub ld: usize,
}

impl<'a, T: Elem> ViewMut<'a, T> {
    pub fn dense(buf: &'a mut DeviceBuffer<T>, ld: usize) -> Self {
        ViewMut { buf, at: 0, ld }
    }
}

/// Whether a `[rows, cols]` matrix at `at` with row stride `ld` lies inside `len` elements.
fn fits(len: usize, at: usize, ld: usize, rows: usize, cols: usize) -> bool {
    rows == 0 || cols == 0 || (ld >= cols && at + (rows - 1) * ld + cols <= len)
}

/// [`matmul`] over views: `a` holds `op(a)` (`[m, k]`, stored `[k, m]` when `ta`), `b` holds
/// `op(b)` (`[k, n]`, stored `[n, k]` when `tb`), `c` the `[m, n]` result, each with its own
/// offset and row stride.
#[allow(clippy::too_many_arguments)] // a GEMM's operands, sizes and scalars
pub fn matmul_views<T: GemmElem, C: GemmElem>(
    gpu: &Gpu,
    (ta, tb): (bool, bool),
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    a: View<'_, T>,
    b: View<'_, T>,
    beta: f32,
    c: ViewMut<'_, C>,
) -> Result<()> {
    let (ar, ac) = if ta { (k, m) } else { (m, k) };
    let (br, bc) = if tb { (n, k) } else { (k, n) };
    if !fits(a.buf.len(), a.at, a.ld, ar, ac) || !fits(b.buf.len(), b.at, b.ld, br, bc) || !fits(c.buf.len(), c.at, c.ld, m, n) {
        let at = |len: usize, at: usize, ld: usize| format!("{len} (at {at}, ld {ld})");
        let (ea, eb, ec) = (at(a.buf.len(), a.at, a.ld), at(b.buf.len(), b.at, b.ld), at(c.buf.len(), c.at, c.ld));
        return Err(DeviceError::Shape { op: "matmul", msg: format!("a {ea}, b {eb}, c {ec} too small for m={m} n={n} k={k}") });
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
        a: b.buf.ptr_at(b.at),
        a_type: t,
        lda: b.ld,
        b: a.buf.ptr_at(a.at),
        b_type: t,
        ldb: a.ld,
        beta,
        c: c.buf.ptr_at(c.at),
        c_type: C::GEMM,
        ldc: c.ld,
    })
}
