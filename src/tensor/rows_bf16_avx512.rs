//! The AVX-512 few-row (decode) kernel for bf16 weights, `out[r·ldo + j] = x[r]·w[j]`, exact in
//! f32 like every widening path ([`super::cpu_bf16`]), at a fraction of the widening cost.
//!
//! A bf16 row of even length `k` is read as `k/2` 32-bit words, each holding the values at `2c`
//! (low half) and `2c + 1` (high half). Masking a word with `0xFFFF0000` gives the odd value as an
//! exact f32, shifting it left by 16 the even one; so one 64-byte load feeds two FMAs after one AND
//! and one shift, against the unpack-and-shift per 8 values of the AVX2 kernel
//! ([`super::rows_avx2`]). The activations are split once per call into their even and odd
//! values (`xe[c] = x[2c]`, `xo[c] = x[2c + 1]`), so the products are the exact f32 products
//! of the contract; only the summation order differs (even and odd values alternate in one
//! accumulator per output). Register tiles: 1 row of `x` × 8 weight rows, or up to 4 rows × 4
//! weight rows; each weight row is prefetched a fixed distance ahead (several short interleaved
//! streams, which the hardware prefetcher alone under-fetches). The tail of a row is read with
//! masked loads (zero past the end), so there is no scalar remainder.
//!
//! Used by [`super::cpu_bf16::rows_block`] when the active path has AVX-512F and `k` is even.

#![cfg(target_arch = "x86_64")]

use super::rows_avx2::store;
use half::bf16;
use std::arch::x86_64::*;

