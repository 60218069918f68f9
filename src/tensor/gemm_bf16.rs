//! Packed AVX-512-BF16 GEMM for bf16 weight matrices, `out[m, n] = x[m, k] · w[n, k]ᵀ` (prefill
//! and training products on the [`CpuPath::Avx512Bf16`](super::cpu_path::CpuPath) path), built on
//! `vdpbf16ps`, which does two bf16 multiply-adds per f32 lane: twice the multiply-add rate of
//! the f32 FMA kernel ([`super::cpu_avx512`]).
//!
//! **Rounding contract** (the one of PyTorch's native bf16 matmul on CPU):
//! * the weights are used as stored (bf16, exact);
//! * every activation `x[i, p]` is rounded once to bf16, round-to-nearest-even (`vcvtne2ps2bf16`;
//!   NaN stays NaN, subnormal inputs become zero);
//! * each bf16 × bf16 product is exact in f32, and the products are accumulated in f32 (`vdpbf16ps`
//!   adds the two products of a lane pair to the f32 accumulator, rounding to nearest even,
//!   subnormal results flushed to zero); the sum along `k` runs in pairs, sequentially within a
//!   block of [`KC`] values, and the blocks are added in order in f32;
//! * the output is f32 (not rounded to bf16).
//!
//! The relative error against the exact product of the f32 activations is therefore bounded by
//! the bf16 rounding of `x` (2⁻⁹ per element, random in sign) plus f32 summation error; the
//! widening paths ([`super::linear`]) keep `x` in f32.
//!
//! Layout (BLIS scheme as in [`super::cpu_avx512`]): `x` is rounded and packed once per call into
//! micro-panels of [`MR`] = 14 rows holding `(x[i, 2q], x[i, 2q+1])` pairs as 32-bit words; each
//! rayon task owns a panel of at most [`NC`] columns and, per block of [`KC`] values along `k`,
//! packs its weights into micro-panels of [`NR`] = 32 columns of pair words (one 16×16 register
//! transpose of 32-bit words per block; the pair a lane needs is already adjacent in a bf16 row).
//! The micro-kernel keeps a 14 × 32 f32 tile in 28 zmm registers and per pair of `k` does two
//! vector loads, fourteen 32-bit broadcasts and 28 `vdpbf16ps`. Edge tiles are zero-padded
//! (an odd `k` gets a zero partner), so any `m, n, k` works.
//!
//! Measured (benches/results/cpu-engine.md, 2026-12-05, 2 vCPUs of an Intel Xeon with
//! avx512_bf16 and amx_bf16, load ≈ 5): 58 GFLOP/s on 512×2048×4096 against 60 for the f32
//! kernel in the same run. The inner loop compiles to the intended 28 `vdpbf16ps` with no
//! spills, so on this core `vdpbf16ps` does not issue at twice the f32 FMA's multiply-add rate;
//! the doubling needs a core that runs it on both FMA ports, or AMX tiles (not implemented).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use half::bf16;
use rayon::prelude::*;

/// Rows of `out` per micro-tile.
const MR: usize = 14;
/// Columns of `out` per micro-tile (two 16-lane zmm vectors).
const NR: usize = 32;
/// `k` values per packed block (256 pairs: a `KC × NR` weight micro-panel is 32 KiB, in L1).
const KC: usize = 512;
/// Rows of `x` per block of the loop over micro-panels (`MC × KC` bf16 = 168 KiB, in L2).
const MC: usize = 168;
/// Most columns per rayon task (`KC × NC` packed bf16 = 256 KiB, in L2).
const NC: usize = 256;
const _: () = assert!(MC % MR == 0 && NC % NR == 0 && KC % 32 == 0);

/// True when the CPU has the instructions this kernel uses (whatever path is active).
pub fn available() -> bool {
    super::cpu_path::CpuPath::Avx512Bf16.supported()
}

/// Raw pointer shared by tasks that write disjoint parts of one buffer.
#[derive(Clone, Copy)]
pub(super) struct SharedPtr<T>(pub(super) *mut T);
// SAFETY: every task writes only its own part (row panels of the packed `x`, column panels of `out`).
unsafe impl<T> Send for SharedPtr<T> {}
unsafe impl<T> Sync for SharedPtr<T> {}

impl<T> SharedPtr<T> {
    /// The pointer (a method, so closures capture the `Send` wrapper, not the raw field).
    pub(super) fn get(self) -> *mut T {
        self.0
    }
}

