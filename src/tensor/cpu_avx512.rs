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

/// True when the engine runs on an AVX-512 path ([`super::cpu_path::active`]): the CPU supports
/// `avx512f` and no lower path was forced. Dispatchers check this; the kernels themselves only
/// need [`supported`].
#[inline]
pub fn available() -> bool {
    super::cpu_path::active() >= super::cpu_path::CpuPath::Avx512F
}

/// True when the CPU supports the AVX-512 foundation instructions this module uses.
#[inline]
pub fn supported() -> bool {
    super::cpu_path::CpuPath::Avx512F.supported()
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
pub fn matmul_t(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    n: usize,
    out: &mut [f32],
    threads: usize,
) {
    assert_eq!(x.len(), m * k, "matmul_t_avx512: x");
    assert_eq!(w.len(), n * k, "matmul_t_avx512: w");
    assert_eq!(out.len(), m * n, "matmul_t_avx512: out");
    assert!(supported(), "matmul_t_avx512: CPU lacks avx512f");
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
unsafe fn panel(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    nw: usize,
    out: OutPtr,
    ldo: usize,
    j0: usize,
) {
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
/// `dst[jr·kc + p·NR + j] = w[jr + j, p0 + p]`, zero-padded past `nw`. Full 16-row groups are
/// transposed 16 × 16 in registers; the rest element by element.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_w(w: &[f32], k: usize, nw: usize, p0: usize, kc: usize, dst: &mut [f32]) {
    let kc16 = kc / 16 * 16;
    for jr in (0..nw).step_by(NR) {
        let nr = NR.min(nw - jr);
        let panel = &mut dst[jr * kc..(jr + NR) * kc];
        for half in 0..NR / 16 {
            let j0 = half * 16;
            let full = nr >= j0 + 16;
            let p_start = if full {
                let src = w.as_ptr().add((jr + j0) * k + p0);
                let out = panel.as_mut_ptr().add(j0);
                let mut p = 0;
                while p < kc16 {
                    transpose16(src.add(p), k, out.add(p * NR), NR);
                    p += 16;
                }
                kc16
            } else {
                0
            };
            for j in j0..j0 + 16 {
                if j < nr {
                    let row = (jr + j) * k + p0;
                    for p in p_start..kc {
                        panel[p * NR + j] = w[row + p];
                    }
                } else {
                    for p in p_start..kc {
                        panel[p * NR + j] = 0.0;
                    }
                }
            }
        }
    }
}

/// `dst[q·ld_dst + r] = src[r·ld_src + q]` for a 16 × 16 block.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn transpose16(src: *const f32, ld_src: usize, dst: *mut f32, ld_dst: usize) {
    let mut r = [_mm512_setzero_ps(); 16];
    for (i, v) in r.iter_mut().enumerate() {
        *v = _mm512_loadu_ps(src.add(i * ld_src));
    }
    // Stage 1: interleave pairs of rows (32-bit elements).
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // Stage 2: 64-bit interleave of row pairs (i, i+2) within each group of four.
    for g in 0..4 {
        let b = 4 * g;
        let (a0, a1, a2, a3) = (t[b], t[b + 1], t[b + 2], t[b + 3]);
        r[b] = _mm512_castpd_ps(_mm512_unpacklo_pd(
            _mm512_castps_pd(a0),
            _mm512_castps_pd(a2),
        ));
        r[b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(
            _mm512_castps_pd(a0),
            _mm512_castps_pd(a2),
        ));
        r[b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(
            _mm512_castps_pd(a1),
            _mm512_castps_pd(a3),
        ));
        r[b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(
            _mm512_castps_pd(a1),
            _mm512_castps_pd(a3),
        ));
    }
    // Stage 3: 128-bit lanes between groups (0,1) and (2,3).
    for g in 0..2 {
        for i in 0..4 {
            let (x, y) = (r[8 * g + i], r[8 * g + 4 + i]);
            t[8 * g + i] = _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y);
            t[8 * g + 4 + i] = _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y);
        }
    }
    // Stage 4: 128-bit lanes between the two halves.
    for i in 0..8 {
        let (x, y) = (t[i], t[8 + i]);
        r[i] = _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y);
        r[8 + i] = _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y);
    }
    for (q, v) in r.iter().enumerate() {
        _mm512_storeu_ps(dst.add(q * ld_dst), *v);
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
unsafe fn kernel(
    a: *const f32,
    b: *const f32,
    kc: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
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

/// Small single-threaded product with strided operands (the Gated DeltaNet chunk math):
/// `c[i·ldc + j] (+)= Σ_p a[i·a_rs + p·a_cs] · b[p·b_rs + j]` for `i < m, j < n, p < k`.
/// `b` must be contiguous along `j`; nothing is packed (operands are small and cache resident).
///
/// Panics if an operand is too short or the CPU lacks `avx512f`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_small(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    (a_rs, a_cs): (usize, usize),
    b: &[f32],
    b_rs: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    assert!(supported(), "gemm_small: CPU lacks avx512f");
    if m == 0 || n == 0 {
        return;
    }
    assert!(n <= ldc && (m - 1) * ldc + n <= c.len(), "gemm_small: c");
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                c[i * ldc..i * ldc + n].fill(0.0);
            }
        }
        return;
    }
    assert!((m - 1) * a_rs + (k - 1) * a_cs < a.len(), "gemm_small: a");
    assert!((k - 1) * b_rs + n <= b.len(), "gemm_small: b");
    // SAFETY: avx512f checked; every tile reads a/b and writes c inside the bounds checked above
    // (masked loads/stores never touch lanes past `n`).
    unsafe {
        gemm_small_impl(
            m,
            n,
            k,
            a.as_ptr(),
            a_rs,
            a_cs,
            b.as_ptr(),
            b_rs,
            c.as_mut_ptr(),
            ldc,
            accumulate,
        )
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_small_impl(
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b: *const f32,
    b_rs: usize,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    // With enough rows to reuse it, each 32-column panel of `b` is first copied to a contiguous
    // `k × 32` buffer: `b` rows of power-of-two stride (e.g. 512 bytes) would otherwise map the
    // panel onto a few L1 sets and evict it between tiles.
    let pack = m > MR / 2 && b_rs != NR;
    let mut bbuf = if pack {
        vec![0.0f32; k * NR]
    } else {
        Vec::new()
    };
    let mut j = 0;
    while j < n {
        let nr = NR.min(n - j);
        let m0: __mmask16 = if nr >= 16 {
            0xffff
        } else {
            (1u32 << nr) as u16 - 1
        };
        let m1: __mmask16 = if nr >= 32 {
            0xffff
        } else if nr > 16 {
            (1u32 << (nr - 16)) as u16 - 1
        } else {
            0
        };
        let (bp, bs) = if pack {
            for p in 0..k {
                let src = b.add(p * b_rs + j);
                let dst = bbuf.as_mut_ptr().add(p * NR);
                _mm512_storeu_ps(dst, _mm512_maskz_loadu_ps(m0, src));
                _mm512_storeu_ps(dst.add(16), _mm512_maskz_loadu_ps(m1, src.add(16)));
            }
            (bbuf.as_ptr(), NR)
        } else {
            (b.add(j), b_rs)
        };
        let mut i = 0;
        while i < m {
            let mr = MR.min(m - i);
            let (ap, cp) = (a.add(i * a_rs), c.add(i * ldc + j));
            macro_rules! go {
                ($($r:literal)*) => {
                    match mr { $($r => small_tile::<$r>(ap, a_rs, a_cs, bp, bs, k, cp, ldc, m0, m1, acc),)* _ => unreachable!() }
                };
            }
            go!(1 2 3 4 5 6 7 8 9 10 11 12 13 14);
            i += mr;
        }
        j += nr;
    }
}

/// One `R × 32` tile of [`gemm_small`]; `m0`/`m1` mask the valid columns of each half.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn small_tile<const R: usize>(
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b: *const f32,
    b_rs: usize,
    k: usize,
    c: *mut f32,
    ldc: usize,
    m0: __mmask16,
    m1: __mmask16,
    accumulate: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let two = m1 != 0;
    for p in 0..k {
        let bp = b.add(p * b_rs);
        let ap = a.add(p * a_cs);
        let b0 = _mm512_maskz_loadu_ps(m0, bp);
        if two {
            let b1 = _mm512_maskz_loadu_ps(m1, bp.add(16));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(*ap.add(i * a_rs));
                row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
            }
        } else {
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(*ap.add(i * a_rs));
                row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let ci = c.add(i * ldc);
        let (mut r0, mut r1) = (row[0], row[1]);
        if accumulate {
            r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, ci));
            r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, ci.add(16)));
        }
        _mm512_mask_storeu_ps(ci, m0, r0);
        _mm512_mask_storeu_ps(ci.add(16), m1, r1);
    }
}