thread_local! {
    /// The thread's even/odd split of the activations (`m` rows of `k/2` even values, then of odd).
    static SPLIT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Bytes ahead of the current position that each weight row is prefetched.
const PREFETCH_BYTES: usize = 1024;

/// `out[r·ldo + j] = x[r]·w[j]` for the `w.len() / k` weight rows and `m` rows of `x`.
///
/// # Safety
/// The CPU must support AVX-512F; `k` must be even and non-zero; `x` must hold `m·k` values,
/// `w` whole rows of `k`, and `out` must be valid for writes at `r·ldo + j`.
#[target_feature(enable = "avx512f")]
pub unsafe fn rows_block(x: &[f32], m: usize, k: usize, w: &[bf16], out: *mut f32, ldo: usize) {
    debug_assert!(k % 2 == 0 && k > 0 && x.len() >= m * k);
    let kh = k / 2;
    let nrows = w.len() / k;
    SPLIT.with(|split| {
        let mut split = split.borrow_mut();
        if split.len() < 2 * m * kh {
            split.resize(2 * m * kh, 0.0);
        }
        let (xe, xo) = split[..2 * m * kh].split_at_mut(m * kh);
        for r in 0..m {
            for c in 0..kh {
                xe[r * kh + c] = x[r * k + 2 * c];
                xo[r * kh + c] = x[r * k + 2 * c + 1];
            }
        }
        let (xe, xo) = (xe.as_ptr(), xo.as_ptr());
        let wp = w.as_ptr() as *const u32;
        let mut j = 0;
        while j < nrows {
            let jn = if m == 1 && nrows - j >= 8 {
                8
            } else if nrows - j >= 4 {
                4
            } else {
                1
            };
            let mut r = 0;
            while r < m {
                let rn = (m - r).min(4);
                let (e, o, wr) = (xe.add(r * kh), xo.add(r * kh), wp.add(j * kh));
                let dst = out.add(r * ldo + j);
                match (rn, jn) {
                    (1, 8) => store(&tile::<1, 8>(e, o, wr, kh), dst, ldo),
                    (4, 4) => store(&tile::<4, 4>(e, o, wr, kh), dst, ldo),
                    (3, 4) => store(&tile::<3, 4>(e, o, wr, kh), dst, ldo),
                    (2, 4) => store(&tile::<2, 4>(e, o, wr, kh), dst, ldo),
                    (1, 4) => store(&tile::<1, 4>(e, o, wr, kh), dst, ldo),
                    (4, _) => store(&tile::<4, 1>(e, o, wr, kh), dst, ldo),
                    (3, _) => store(&tile::<3, 1>(e, o, wr, kh), dst, ldo),
                    (2, _) => store(&tile::<2, 1>(e, o, wr, kh), dst, ldo),
                    _ => store(&tile::<1, 1>(e, o, wr, kh), dst, ldo),
                }
                r += rn;
            }
            j += jn;
        }
    })
}

/// One 16-word step at word `c` (lanes outside `mask` read as zero): J weight vectors times R rows.
#[inline(always)]
unsafe fn step<const R: usize, const J: usize>(
    acc: &mut [[__m512; J]; R],
    xe: *const f32,
    xo: *const f32,
    w: *const u32,
    kh: usize,
    c: usize,
    mask: __mmask16,
) {
    let hi_mask = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
    let mut odd = [_mm512_setzero_ps(); J];
    let mut even = [_mm512_setzero_ps(); J];
    for jj in 0..J {
        let v = _mm512_maskz_loadu_epi32(mask, w.add(jj * kh + c) as *const i32);
        odd[jj] = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
        even[jj] = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
    }
    for (rr, a) in acc.iter_mut().enumerate() {
        let e = _mm512_maskz_loadu_ps(mask, xe.add(rr * kh + c));
        let o = _mm512_maskz_loadu_ps(mask, xo.add(rr * kh + c));
        for jj in 0..J {
            a[jj] = _mm512_fmadd_ps(e, even[jj], a[jj]);
            a[jj] = _mm512_fmadd_ps(o, odd[jj], a[jj]);
        }
    }
}

/// Dot products of R rows (split at `xe`, `xo`, row stride `kh`) with J weight rows at `w` (`kh`
/// words each).
#[inline(always)]
unsafe fn tile<const R: usize, const J: usize>(xe: *const f32, xo: *const f32, w: *const u32, kh: usize) -> [[f32; J]; R] {
    let mut acc = [[_mm512_setzero_ps(); J]; R];
    let full = kh / 16 * 16;
    let mut c = 0;
    while c < full {
        for jj in 0..J {
            _mm_prefetch::<_MM_HINT_T0>((w.add(jj * kh + c) as *const i8).add(PREFETCH_BYTES));
        }
        step::<R, J>(&mut acc, xe, xo, w, kh, c, 0xFFFF);
        c += 16;
    }
    if c < kh {
        step::<R, J>(&mut acc, xe, xo, w, kh, c, ((1u32 << (kh - c)) - 1) as __mmask16);
    }
    let mut out = [[0.0f32; J]; R];
    for rr in 0..R {
        for jj in 0..J {
            out[rr][jj] = _mm512_reduce_add_ps(acc[rr][jj]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against an f64 reference of the exact products, on odd word counts (masked tails), every
    /// tile shape (1–9 rows of `x`, 1–13 weight rows) and non-finite weights kept in their lane.
    #[test]
    fn matches_exact_reference() {
        if !super::super::cpu_path::CpuPath::Avx512F.supported() {
            println!("skipped: this CPU lacks avx512f");
            return;
        }
        let mut s = 7u64;
        let mut rnd = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        for &(m, k, n) in &[(1, 2, 1), (1, 34, 9), (2, 64, 13), (3, 1026, 5), (4, 30, 8), (5, 96, 7), (9, 258, 12)] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let mut w: Vec<bf16> = (0..n * k).map(|_| bf16::from_f32(rnd())).collect();
            if n > 3 {
                w[3 * k + k - 1] = bf16::INFINITY;
            }
            let mut out = vec![f32::NAN; m * n];
            // SAFETY: avx512f checked; k even; sizes as built; out holds m·n.
            unsafe { rows_block(&x, m, k, &w, out.as_mut_ptr(), n) };
            for r in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| x[r * k + p] as f64 * w[j * k + p].to_f64()).sum();
                    let got = out[r * n + j] as f64;
                    if want.is_finite() {
                        assert!((got - want).abs() <= 1e-5 * (k as f64).sqrt() * (1.0 + want.abs()), "{m}x{k}x{n} [{r},{j}]: {got} vs {want}");
                    } else {
                        assert_eq!(got, want, "{m}x{k}x{n} [{r},{j}]");
                    }
                }
            }
        }
    }
}
