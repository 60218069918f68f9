//! CPU kernels for bf16 weight matrices (the storage format of bf16 checkpoints): exact widening
//! to f32 and the few-row (decode) product `out[r, j] = x[r]·w[j]` reading the bf16 weights
//! directly, so a decode step streams half the bytes of an f32 copy (AVX-512:
//! [`super::rows_bf16_avx512`]; AVX2: [`super::rows_avx2`]). Every product accumulates
//! in f32; a bf16 value widens to f32 exactly (`bits << 16`), so results differ from the f32
//! kernels on widened weights only by summation order.
//! [`linear`](super::linear) chooses between these and the f32 kernels.

use super::cpu::simd_fn;
use half::bf16;

/// One bf16 value as f32 (exact).
#[inline(always)]
fn widen1(v: bf16) -> f32 {
    f32::from_bits((v.to_bits() as u32) << 16)
}

simd_fn! {
    /// `dst[i] = src[i]` as f32 (exact); the lengths must match.
    pub fn widen(src: &[bf16], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len(), "widen: lengths");
        for (d, s) in dst.iter_mut().zip(src) {
            *d = widen1(*s);
        }
    }
}

/// `out[r·ldo + j] = x[r]·w[j]` for the `nw` bf16 weight rows `w` (`[nw, k]`) and `m` rows of
/// `x` (`[m, k]`).
///
/// # Safety
/// `out` must be valid for writes at `r·ldo + j` for `r < m`, `j < nw`.
pub unsafe fn rows_block(x: &[f32], m: usize, k: usize, w: &[bf16], nw: usize, out: *mut f32, ldo: usize) {
    assert!(x.len() >= m * k && w.len() >= nw * k, "rows_block(bf16): operand sizes");
    #[cfg(target_arch = "x86_64")]
    {
        if k % 2 == 0 && k > 0 && super::cpu_avx512::available() {
            // SAFETY: AVX-512F present (the active path); k even and non-zero; sizes checked above.
            return super::rows_bf16_avx512::rows_block(x, m, k, &w[..nw * k], out, ldo);
        }
        if super::cpu::has_avx2() {
            // SAFETY: AVX2+FMA present; operand sizes checked above; `out` as promised.
            return fma::rows_block(x, m, k, &w[..nw * k], out, ldo);
        }
    }
    for j in 0..nw {
        let wr = &w[j * k..(j + 1) * k];
        for r in 0..m {
            let xr = &x[r * k..(r + 1) * k];
            let s: f32 = xr.iter().zip(wr).map(|(a, b)| a * widen1(*b)).sum();
            *out.add(r * ldo + j) = s;
        }
    }
}

/// AVX2+FMA few-row product over bf16 weights: the generic register-tiled kernel of
/// [`super::rows_avx2`] reading bf16 directly (1–2 rows), or, for more rows, groups of weight rows
/// widened once into an L1-resident f32 block and run through the f32 kernel.
#[cfg(target_arch = "x86_64")]
mod fma {
    use half::bf16;

    /// Weight rows widened together when `x` has more than 2 rows (one L1-resident f32 block
    /// reused by every row pair instead of widening each weight vector once per pair).
    const GROUP: usize = 4;

    thread_local! {
        /// The thread's reused block of widened weight rows.
        static WIDE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn rows_block(x: &[f32], m: usize, k: usize, w: &[bf16], out: *mut f32, ldo: usize) {
        let nrows = w.len() / k;
        if m > 2 {
            return WIDE.with(|wide| {
                let mut wide = wide.borrow_mut();
                if wide.len() < GROUP * k {
                    wide.resize(GROUP * k, 0.0);
                }
                for j in (0..nrows).step_by(GROUP) {
                    let jn = GROUP.min(nrows - j);
                    let block = &mut wide[..jn * k];
                    super::widen(&w[j * k..(j + jn) * k], block);
                    super::super::cpu::rows_block(x, m, k, block, jn, out.add(j), ldo);
                }
            });
        }
        super::super::rows_avx2::rows_block(x, m, k, w, out, ldo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widen_is_exact() {
        let vals = [0.0f32, -0.0, 1.0, -2.5, 3.140625, 1e-30, f32::INFINITY, 65280.0];
        let b: Vec<bf16> = vals.iter().map(|&v| bf16::from_f32(v)).collect();
        let mut out = vec![f32::NAN; vals.len()];
        widen(&b, &mut out);
        for (o, bb) in out.iter().zip(&b) {
            assert_eq!(o.to_bits(), bb.to_f32().to_bits());
        }
    }
}
