//! CPU kernels on f32 slices: the f32 product `x·Wᵀ` (a packed AVX-512 kernel or the `gemm`
//! crate for matrices, the few-row dot-product kernel for decode; [`super::linear`] dispatches
//! weights of either storage format), RMSNorm variants, activations and softmax.
//! Every op names its dimensions explicitly; a CUDA backend mirrors this list one to one.


/// True when the engine runs on a path with AVX2 and FMA ([`super::cpu_path::active`]: the CPU
/// has them and no lower path was forced).
#[inline]
pub fn has_avx2() -> bool {
    super::cpu_path::active() >= super::cpu_path::CpuPath::Avx2
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

/// While alive, the current thread treats subnormal f32 inputs as zero and flushes subnormal
/// results to zero (x86 MXCSR DAZ + FTZ; restored on drop; a no-op elsewhere). Decays such as
/// `e^γ` of the Gated DeltaNet and softmax tails underflow into the subnormal range, where every
/// floating-point op takes a microcode assist (~100× slower); flushing changes values only below
/// 1.2·10⁻³⁸.
pub struct FlushDenormals {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

impl FlushDenormals {
    #[inline]
    pub fn new() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let mut saved: u32 = 0;
            // SAFETY: stmxcsr/ldmxcsr read and write the thread's SSE control register through
            // valid 4-byte locations; setting DAZ (bit 6) and FTZ (bit 15) is always allowed.
            unsafe {
                std::arch::asm!("stmxcsr [{p}]", p = in(reg) &mut saved, options(nostack));
                let flushed = saved | 0x8040;
                std::arch::asm!("ldmxcsr [{p}]", p = in(reg) &flushed, options(nostack, readonly));
            }
            FlushDenormals { saved }
        }
        #[cfg(not(target_arch = "x86_64"))]
        FlushDenormals {}
    }
}

impl Default for FlushDenormals {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: restores the value read in `new`.
        unsafe {
            std::arch::asm!("ldmxcsr [{p}]", p = in(reg) &self.saved, options(nostack, readonly));
        }
    }
}

/// Below this many rows of `x`, `matmul_t` uses the row-parallel dot-product kernel (decode);
/// above it, the packed `gemm` kernel (prefill).
pub(crate) const SMALL_M: usize = 8;

/// A many-row product with at least this many rows and columns uses the packed AVX-512 kernel
/// ([`super::cpu_avx512`]) when the CPU has avx512f; narrower ones (e.g. the 8-column GDN gate
/// projections, 16-row expert batches) stay on the `gemm` crate, which is faster there
/// (measured on 2 threads: 512×1024×8 at 55 vs 18 GFLOP/s, 16×256×1024 at 51 vs 39).
const AVX512_MIN_ROWS: usize = 32;
const AVX512_MIN_COLS: usize = 64;

/// `out[m, n] = x[m, k] · w[n, k]ᵀ` (PyTorch `nn.Linear` layout), overwriting `out`.
/// `parallel` = false keeps the call on the current thread (used inside outer parallel loops).
pub fn matmul_t(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    n: usize,
    out: &mut [f32],
    parallel: bool,
) {
    let threads = if parallel { rayon::current_num_threads() } else { 1 };
    matmul_t_on(super::cpu_path::active(), x, m, k, w, n, out, threads)
}

/// [`matmul_t`] on the kernels of `path` (which the CPU must support) and up to `threads` rayon
/// workers: the packed AVX-512 kernel on the AVX-512 paths (large enough products), otherwise the
/// `gemm` crate (its own portable or AVX2 kernels; on other architectures e.g. NEON). Few-row
/// products (decode) use the active path's few-row kernels whatever `path` is.
#[allow(clippy::too_many_arguments)]
pub fn matmul_t_on(
    path: super::cpu_path::CpuPath,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    n: usize,
    out: &mut [f32],
    threads: usize,
) {
    use super::cpu_path::CpuPath;
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
        return super::linear::few_rows_f32(x, m, k, w, n, out, threads > 1);
    }
    if m >= AVX512_MIN_ROWS && n >= AVX512_MIN_COLS && path >= CpuPath::Avx512F {
        super::cpu_avx512::matmul_t(x, m, k, w, n, out, threads);
        return;
    }
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

