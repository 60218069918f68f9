//! CPU kernels on f32 slices: the linear layer `x·Wᵀ` (the `gemm` crate for matrices, a
//! rayon-parallel dot-product kernel for a few rows), RMSNorm variants, activations and softmax.
//! Every op names its dimensions explicitly; a CUDA backend mirrors this list one to one.

use rayon::prelude::*;

/// True when the CPU has AVX2 and FMA (checked once, cached by std).
#[inline]
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Define a function whose body is compiled twice — for the baseline target and with AVX2+FMA
/// enabled — and dispatched at run time. Use it for leaf kernels (closures inside the body, e.g.
/// rayon tasks, do not inherit the features); helpers they call must be `#[inline(always)]`.
macro_rules! simd_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($a:ident : $t:ty),* $(,)?) $(-> $r:ty)? $body:block) => {
        $(#[$m])* $vis fn $name($($a: $t),*) $(-> $r)? {
            #[inline(always)]
            fn inner($($a: $t),*) $(-> $r)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($a: $t),*) $(-> $r)? { inner($($a),*) }
                if $crate::tensor::cpu::has_avx2() {
                    // SAFETY: the CPU supports the enabled features (checked above).
                    return unsafe { avx2($($a),*) };
                }
            }
            inner($($a),*)
        }
    };
}
pub(crate) use simd_fn;

/// Below this many rows of `x`, `matmul_t` uses the row-parallel dot-product kernel (decode);
/// above it, the packed `gemm` kernel (prefill).
const SMALL_M: usize = 8;

/// `out[m, n] = x[m, k] · w[n, k]ᵀ` (PyTorch `nn.Linear` layout), overwriting `out`.
/// `parallel` = false keeps the call on the current thread (used inside outer parallel loops).
pub fn matmul_t(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, out: &mut [f32], parallel: bool) {
    assert_eq!(x.len(), m * k, "matmul_t: x");
    assert_eq!(w.len(), n * k, "matmul_t: w");
    assert_eq!(out.len(), m * n, "matmul_t: out");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    if m <= SMALL_M {
        matmul_t_rows(x, m, k, w, n, out, parallel);
        return;
    }
    let threads = if parallel { rayon::current_num_threads() } else { 1 };
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: pointers and strides describe the checked slices above: dst m×n row-major,
    // lhs m×k row-major, rhs = wᵀ (k×n) read from w (n×k row-major).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// Few-row kernel: each output column `j` is `m` dot products against weight row `j`, so every
/// weight row is read once for all rows of `x` (decode is weight-bandwidth bound). Column
/// blocks run in parallel.
fn matmul_t_rows(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, out: &mut [f32], parallel: bool) {
    const BLOCK: usize = 128;
    let nb = n.div_ceil(BLOCK);
    let compute = |jb: usize| -> Vec<f32> {
        let (j0, j1) = (jb * BLOCK, ((jb + 1) * BLOCK).min(n));
        let mut res = vec![0.0f32; (j1 - j0) * m];
        rows_block(x, m, k, &w[j0 * k..j1 * k], &mut res);
        res
    };
    let blocks: Vec<Vec<f32>> =
        if parallel && nb > 1 { (0..nb).into_par_iter().map(compute).collect() } else { (0..nb).map(compute).collect() };
    for (jb, res) in blocks.iter().enumerate() {
        let j0 = jb * BLOCK;
        for (jj, col) in res.chunks_exact(m).enumerate() {
            for (r, v) in col.iter().enumerate() {
                out[r * n + j0 + jj] = *v;
            }
        }
    }
}

simd_fn! {
    /// `res[j·m + r] = x[r]·w[j]` for the weight rows `w` (`[rows, k]`) and `m` rows of `x`.
    fn rows_block(x: &[f32], m: usize, k: usize, w: &[f32], res: &mut [f32]) {
        for (j, wr) in w.chunks_exact(k).enumerate() {
            for (r, xr) in x.chunks_exact(k).take(m).enumerate() {
                res[j * m + r] = dot(xr, wr);
            }
        }
    }
}

/// Dot product with 8 independent accumulators (vectorises without `-ffast-math`).
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// `y += a·x`.
#[inline(always)]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// Zero-centred RMSNorm of every row of `x` (width `w.len()`): `x·rsqrt(mean x²+eps)·(1+w)`.
pub fn rms_norm_1p(x: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    for row in x.chunks_exact_mut(d) {
        let r = inv_rms(row, eps);
        for (v, wi) in row.iter_mut().zip(w) {
            *v = *v * r * (1.0 + wi);
        }
    }
}

/// Gated RMSNorm of every row (width `w.len()`), plain weight: `w·(x·rsqrt(mean x²+eps))·SiLU(z)`.
pub fn rms_norm_gated(x: &mut [f32], z: &[f32], w: &[f32], eps: f32) {
    let d = w.len();
    for (row, zr) in x.chunks_exact_mut(d).zip(z.chunks_exact(d)) {
        let r = inv_rms(row, eps);
        for ((v, wi), zi) in row.iter_mut().zip(w).zip(zr) {
            *v = wi * (*v * r) * silu(*zi);
        }
    }
}

#[inline]
fn inv_rms(row: &[f32], eps: f32) -> f32 {
    let ms = dot(row, row) / row.len() as f32;
    1.0 / (ms + eps).sqrt()
}

/// Scale `x` to unit L2 norm as HF's `l2norm`: `x·rsqrt(Σx² + eps)`, times `scale`.
pub fn l2_normalize(x: &mut [f32], eps: f32, scale: f32) {
    let r = scale / (dot(x, x) + eps).sqrt();
    for v in x.iter_mut() {
        *v *= r;
    }
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// PyTorch `softplus` with its default threshold 20.
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// In-place numerically stable softmax of one row.
#[inline(always)]
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
        let mut o = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                o[i * n + j] = (0..k).map(|p| x[i * k + p] as f64 * w[j * k + p] as f64).sum::<f64>() as f32;
            }
        }
        o
    }

    #[test]
    fn matmul_matches_naive_small_and_large_m() {
        for &(m, k, n) in &[(1, 37, 70), (5, 64, 129), (33, 50, 65), (1, 8, 1)] {
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect();
            let w: Vec<f32> = (0..n * k).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1).collect();
            let want = naive(&x, m, k, &w, n);
            for par in [false, true] {
                let mut out = vec![f32::NAN; m * n];
                matmul_t(&x, m, k, &w, n, &mut out, par);
                for (a, b) in out.iter().zip(&want) {
                    assert!((a - b).abs() < 1e-4, "{m}x{k}x{n}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn softmax_and_softplus() {
        let mut x = [1.0f32, 2.0, 3.0];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[2] > x[1] && x[1] > x[0]);
        assert_eq!(softplus(30.0), 30.0);
        assert!((softplus(0.0) - 2f32.ln()).abs() < 1e-6);
    }
}
