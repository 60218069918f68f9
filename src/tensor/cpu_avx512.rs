//! Packed, cache-blocked AVX-512 f32 GEMM for the large-matrix case of the linear layer
//! `out[m, n] = x[m, k] · w[n, k]ᵀ` (prefill). [`cpu::matmul_t`](super::cpu::matmul_t) selects
//! it at run time when the CPU has `avx512f` and the product is large enough.
//!
//! Layout follows the BLIS/GotoBLAS scheme: the `n` dimension is cut into column panels of at
//! most [`NC`] (one rayon task each), `k` into blocks of [`KC`] and `m` into blocks of [`MC`].
//! For each `(n-panel, k-block)` the weight panel is packed once, transposed into micro-panels of
//! [`NR`] = 32 columns (two zmm registers) that are contiguous along `k`; for each `m`-block the
//! rows of `x` are packed into micro-panels of [`MR`] = 14 rows. The micro-kernel keeps a
//! 14 × 32 tile of `out` in 28 of the 32 zmm registers and per step of `k` does two vector loads,
//! fourteen broadcasts and 28 FMAs. Edge tiles are zero-padded in the packed buffers and copied out
//! partially, so any `m, n, k` works. Results differ from other kernels only by f32 rounding
//! (the summation order along `k` is sequential within a block, blocks are added in order).

// The `_mm512_*` intrinsics and `target_feature(enable = "avx512f")` are stable since Rust 1.89
// (the crate's `rust-version`).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use rayon::prelude::*;

/// Rows of `out` per micro-tile (broadcast operand).
const MR: usize = 14;
/// Columns of `out` per micro-tile (two 16-lane zmm vectors).
const NR: usize = 32;
/// Depth of one packed block: a `KC × NR` weight micro-panel (32 KiB) stays in L1.
const KC: usize = 256;
/// Rows of `x` per packed block (`MC × KC` = 140 KiB, kept in L2; a multiple of `MR`).
const MC: usize = 140;
const _: () = assert!(MC % MR == 0 && NC % NR == 0);
/// Most columns per rayon task (`KC × NC` packed weights ≈ 512 KiB, kept in L2).
const NC: usize = 512;

/// True when the CPU supports the AVX-512 foundation instructions this kernel uses.
#[inline]
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Raw output pointer shared by tasks that write disjoint column ranges.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: every task writes only its own column range of `out` (see `matmul_t`).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// `out[m, n] = x[m, k] · w[n, k]ᵀ`, overwriting `out`, on up to `threads` rayon workers.
///
/// Panics if the slice lengths do not match the dimensions or the CPU lacks `avx512f`
/// (callers check [`available`]).
pub fn matmul_t(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, out: &mut [f32], threads: usize) {
    assert_eq!(x.len(), m * k, "matmul_t_avx512: x");
    assert_eq!(w.len(), n * k, "matmul_t_avx512: w");
    assert_eq!(out.len(), m * n, "matmul_t_avx512: out");
    assert!(available(), "matmul_t_avx512: CPU lacks avx512f");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    // Column panels: a multiple of NR, at most NC, and at least one per thread when n allows.
    let per_thread = n.div_ceil(threads.max(1)).div_ceil(NR) * NR;
    let nc = per_thread.clamp(NR, NC);
    let panels = n.div_ceil(nc);
    let dst = OutPtr(out.as_mut_ptr());
    let run = |p: usize| {
        let (j0, j1) = (p * nc, ((p + 1) * nc).min(n));
        // SAFETY: avx512f was checked above; the task writes only columns j0..j1 of `out`,
        // which has m·n elements (checked above).
        unsafe { panel(x, m, k, &w[j0 * k..j1 * k], j1 - j0, dst, n, j0) }
    };
    if threads > 1 && panels > 1 {
        (0..panels).into_par_iter().for_each(run);
    } else {
        (0..panels).for_each(run);
    }
}