/// `c[m, n] = a·b` (or `+=` with `accumulate`) for `a` `[m, k]` and `b` `[k, n]` given by element
/// strides (row, column), `c` row-major. Single-threaded: for small products inside parallel tasks.
/// With avx512f and `b` contiguous along `n` (column stride 1) it uses the unpacked AVX-512
/// kernel [`super::cpu_avx512::gemm_small`], else the `gemm` crate.
#[allow(clippy::too_many_arguments)]
pub fn gemm_strided(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    (a_rs, a_cs): (usize, usize),
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
    c: &mut [f32],
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert_eq!(c.len(), m * n, "gemm_strided: c");
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    assert!((m - 1) * a_rs + (k - 1) * a_cs < a.len(), "gemm_strided: a");
    assert!((k - 1) * b_rs + (n - 1) * b_cs < b.len(), "gemm_strided: b");
    if b_cs == 1 && super::cpu_avx512::available() {
        super::cpu_avx512::gemm_small((m, n, k), a, (a_rs, a_cs), b, b_rs, c, n, accumulate);
        return;
    }
    // SAFETY: the bounds of every accessed element were checked above.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// `out[r·ldo + j] = x[r]·w[j]` for the `nw` weight rows `w` (`[nw, k]`) and `m` rows of `x`.
///
/// # Safety
/// `out` must be valid for writes at `r·ldo + j` for `r < m`, `j < nw`.
pub(crate) unsafe fn rows_block(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    nw: usize,
    out: *mut f32,
    ldo: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::cpu_avx512::available() {
            // SAFETY: avx512f present; the kernel reads inside `x`, `w` and writes as promised.
            return super::cpu_avx512::rows(x, m, k, w, nw, out, ldo);
        }
        if has_avx2() {
            // SAFETY: AVX2+FMA present; same contract.
            return super::rows_avx2::rows_block(x, m, k, &w[..nw * k], out, ldo);
        }
    }
    for (j, wr) in w.chunks_exact(k).take(nw).enumerate() {
        for (r, xr) in x.chunks_exact(k).take(m).enumerate() {
            *out.add(r * ldo + j) = dot(xr, wr);
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

/// The residual step of a decoder: `x += delta` (when given), then a normed copy
/// `RMSNorm1p(x)` with weight `w` (see [`rms_norm_1p`]).
pub fn add_rms_norm_1p(x: &mut [f32], delta: Option<&[f32]>, w: &[f32], eps: f32) -> Vec<f32> {
    if let Some(d) = delta {
        for (a, b) in x.iter_mut().zip(d) {
            *a += b;
        }
    }
    let mut u = x.to_vec();
    rms_norm_1p(&mut u, w, eps);
    u
}

simd_fn! {
    /// Gated RMSNorm of every row (width `w.len()`), plain weight: `w·(x·rsqrt(mean x²+eps))·SiLU(z)`.
    pub fn rms_norm_gated(x: &mut [f32], z: &[f32], w: &[f32], eps: f32) {
        let d = w.len();
        for (row, zr) in x.chunks_exact_mut(d).zip(z.chunks_exact(d)) {
            let r = inv_rms(row, eps);
            for ((v, wi), zi) in row.iter_mut().zip(w).zip(zr) {
                *v = wi * (*v * r) * silu_fast(*zi);
            }
        }
    }
}

simd_fn! {
    /// SwiGLU in place: `g ← SiLU(g) ⊙ u`.
    pub fn swiglu(g: &mut [f32], u: &[f32]) {
        for (gg, uu) in g.iter_mut().zip(u) {
            *gg = silu_fast(*gg) * uu;
        }
    }
}

simd_fn! {
    /// `x ← SiLU(x)` over a slice.
    pub fn silu_inplace(x: &mut [f32]) {
        for v in x.iter_mut() {
            *v = silu_fast(*v);
        }
    }
}

simd_fn! {
    /// Sigmoid gate: `x ← x ⊙ σ(g)`.
    pub fn mul_sigmoid(x: &mut [f32], g: &[f32]) {
        for (v, gg) in x.iter_mut().zip(g) {
            *v *= 1.0 / (1.0 + exp_fast(-gg));
        }
    }
}

/// `eˣ` for f32 in a form the compiler vectorises (no libm call): Cody–Waite reduction by ln 2
/// and a degree-6 polynomial; relative error below 2·10⁻⁷ (about 1 ulp). Inputs are clamped to
/// [-87.3, 88.3] (the result is always a finite normal number); NaN propagates.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = if x < -87.3 {
        -87.3
    } else if x > 88.3 {
        88.3
    } else {
        x
    };
    let n = (x * LOG2E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    // e^r on |r| ≤ ln2/2 (Taylor coefficients, Horner).
    let p = 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let p = p * r + 1.0;
    let p = p * r + 1.0;
    let bits = ((n as i32 + 127) as u32) << 23;
    p * f32::from_bits(bits)
}

/// SiLU with [`exp_fast`] (vectorisable).
#[inline(always)]
pub fn silu_fast(x: f32) -> f32 {
    x / (1.0 + exp_fast(-x))
}

#[inline]
fn inv_rms(row: &[f32], eps: f32) -> f32 {
    let ms = dot(row, row) / row.len() as f32;
    1.0 / (ms + eps).sqrt()
}

/// Scale `x` to unit L2 norm as HF's `l2norm`: `x·rsqrt(Σx² + eps)`, times `scale`.
#[inline(always)]
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
pub(crate) mod tests {
    use super::*;

    /// f64 reference of `x[m, k]·w[n, k]ᵀ`.
    pub(crate) fn naive(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
        let mut o = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                o[i * n + j] = (0..k)
                    .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                    .sum::<f64>() as f32;
            }
        }
        o
    }

    /// `matmul_t` on deterministic inputs equals the f64 reference within 1e-4.
    fn assert_matmul_matches_naive(m: usize, k: usize, n: usize, par: bool) {
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1)
            .collect();
        let want = naive(&x, m, k, &w, n);
        let mut out = vec![f32::NAN; m * n];
        matmul_t(&x, m, k, &w, n, &mut out, par);
        for (a, b) in out.iter().zip(&want) {
            assert!((a - b).abs() < 1e-4, "{m}x{k}x{n}: {a} vs {b}");
        }
    }

    #[test]
    fn matmul_matches_naive_small_and_large_m() {
        for &(m, k, n) in &[(1, 37, 70), (5, 64, 129), (33, 50, 65), (1, 8, 1)] {
            for par in [false, true] {
                assert_matmul_matches_naive(m, k, n, par);
            }
        }
    }

    #[test]
    fn gemm_strided_with_transposed_operands() {
        let (m, n, k) = (3, 5, 4);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 2.0).collect(); // [m,k] row-major
        let bt: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 - 3.0).collect(); // [n,k] = bᵀ
        let want = naive(&a, m, k, &bt, n);
        let mut c = vec![1.0; m * n];
        gemm_strided((m, n, k), &a, (k, 1), &bt, (1, k), &mut c, false);
        assert_eq!(c, want);
        gemm_strided((m, n, k), &a, (k, 1), &bt, (1, k), &mut c, true);
        assert!(c.iter().zip(&want).all(|(x, y)| (x - 2.0 * y).abs() < 1e-4));
    }

    #[test]
    fn exp_fast_matches_libm() {
        let mut worst = 0.0f32;
        for i in -20000..=20000 {
            let x = i as f32 * 0.0043;
            let (a, b) = (exp_fast(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert!(exp_fast(f32::NAN).is_nan());
        assert!(exp_fast(-1000.0) >= 0.0 && exp_fast(-1000.0) < 1e-37);
        let mut g = vec![-3.0f32, 0.0, 2.5];
        swiglu(&mut g, &[2.0, 1.0, -1.0]);
        for (a, (x, u)) in g.iter().zip([(-3.0f32, 2.0f32), (0.0, 1.0), (2.5, -1.0)]) {
            assert!((a - silu(x) * u).abs() < 1e-6);
        }
    }

    #[test]
    fn few_row_kernel_matches_naive_for_every_tile_shape() {
        for m in 1..=8 {
            for &(k, n) in &[(1, 1), (15, 5), (16, 4), (33, 9), (130, 131)] {
                assert_matmul_matches_naive(m, k, n, true);
            }
        }
    }

    #[test]
    fn gemm_strided_small_shapes_all_strides() {
        // b contiguous (the AVX-512 path when present) and b strided (the gemm crate).
        for &(m, n, k) in &[
            (1, 1, 1),
            (14, 32, 3),
            (15, 33, 17),
            (64, 64, 128),
            (3, 17, 5),
            (29, 130, 7),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 3 % 17) as f32 - 8.0) * 0.1)
                .collect();
            let bt: Vec<f32> = (0..n * k)
                .map(|i| ((i * 7 % 19) as f32 - 9.0) * 0.1)
                .collect();
            let b: Vec<f32> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect(); // [k, n]
            let want = naive(&a, m, k, &bt, n);
            for (bb, strides) in [(&b, (n, 1)), (&bt, (1, k))] {
                let mut c = vec![0.5f32; m * n];
                gemm_strided((m, n, k), &a, (k, 1), bb, strides, &mut c, true);
                for (x, y) in c.iter().zip(&want) {
                    assert!((x - 0.5 - y).abs() < 1e-4, "{m}x{n}x{k}: {x} vs {y}");
                }
                // Transposed a: a_t[p, i] = a[i, p].
                let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
                gemm_strided((m, n, k), &at, (1, m), bb, strides, &mut c, false);
                for (x, y) in c.iter().zip(&want) {
                    assert!((x - y).abs() < 1e-4, "{m}x{n}x{k} (aT): {x} vs {y}");
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
