//! Backward kernels on f32 slices: strided GEMM with accumulation (the linear layer's forward,
//! input gradient and weight gradient), and the backward of the (1+w) RMSNorm, the gated RMSNorm,
//! the L2 normalisation and the scalar activations. Forward kernels stay in `tensor::cpu`.

use crate::tensor::cpu::{sigmoid, silu};

/// A row-major or transposed view of a matrix: element (i, j) is at `i·rs + j·cs`.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub rs: isize,
    pub cs: isize,
}

impl<'a> View<'a> {
    /// Row-major `[rows, cols]`.
    pub fn rows(data: &'a [f32], cols: usize) -> Self {
        View { data, rs: cols as isize, cs: 1 }
    }
    /// The transpose of a row-major `[rows, cols]` matrix.
    pub fn t(data: &'a [f32], cols: usize) -> Self {
        View { data, rs: 1, cs: cols as isize }
    }
}

/// `c[m, n] (+)= a[m, k] · b[k, n]`, `c` row-major; accumulates when `acc`.
pub fn gemm(m: usize, n: usize, k: usize, a: View<'_>, b: View<'_>, c: &mut [f32], acc: bool) {
    assert_eq!(c.len(), m * n, "gemm: c");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !acc {
            c.fill(0.0);
        }
        return;
    }
    let span = |v: &View<'_>, r: usize, cc: usize| (r - 1) as isize * v.rs + (cc - 1) as isize * v.cs;
    assert!(span(&a, m, k) < a.data.len() as isize && span(&b, k, n) < b.data.len() as isize, "gemm: operand");
    let work = m * n * k;
    let threads = rayon::current_num_threads();
    let par = if work > 1 << 18 && threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: the strides above address only elements inside the checked slices; c is m×n
    // row-major and does not alias a or b (distinct borrows).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            acc,
            a.data.as_ptr(),
            a.cs,
            a.rs,
            b.data.as_ptr(),
            b.cs,
            b.rs,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// Linear forward `y[m, n] = x[m, k] · w[n, k]ᵀ`.
pub fn linear(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    let mut y = vec![0.0; m * n];
    gemm(m, n, k, View::rows(x, k), View::t(w, k), &mut y, false);
    y
}

/// Linear backward: accumulates `dw[n, k] += dyᵀ · x` and returns `dx[m, k] = dy · w`.
pub fn linear_backward(dy: &[f32], x: &[f32], m: usize, k: usize, w: &[f32], n: usize, dw: &mut [f32]) -> Vec<f32> {
    gemm(n, k, m, View::t(dy, n), View::rows(x, k), dw, true);
    linear_input_grad(dy, m, k, w, n)
}

/// The input gradient alone of the linear layer: `dx[m, k] = dy[m, n] · w[n, k]`.
pub fn linear_input_grad(dy: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    let mut dx = vec![0.0; m * k];
    gemm(m, k, n, View::rows(dy, n), View::rows(w, k), &mut dx, false);
    dx
}

/// `1/sqrt(mean x² + eps)` of one row (same formula as the forward kernel).
pub fn inv_rms(row: &[f32], eps: f32) -> f32 {
    let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
    1.0 / (ms + eps).sqrt()
}

/// RMSNorm core backward for one row: given the input `x`, its `r = inv_rms(x)` and the
/// gradient `gn` w.r.t. `x̂ = x·r`, returns `dx = r·(gn − x̂·mean(gn⊙x̂))`.
fn rms_core_backward(x: &[f32], r: f32, gn: &[f32], dx: &mut [f32]) {
    let d = x.len() as f32;
    let mean: f32 = gn.iter().zip(x).map(|(g, xi)| g * xi * r).sum::<f32>() / d;
    for ((o, g), xi) in dx.iter_mut().zip(gn).zip(x) {
        *o = r * (g - xi * r * mean);
    }
}

/// Backward of the zero-centred RMSNorm `y = x̂·(1+w)` over rows of `x` (width `w.len()`):
/// accumulates `dw` and returns `dx`.
pub fn rms_norm_1p_backward(x: &[f32], w: &[f32], eps: f32, dy: &[f32], dw: &mut [f32]) -> Vec<f32> {
    let d = w.len();
    let mut dx = vec![0.0; x.len()];
    let mut gn = vec![0.0; d];
    for ((xr, dyr), dxr) in x.chunks_exact(d).zip(dy.chunks_exact(d)).zip(dx.chunks_exact_mut(d)) {
        let r = inv_rms(xr, eps);
        for i in 0..d {
            dw[i] += dyr[i] * xr[i] * r;
            gn[i] = dyr[i] * (1.0 + w[i]);
        }
        rms_core_backward(xr, r, &gn, dxr);
    }
    dx
}