/// Few-row product (decode): `out[r·ldo + j] = x[r]·w[j]` for the `m` rows of `x` (`[m, k]`)
/// and the weight rows `w` (`[nw, k]`), written to columns `0..nw` of `out`. Each weight row
/// is streamed once per group of up to four rows of `x` (all of `m` ≤ 4 in one pass).
///
/// # Safety
/// The CPU must have avx512f; `out` must be valid for writes at `r·ldo + j` (`r < m`, `j < nw`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn rows(x: &[f32], m: usize, k: usize, w: &[f32], nw: usize, out: *mut f32, ldo: usize) {
    debug_assert!(x.len() >= m * k && w.len() >= nw * k);
    let mut j = 0;
    while j < nw {
        let jn = if nw - j >= 4 { 4 } else { 1 };
        let mut r = 0;
        while r < m {
            let rn = (m - r).min(4);
            let (xp, wp, op) = (
                x.as_ptr().add(r * k),
                w.as_ptr().add(j * k),
                out.add(r * ldo + j),
            );
            match (rn, jn) {
                (4, 4) => rows_tile::<4, 4>(xp, wp, k, op, ldo),
                (3, 4) => rows_tile::<3, 4>(xp, wp, k, op, ldo),
                (2, 4) => rows_tile::<2, 4>(xp, wp, k, op, ldo),
                (1, 4) => rows_tile::<1, 4>(xp, wp, k, op, ldo),
                (4, _) => rows_tile::<4, 1>(xp, wp, k, op, ldo),
                (3, _) => rows_tile::<3, 1>(xp, wp, k, op, ldo),
                (2, _) => rows_tile::<2, 1>(xp, wp, k, op, ldo),
                _ => rows_tile::<1, 1>(xp, wp, k, op, ldo),
            }
            r += rn;
        }
        j += jn;
    }
}