/// `out[m, n] = x[m, k] · w[n, k]ᵀ`, overwriting `out`, on up to `threads` rayon workers, with the
/// rounding contract of the module doc.
///
/// Panics if the slice lengths do not match the dimensions or the CPU lacks `avx512bf16`
/// (callers check [`available`]).
pub fn matmul_t(x: &[f32], m: usize, k: usize, w: &[bf16], n: usize, out: &mut [f32], threads: usize) {
    if !prologue("matmul_t_bf16", (x, m, k, w, n, out), available()) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let kh = k.div_ceil(2);
        let panels_m = m.div_ceil(MR);
        let mut apack = vec![0u32; panels_m * kh * MR];
        let ap = SharedPtr(apack.as_mut_ptr());
        let pack = |ip: usize| {
            // SAFETY: avx512bf16 checked above; task `ip` writes only row panel `ip` of `apack`.
            unsafe { pack_x(x, m, k, ip, ap.get().add(ip * kh * MR)) }
        };
        tasks(panels_m, threads, pack);
        let dst = SharedPtr(out.as_mut_ptr());
        let apack = &apack;
        column_panels(n, threads, NR, NC, |j0, j1| {
            // SAFETY: avx512bf16 checked above; the task writes only columns j0..j1 of `out`
            // (m·n elements, checked above).
            unsafe { panel(apack, m, k, &w[j0 * k..j1 * k], j1 - j0, dst, n, j0) }
        });
    }
}

/// The checks of a many-row bf16 kernel (named `name`) on its operands `(x, m, k, w, n, out)`:
/// panics if the slice lengths do not match the dimensions or the kernel is not `available`;
/// finishes empty products (`k == 0` zeroes `out`). True when there is work left.
pub(super) fn prologue(name: &str, ops: (&[f32], usize, usize, &[bf16], usize, &mut [f32]), available: bool) -> bool {
    let (x, m, k, w, n, out) = ops;
    assert_eq!(x.len(), m * k, "{name}: x");
    assert_eq!(w.len(), n * k, "{name}: w");
    assert_eq!(out.len(), m * n, "{name}: out");
    assert!(available, "{name}: the CPU or kernel lacks this path's instructions");
    if k == 0 {
        out.fill(0.0);
    }
    m > 0 && n > 0 && k > 0
}

/// Run `f(i)` for `i` in `0..count`, on the rayon pool when `threads > 1` and there are several.
pub(super) fn tasks(count: usize, threads: usize, f: impl Fn(usize) + Sync + Send) {
    if threads > 1 && count > 1 {
        (0..count).into_par_iter().for_each(f);
    } else {
        (0..count).for_each(f);
    }
}

/// Run `f(j0, j1)` once per column panel of `n` columns: about `n / threads` columns each, a
/// multiple of `step`, at most `max`; on the rayon pool when `threads > 1`.
pub(super) fn column_panels(n: usize, threads: usize, step: usize, max: usize, f: impl Fn(usize, usize) + Sync + Send) {
    let nc = n.div_ceil(threads.max(1)).div_ceil(step) * step;
    let nc = nc.clamp(step, max);
    let panels = n.div_ceil(nc);
    tasks(panels, threads, |p| f(p * nc, ((p + 1) * nc).min(n)));
}

/// Round row panel `ip` of `x` to bf16 and store it as pair words:
/// `dst[q·MR + i] = bf16(x[ip·MR + i, 2q]) | bf16(x[ip·MR + i, 2q + 1]) << 16`, zero past row
/// `m` and past column `k`.
///
/// # Safety
/// avx512bf16 present; `dst` valid for `k.div_ceil(2) · MR` writes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_x(x: &[f32], m: usize, k: usize, ip: usize, dst: *mut u32) {
    let kh = k.div_ceil(2);
    let ld = kh.div_ceil(16) * 16;
    // The panel's rows rounded to pair words, as 16 rows of `ld` (rows past `m` and past `MR`
    // stay zero), then transposed 16 words at a time into `dst` (`MR` lanes of each column).
    let mut rows = vec![0u32; 16 * ld];
    for i in 0..MR {
        let r = ip * MR + i;
        if r < m {
            round_row(&x[r * k..(r + 1) * k], &mut rows[i * ld..(i + 1) * ld]);
        }
    }
    let mut block = [0u32; 16 * 16];
    let lanes: __mmask16 = (1 << MR) - 1;
    for q0 in (0..kh).step_by(16) {
        // Bit patterns moved as f32 (shuffles only, bit-exact).
        super::cpu_avx512::transpose16(rows.as_ptr().add(q0) as *const f32, ld, block.as_mut_ptr() as *mut f32, 16);
        for t in 0..16.min(kh - q0) {
            let v = _mm512_loadu_si512(block.as_ptr().add(t * 16) as *const _);
            _mm512_mask_storeu_epi32(dst.add((q0 + t) * MR) as *mut i32, lanes, v);
        }
    }
}