/// Backward of the gated RMSNorm `y = w⊙x̂⊙SiLU(z)` over rows (width `w.len()`): accumulates
/// `dw`, returns `(dx, dz)`.
pub fn rms_norm_gated_backward(
    x: &[f32],
    z: &[f32],
    w: &[f32],
    eps: f32,
    dy: &[f32],
    dw: &mut [f32],
) -> (Vec<f32>, Vec<f32>) {
    let d = w.len();
    let mut dx = vec![0.0; x.len()];
    let mut dz = vec![0.0; x.len()];
    let mut gn = vec![0.0; d];
    for (row, ((xr, zr), dyr)) in x.chunks_exact(d).zip(z.chunks_exact(d)).zip(dy.chunks_exact(d)).enumerate() {
        let r = inv_rms(xr, eps);
        for i in 0..d {
            let xh = xr[i] * r;
            let s = silu(zr[i]);
            dw[i] += dyr[i] * xh * s;
            dz[row * d + i] = dyr[i] * w[i] * xh * silu_grad(zr[i]);
            gn[i] = dyr[i] * w[i] * s;
        }
        rms_core_backward(xr, r, &gn, &mut dx[row * d..(row + 1) * d]);
    }
    (dx, dz)
}

/// Backward of `y = scale·x·(Σx² + eps)^-½` for one vector: returns `dx`.
pub fn l2_normalize_backward(x: &[f32], eps: f32, scale: f32, dy: &[f32]) -> Vec<f32> {
    let r = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() + eps).sqrt();
    let xdy: f32 = x.iter().zip(dy).map(|(a, b)| a * b).sum();
    x.iter().zip(dy).map(|(xi, g)| scale * (r * g - r * r * r * xi * xdy)).collect()
}

/// `d SiLU(z) / dz = σ(z)(1 + z(1 − σ(z)))`.
#[inline]
pub fn silu_grad(z: f32) -> f32 {
    let s = sigmoid(z);
    s * (1.0 + z * (1.0 - s))
}

/// `d softplus(x) / dx` with PyTorch's threshold 20 (identity above it).
#[inline]
pub fn softplus_grad(x: f32) -> f32 {
    if x > 20.0 {
        1.0
    } else {
        sigmoid(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::cpu::{l2_normalize, rms_norm_1p, rms_norm_gated};

    fn vals(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((((i as u32).wrapping_mul(2654435761u32) ^ seed) >> 8) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// Central finite difference of `f` (a scalar of a vector) at `x` along coordinate `i`.
    fn fd(f: &dyn Fn(&[f32]) -> f64, x: &[f32], i: usize) -> f64 {
        let h = 1e-3;
        let (mut a, mut b) = (x.to_vec(), x.to_vec());
        a[i] += h;
        b[i] -= h;
        (f(&a) - f(&b)) / (2.0 * h as f64)
    }

    fn dotf(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
    }

    #[test]
    fn linear_backward_matches_definition() {
        let (m, k, n) = (5, 7, 3);
        let (x, w, dy) = (vals(m * k, 1), vals(n * k, 2), vals(m * n, 3));
        let mut dw = vec![0.0; n * k];
        let dx = linear_backward(&dy, &x, m, k, &w, n, &mut dw);
        for i in 0..m {
            for p in 0..k {
                let want: f32 = (0..n).map(|j| dy[i * n + j] * w[j * k + p]).sum();
                assert!((dx[i * k + p] - want).abs() < 1e-5);
            }
        }
        for j in 0..n {
            for p in 0..k {
                let want: f32 = (0..m).map(|i| dy[i * n + j] * x[i * k + p]).sum();
                assert!((dw[j * k + p] - want).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn norm_backwards_match_finite_differences() {
        let d = 8;
        let (x, z, w, dy) = (vals(2 * d, 4), vals(2 * d, 5), vals(d, 6), vals(2 * d, 7));
        let f1 = |xx: &[f32]| {
            let mut y = xx.to_vec();
            rms_norm_1p(&mut y, &w, 1e-6);
            dotf(&y, &dy)
        };
        let mut dw = vec![0.0; d];
        let dx = rms_norm_1p_backward(&x, &w, 1e-6, &dy, &mut dw);
        for i in 0..2 * d {
            assert!((dx[i] as f64 - fd(&f1, &x, i)).abs() < 2e-3, "rms dx[{i}]");
        }
        let fg = |xx: &[f32], zz: &[f32]| {
            let mut y = xx.to_vec();
            rms_norm_gated(&mut y, zz, &w, 1e-6);
            dotf(&y, &dy)
        };
        let (dx, dz) = rms_norm_gated_backward(&x, &z, &w, 1e-6, &dy, &mut dw);
        for i in 0..2 * d {
            assert!((dx[i] as f64 - fd(&|v| fg(v, &z), &x, i)).abs() < 2e-3, "gated dx[{i}]");
            assert!((dz[i] as f64 - fd(&|v| fg(&x, v), &z, i)).abs() < 2e-3, "gated dz[{i}]");
        }
        let fl = |xx: &[f32]| {
            let mut y = xx.to_vec();
            l2_normalize(&mut y, 1e-6, 0.5);
            dotf(&y, &dy[..d])
        };
        let dx = l2_normalize_backward(&x[..d], 1e-6, 0.5, &dy[..d]);
        for i in 0..d {
            assert!((dx[i] as f64 - fd(&fl, &x[..d], i)).abs() < 2e-3, "l2 dx[{i}]");
        }
    }
}