/// Dot products of `R` rows at `x` with `J` rows at `w` (row stride `k`), 16 lanes, masked tail.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn rows_tile<const R: usize, const J: usize>(
    x: *const f32,
    w: *const f32,
    k: usize,
    out: *mut f32,
    ldo: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); J]; R];
    let mut c = 0;
    while c + 16 <= k {
        let mut wv = [_mm512_setzero_ps(); J];
        for (jj, v) in wv.iter_mut().enumerate() {
            *v = _mm512_loadu_ps(w.add(jj * k + c));
        }
        for (rr, a) in acc.iter_mut().enumerate() {
            let xv = _mm512_loadu_ps(x.add(rr * k + c));
            for (jj, v) in wv.iter().enumerate() {
                a[jj] = _mm512_fmadd_ps(xv, *v, a[jj]);
            }
        }
        c += 16;
    }
    if c < k {
        let mask: __mmask16 = ((1u32 << (k - c)) - 1) as u16;
        let mut wv = [_mm512_setzero_ps(); J];
        for (jj, v) in wv.iter_mut().enumerate() {
            *v = _mm512_maskz_loadu_ps(mask, w.add(jj * k + c));
        }
        for (rr, a) in acc.iter_mut().enumerate() {
            let xv = _mm512_maskz_loadu_ps(mask, x.add(rr * k + c));
            for (jj, v) in wv.iter().enumerate() {
                a[jj] = _mm512_fmadd_ps(xv, *v, a[jj]);
            }
        }
    }
    for (rr, a) in acc.iter().enumerate() {
        for (jj, v) in a.iter().enumerate() {
            *out.add(rr * ldo + jj) = _mm512_reduce_add_ps(*v);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn panel(_: &[f32], _: usize, _: usize, _: &[f32], _: usize, _: OutPtr, _: usize, _: usize) {
    unreachable!("avx512 kernel on a non-x86 target (guarded by `available`)")
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_small_impl(
    _: usize,
    _: usize,
    _: usize,
    _: *const f32,
    _: usize,
    _: usize,
    _: *const f32,
    _: usize,
    _: *mut f32,
    _: usize,
    _: bool,
) {
    unreachable!("avx512 kernel on a non-x86 target (guarded by `available`)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f64> {
        let mut o = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                o[i * n + j] = (0..k)
                    .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                    .sum::<f64>();
            }
        }
        o
    }

    /// Deterministic values in [-1, 1).
    fn fill(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn matches_f64_reference_on_odd_shapes() {
        if !supported() {
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