/// Compute columns `j0 .. j0 + nw` of `out` (row stride `ldo`) from the weight rows `w`
/// (`[nw, k]`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel(x: &[f32], m: usize, k: usize, w: &[f32], nw: usize, out: OutPtr, ldo: usize, j0: usize) {
    let nw_pad = nw.div_ceil(NR) * NR;
    // The packed weights are read with full-width vector loads: start them on a cache line
    // (micro-panel offsets are multiples of NR · 4 = 128 bytes) so no load splits two lines.
    let blen = nw_pad * KC.min(k);
    let mut bbuf = vec![0.0f32; blen + 16];
    let off = bbuf.as_ptr().align_offset(64);
    let bpack = &mut bbuf[off..off + blen];
    let mut apack = vec![0.0f32; MC.min(m.div_ceil(MR) * MR) * KC.min(k)];
    let mut tile = [0.0f32; MR * NR];
    for p0 in (0..k).step_by(KC) {
        let kc = KC.min(k - p0);
        pack_w(w, k, nw, p0, kc, bpack);
        for i0 in (0..m).step_by(MC) {
            let mc = MC.min(m - i0);
            pack_x(x, k, i0, mc, p0, kc, &mut apack);
            for jr in (0..nw).step_by(NR) {
                let nr = NR.min(nw - jr);
                let b = bpack.as_ptr().add(jr * kc);
                for ir in (0..mc).step_by(MR) {
                    let mr = MR.min(mc - ir);
                    let a = apack.as_ptr().add(ir * kc);
                    let c = out.0.add((i0 + ir) * ldo + j0 + jr);
                    let acc = p0 > 0;
                    if mr == MR && nr == NR {
                        kernel(a, b, kc, c, ldo, acc);
                    } else {
                        // Edge tile: compute into a scratch tile, then copy the valid part.
                        kernel(a, b, kc, tile.as_mut_ptr(), NR, false);
                        for i in 0..mr {
                            let row = c.add(i * ldo);
                            for j in 0..nr {
                                let v = tile[i * NR + j];
                                *row.add(j) = if acc { *row.add(j) + v } else { v };
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Pack columns `p0 .. p0 + kc` of the `nw` weight rows into NR-column micro-panels:
/// `dst[jr·kc + p·NR + j] = w[jr + j, p0 + p]`, zero-padded past `nw`.
#[inline(always)]
fn pack_w(w: &[f32], k: usize, nw: usize, p0: usize, kc: usize, dst: &mut [f32]) {
    for jr in (0..nw).step_by(NR) {
        let nr = NR.min(nw - jr);
        let panel = &mut dst[jr * kc..(jr + NR) * kc];
        for j in 0..NR {
            if j < nr {
                let src = &w[(jr + j) * k + p0..(jr + j) * k + p0 + kc];
                for (p, v) in src.iter().enumerate() {
                    panel[p * NR + j] = *v;
                }
            } else {
                for p in 0..kc {
                    panel[p * NR + j] = 0.0;
                }
            }
        }
    }
}

/// Pack rows `i0 .. i0 + mc`, columns `p0 .. p0 + kc` of `x` into MR-row micro-panels:
/// `dst[ir·kc + p·MR + i] = x[i0 + ir + i, p0 + p]`, zero-padded past `mc`.
#[inline(always)]
fn pack_x(x: &[f32], k: usize, i0: usize, mc: usize, p0: usize, kc: usize, dst: &mut [f32]) {
    for ir in (0..mc).step_by(MR) {
        let mr = MR.min(mc - ir);
        let panel = &mut dst[ir * kc..(ir + MR) * kc];
        for i in 0..MR {
            if i < mr {
                let row = (i0 + ir + i) * k + p0;
                for (p, v) in x[row..row + kc].iter().enumerate() {
                    panel[p * MR + i] = *v;
                }
            } else {
                for p in 0..kc {
                    panel[p * MR + i] = 0.0;
                }
            }
        }
    }
}

/// The `MR` × `NR` (14 × 32) micro-kernel: `c[i, j] (+)= Σ_p a[p·MR + i] · b[p·NR + j]` for a packed row
/// micro-panel `a` and column micro-panel `b` of depth `kc`; `c` has row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn kernel(a: *const f32, b: *const f32, kc: usize, c: *mut f32, ldc: usize, accumulate: bool) {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let (mut a, mut b) = (a, b);
    for _ in 0..kc {
        let b0 = _mm512_loadu_ps(b);
        let b1 = _mm512_loadu_ps(b.add(16));
        for (i, row) in acc.iter_mut().enumerate() {
            let ai = _mm512_set1_ps(*a.add(i));
            row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
            row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
        }
        a = a.add(MR);
        b = b.add(NR);
    }
    for (i, row) in acc.iter().enumerate() {
        let ci = c.add(i * ldc);
        let (mut r0, mut r1) = (row[0], row[1]);
        if accumulate {
            r0 = _mm512_add_ps(r0, _mm512_loadu_ps(ci));
            r1 = _mm512_add_ps(r1, _mm512_loadu_ps(ci.add(16)));
        }
        _mm512_storeu_ps(ci, r0);
        _mm512_storeu_ps(ci.add(16), r1);
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn panel(_: &[f32], _: usize, _: usize, _: &[f32], _: usize, _: OutPtr, _: usize, _: usize) {
    unreachable!("avx512 kernel on a non-x86 target (guarded by `available`)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f64> {
        let mut o = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                o[i * n + j] = (0..k).map(|p| x[i * k + p] as f64 * w[j * k + p] as f64).sum::<f64>();
            }
        }
        o
    }

    /// Deterministic values in [-1, 1).
    fn fill(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn matches_f64_reference_on_odd_shapes() {
        if !available() {
            eprintln!("skipped: CPU lacks avx512f");
            return;
        }
        // Tiny, tile-edge, multi-block (m > MC, k > KC, n > NC) and non-multiple shapes.
        let shapes = [
            (1, 1, 1),
            (1, 5, 3),
            (11, 7, 31),
            (12, 256, 32),
            (13, 257, 33),
            (37, 300, 95),
            (145, 513, 70),
            (150, 600, 1030),
            (200, 1000, 513),
        ];
        for (si, &(m, k, n)) in shapes.iter().enumerate() {
            let x = fill(m * k, 2 * si as u64);
            let w = fill(n * k, 2 * si as u64 + 1);
            let want = naive(&x, m, k, &w, n);
            for threads in [1, 2, 3] {
                let mut out = vec![f32::NAN; m * n];
                matmul_t(&x, m, k, &w, n, &mut out, threads);
                // Error bound of a length-k f32 dot product of values in [-1, 1].
                let tol = 1e-6 * k as f64 + 1e-6;
                for (idx, (a, b)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        (*a as f64 - b).abs() <= tol,
                        "{m}x{k}x{n} threads {threads} at {idx}: {a} vs {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn zero_depth_and_empty() {
        if !available() {
            return;
        }
        let mut out = vec![1.0f32; 6];
        matmul_t(&[], 2, 0, &[], 3, &mut out, 2);
        assert_eq!(out, vec![0.0; 6]);
        matmul_t(&[], 0, 4, &[0.0; 8], 2, &mut [], 2);
    }
}