/// Round the values of `src` to bf16 (the rounding contract of the module doc) as pair words,
/// `row[q] = bf16(src[2q]) | bf16(src[2q + 1]) << 16`, zero past the end of `src`.
///
/// # Safety
/// avx512bf16 present; `row.len()` ≥ `src.len().div_ceil(32) · 16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn round_row(src: &[f32], row: &mut [u32]) {
    let k = src.len();
    assert!(row.len() >= k.div_ceil(32) * 16, "round_row: row too short");
    // 32 values → 16 pair words per step; the tail loads only the values that exist.
    let mut p = 0;
    while p < k {
        let lo = load_masked(src.as_ptr(), p, k);
        let hi = load_masked(src.as_ptr(), p + 16, k);
        let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(row.as_mut_ptr().add(p / 2) as *mut _, v);
        p += 32;
    }
}

/// `src[p .. p + 16]`, lanes at or past `k` zero.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn load_masked(src: *const f32, p: usize, k: usize) -> __m512 {
    if p + 16 <= k {
        _mm512_loadu_ps(src.add(p))
    } else if p < k {
        let mask: __mmask16 = ((1u32 << (k - p)) - 1) as __mmask16;
        _mm512_maskz_loadu_ps(mask, src.add(p))
    } else {
        _mm512_setzero_ps()
    }
}

