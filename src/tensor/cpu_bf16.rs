//! CPU kernels for bf16 weight matrices (the storage format of bf16 checkpoints): exact widening
//! to f32 and the few-row (decode) product `out[r, j] = x[r]·w[j]` reading the bf16 weights
//! directly, so a decode step streams half the bytes of an f32 copy. Every product accumulates
//! in f32; a bf16 value widens to f32 exactly (`bits << 16`), so results differ from the f32
//! kernels on widened weights only by summation order.
//! [`cpu::linear`](super::cpu::linear) chooses between these and the f32 kernels.

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

/// AVX2+FMA register-tiled few-row kernel over bf16 weights: tiles of 2 rows of `x` × 4 weight rows
/// (8 accumulators + 4 widened weight vectors fit Zen 3's 16 ymm registers), 8 lanes.
#[cfg(target_arch = "x86_64")]
mod fma {
    use half::bf16;
    use std::arch::x86_64::*;

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
        let (xp, wp) = (x.as_ptr(), w.as_ptr() as *const u16);
        let mut j = 0;
        while j < nrows {
            let jn = if nrows - j >= 4 { 4 } else { 1 };
            let mut r = 0;
            while r < m {
                let rn = if m - r >= 2 { 2 } else { 1 };
                let (xr, wr) = (xp.add(r * k), wp.add(j * k));
                let o = out.add(r * ldo + j);
                match (rn, jn) {
                    (2, 4) => store(&tile::<2, 4>(xr, wr, k), o, ldo),
                    (1, 4) => store(&tile::<1, 4>(xr, wr, k), o, ldo),
                    (2, _) => store(&tile::<2, 1>(xr, wr, k), o, ldo),
                    _ => store(&tile::<1, 1>(xr, wr, k), o, ldo),
                }
                r += rn;
            }
            j += jn;
        }
    }

    #[inline(always)]
    unsafe fn store<const R: usize, const J: usize>(t: &[[f32; J]; R], out: *mut f32, ldo: usize) {
        for (rr, row) in t.iter().enumerate() {
            for (jj, v) in row.iter().enumerate() {
                *out.add(rr * ldo + jj) = *v;
            }
        }
    }

    /// 8 bf16 values at `p` widened to f32 lanes.
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }

    /// One 8-wide step at column `c`: J widened weight vectors times R rows of `x`.
    #[inline(always)]
    unsafe fn step<const R: usize, const J: usize>(
        acc: &mut [[__m256; J]; R],
        x: *const f32,
        w: *const u16,
        k: usize,
        c: usize,
    ) {
        let mut wv = [_mm256_setzero_ps(); J];
        for (jj, v) in wv.iter_mut().enumerate() {
            *v = load8(w.add(jj * k + c));
        }
        for (rr, a) in acc.iter_mut().enumerate() {
            let xv = _mm256_loadu_ps(x.add(rr * k + c));
            for (jj, v) in wv.iter().enumerate() {
                a[jj] = _mm256_fmadd_ps(xv, *v, a[jj]);
            }
        }
    }

    /// Dot products of R rows at `x` (f32) with J rows at `w` (bf16), both with row stride `k`.
    #[inline(always)]
    unsafe fn tile<const R: usize, const J: usize>(x: *const f32, w: *const u16, k: usize) -> [[f32; J]; R] {
        let mut acc = [[_mm256_setzero_ps(); J]; R];
        // One 64-byte line of every weight row per iteration, prefetching PREFETCH lines ahead
        // (several short interleaved streams: the hardware prefetcher alone under-fetches).
        const PREFETCH: usize = 8 * 32;
        let (k32, k8) = (k / 32 * 32, k / 8 * 8);
        let mut c = 0;
        while c < k32 {
            for jj in 0..J {
                _mm_prefetch::<_MM_HINT_T0>(w.add(jj * k + c + PREFETCH) as *const i8);
            }
            for s in 0..4 {
                step(&mut acc, x, w, k, c + 8 * s);
            }
            c += 32;
        }
        while c < k8 {
            step(&mut acc, x, w, k, c);
            c += 8;
        }
        let mut out = [[0.0f32; J]; R];
        for rr in 0..R {
            for jj in 0..J {
                let v = acc[rr][jj];
                let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
                let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
                let mut t = _mm_cvtss_f32(s);
                for cc in k8..k {
                    t += *x.add(rr * k + cc) * f32::from_bits((*w.add(jj * k + cc) as u32) << 16);
                }
                out[rr][jj] = t;
            }
        }
        out
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