/// Compute columns `j0 .. j0 + nw` of `out` (row stride `ldo`) from the packed `x` and the weight
/// rows `w` (`[nw, k]`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel(apack: &[u32], m: usize, k: usize, w: &[bf16], nw: usize, out: SharedPtr<f32>, ldo: usize, j0: usize) {
    let kh = k.div_ceil(2);
    let nw_pad = nw.div_ceil(NR) * NR;
    // Packed weights start on a cache line so no full-width load splits two lines.
    let blen = nw_pad * (KC / 2).min(kh);
    let mut bbuf = vec![0u32; blen + 16];
    let off = bbuf.as_ptr().align_offset(64);
    let bpack = &mut bbuf[off..off + blen];
    let mut tile = [0.0f32; MR * NR];
    for p0 in (0..k).step_by(KC) {
        let kc = KC.min(k - p0);
        let (q0, qc) = (p0 / 2, kc.div_ceil(2));
        pack_w(w, k, nw, p0, kc, bpack);
        for i0 in (0..m).step_by(MC) {
            let mc = MC.min(m - i0);
            for jr in (0..nw).step_by(NR) {
                let nr = NR.min(nw - jr);
                let b = bpack.as_ptr().add(jr * qc);
                for ir in (0..mc).step_by(MR) {
                    let mr = MR.min(mc - ir);
                    let a = apack.as_ptr().add(((i0 + ir) / MR * kh + q0) * MR);
                    let c = out.get().add((i0 + ir) * ldo + j0 + jr);
                    let acc = p0 > 0;
                    if mr == MR && nr == NR {
                        kernel(a, b, qc, c, ldo, acc);
                    } else {
                        // Edge tile: compute into a scratch tile, then copy the valid part.
                        kernel(a, b, qc, tile.as_mut_ptr(), NR, false);
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

/// Pack values `p0 .. p0 + kc` of the `nw` weight rows into NR-column micro-panels of pair words:
/// `dst[jr·qc + q·NR + j] = w[jr + j, p0 + 2q] | w[jr + j, p0 + 2q + 1] << 16` (`qc` =
/// `kc.div_ceil(2)`), zero past `nw` and past `k`. With `k` even, full 16-row groups are
/// transposed 16 × 16 words in registers; the rest word by word.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_w(w: &[bf16], k: usize, nw: usize, p0: usize, kc: usize, dst: &mut [u32]) {
    let qc = kc.div_ceil(2);
    // Whole words of row `j` inside the block (a row starts on a word when `k` is even).
    let vec_q = if k % 2 == 0 { kc / 32 * 16 } else { 0 };
    let word = |j: usize, q: usize| -> u32 {
        let p = p0 + 2 * q;
        let lo = if p < p0 + kc { w[j * k + p].to_bits() as u32 } else { 0 };
        let hi = if p + 1 < p0 + kc { w[j * k + p + 1].to_bits() as u32 } else { 0 };
        lo | hi << 16
    };
    for jr in (0..nw).step_by(NR) {
        let nr = NR.min(nw - jr);
        let panel = &mut dst[jr * qc..(jr + NR) * qc];
        for half in 0..NR / 16 {
            let j0 = half * 16;
            let q_start = if nr >= j0 + 16 && vec_q > 0 {
                let src = w.as_ptr().add((jr + j0) * k + p0) as *const f32;
                let out = panel.as_mut_ptr().add(j0) as *mut f32;
                for q in (0..vec_q).step_by(16) {
                    // 32-bit words moved as f32 bit patterns (shuffles only, bit-exact).
                    super::cpu_avx512::transpose16(src.add(q), k / 2, out.add(q * NR), NR);
                }
                vec_q
            } else {
                0
            };
            for j in j0..j0 + 16 {
                for q in q_start..qc {
                    panel[q * NR + j] = if j < nr { word(jr + j, q) } else { 0 };
                }
            }
        }
    }
}

/// The `MR` × `NR` (14 × 32) micro-kernel: `c[i, j] (+)= Σ_q dot2(a[q·MR + i], b[q·NR + j])` for a
/// packed row micro-panel `a` and column micro-panel `b` of `qc` pair words; `c` has row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn kernel(a: *const u32, b: *const u32, qc: usize, c: *mut f32, ldc: usize, accumulate: bool) {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let (mut a, mut b) = (a, b);
    for _ in 0..qc {
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b as *const _));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(16) as *const _));
        for (i, row) in acc.iter_mut().enumerate() {
            let ai: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(i) as i32));
            row[0] = _mm512_dpbf16_ps(row[0], ai, b0);
            row[1] = _mm512_dpbf16_ps(row[1], ai, b1);
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The f64 product of `x` rounded to bf16 (the contract) and the weights.
    pub(in crate::tensor) fn reference(x: &[f32], m: usize, k: usize, w: &[bf16], n: usize) -> Vec<f64> {
        let mut out = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| bf16::from_f32(x[i * k + p]).to_f64() * w[j * k + p].to_f64())
                    .sum();
            }
        }
        out
    }

    /// `len` pseudo-random values in [-0.5, 0.5) from `seed`.
    pub(in crate::tensor) fn fill(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// Odd shapes (no dimension a multiple of a tile, odd `k`, several `KC` blocks, several
    /// `MC` blocks) against the f64 reference of the rounding contract, 1 and 2 threads.
    #[test]
    fn matches_contract_reference_on_odd_shapes() {
        if !available() {
            println!("skipped: this CPU lacks avx512bf16");
            return;
        }
        let shapes =
            [(1, 1, 1), (13, 7, 5), (15, 33, 33), (29, 512, 64), (31, 1031, 97), (200, 96, 70), (37, 64, 600)];
        check_contract(matmul_t, &shapes);
    }

    /// `kernel` against the f64 reference of the rounding contract on `shapes` (m, k, n), with 1
    /// and 2 threads.
    pub(in crate::tensor) fn check_contract(kernel: super::super::cpu_path::MatmulBf16, shapes: &[(usize, usize, usize)]) {
        for &(m, k, n) in shapes {
            let x = fill(m * k, (m * 31 + k) as u64);
            let w: Vec<bf16> = fill(n * k, (n * 17 + k) as u64).into_iter().map(bf16::from_f32).collect();
            let want = reference(&x, m, k, &w, n);
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; m * n];
                kernel(&x, m, k, &w, n, &mut out, threads);
                for (idx, (g, r)) in out.iter().zip(&want).enumerate() {
                    let tol = 1e-5 * (k as f64).sqrt() * (1.0 + r.abs());
                    assert!((*g as f64 - r).abs() <= tol, "{m}x{k}x{n} t{threads} [{idx}]: {g} vs {r}");
                }
            }
        }
    }
}
