//! The per-row loops of the training attention ([`super::attention`]), with AVX2 bodies that
//! give **bit-identical** results to the plain loops they replace.
//!
//! The training attention is O(n²·head_dim) per head and sequence, and the test and dev profiles
//! build this crate at `opt-level = 1`, where LLVM does not vectorise loops: the plain loops ran
//! scalar with bounds checks (≈ 80 % of an SFT step of the CI-sized `demo train`). These
//! functions vectorise across `head_dim` only. Every output element still sees the same
//! operations in the same order — a rounded multiply, then a rounded add (no FMA), the sum over
//! keys sequential — and [`dot`] keeps [`crate::tensor::cpu::dot`]'s eight accumulators and its
//! reduction tree, so gradients, checkpoints and the SFT losses are unchanged to the bit (tested
//! below against the plain loops on odd shapes, and end to end on an SFT run's checkpoint).
//! The AVX2 bodies need `head_dim % 8 == 0` and a CPU path with AVX2; otherwise the plain loops
//! run.

use crate::tensor::cpu::has_avx2;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// [`crate::tensor::cpu::dot`], to the bit: lanes `l` accumulate `a[8c+l]·b[8c+l]`, then
/// `(acc0+acc4)+(acc1+acc5)+((acc2+acc6)+(acc3+acc7))`, then the remainder in order.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 is present (checked above).
        return unsafe { dot_avx2(a, b) };
    }
    crate::tensor::cpu::dot(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    let len = a.len().min(b.len());
    // SAFETY: `len` floats are readable at both pointers.
    unsafe { dot_ptr(a.as_ptr(), b.as_ptr(), len) }
}

/// The body of [`dot_avx2`] on raw pointers (`len` floats readable at both).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_ptr(a: *const f32, b: *const f32, len: usize) -> f32 {
    let chunks = len / 8;
    let mut acc = _mm256_setzero_ps();
    for c in 0..chunks {
        // SAFETY: 8c + 8 <= len (the caller's contract).
        let (x, y) = unsafe { (_mm256_loadu_ps(a.add(8 * c)), _mm256_loadu_ps(b.add(8 * c))) };
        acc = _mm256_add_ps(acc, _mm256_mul_ps(x, y));
    }
    let mut l = [0.0f32; 8];
    // SAFETY: `l` holds 8 floats.
    unsafe { _mm256_storeu_ps(l.as_mut_ptr(), acc) };
    let mut s = (l[0] + l[4]) + (l[1] + l[5]) + ((l[2] + l[6]) + (l[3] + l[7]));
    for i in 8 * chunks..len {
        // SAFETY: i < len.
        s += unsafe { *a.add(i) * *b.add(i) };
    }
    s
}

/// Eight dots at once (`q.len() % 8 == 0`, rows `stride` apart from `rows`): each row's eight
/// lane accumulators as in [`dot_ptr`], then the eight reduction trees side by side after an
/// 8×8 transpose (lane `l` of every row in one register), so each result is [`dot`]'s to the
/// bit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dots8_avx2(q: &[f32], rows: *const f32, stride: usize, out: &mut [f32; 8]) {
    // Eight named accumulators, the loop written out: at `opt-level = 1` an array of vectors or
    // an iterator stays in memory.
    let [mut r0, mut r1, mut r2, mut r3, mut r4, mut r5, mut r6, mut r7] = [_mm256_setzero_ps(); 8];
    let (hd, qp) = (q.len(), q.as_ptr());
    let mut c = 0;
    while c < hd {
        // SAFETY: c + 8 <= hd (a multiple of 8); row r's chunk is readable (the caller's
        // contract).
        unsafe {
            let x = _mm256_loadu_ps(qp.add(c));
            let row = rows.add(c);
            r0 = _mm256_add_ps(r0, _mm256_mul_ps(x, _mm256_loadu_ps(row)));
            r1 = _mm256_add_ps(r1, _mm256_mul_ps(x, _mm256_loadu_ps(row.add(stride))));
            r2 = _mm256_add_ps(r2, _mm256_mul_ps(x, _mm256_loadu_ps(row.add(2 * stride))));
            r3 = _mm256_add_ps(r3, _mm256_mul_ps(x, _mm256_loadu_ps(row.add(3 * stride))));
            r4 = _mm256_add_ps(r4, _mm256_mul_ps(x, _mm256_loadu_ps(row.add(4 * stride))));
            r5 = _mm256_add_ps(r5, _mm256_mul_ps(x, _mm256_loadu_ps(row.add(5 * stride))));
            r6 = _mm256_add_ps(r6, _mm256_mul_ps(x, _mm256_loadu_ps(row.add(6 * stride))));
            r7 = _mm256_add_ps(r7, _mm256_mul_ps(x, _mm256_loadu_ps(row.add(7 * stride))));
        }
        c += 8;
    }
    // Transpose: t[l] holds lane l of rows 0..8.
    let (a0, a1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
    let (a2, a3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
    let (a4, a5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
    let (a6, a7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
    let (b0, b1) = (_mm256_shuffle_ps::<0x44>(a0, a2), _mm256_shuffle_ps::<0xEE>(a0, a2));
    let (b2, b3) = (_mm256_shuffle_ps::<0x44>(a1, a3), _mm256_shuffle_ps::<0xEE>(a1, a3));
    let (b4, b5) = (_mm256_shuffle_ps::<0x44>(a4, a6), _mm256_shuffle_ps::<0xEE>(a4, a6));
    let (b6, b7) = (_mm256_shuffle_ps::<0x44>(a5, a7), _mm256_shuffle_ps::<0xEE>(a5, a7));
    let t0 = _mm256_permute2f128_ps::<0x20>(b0, b4);
    let t1 = _mm256_permute2f128_ps::<0x20>(b1, b5);
    let t2 = _mm256_permute2f128_ps::<0x20>(b2, b6);
    let t3 = _mm256_permute2f128_ps::<0x20>(b3, b7);
    let t4 = _mm256_permute2f128_ps::<0x31>(b0, b4);
    let t5 = _mm256_permute2f128_ps::<0x31>(b1, b5);
    let t6 = _mm256_permute2f128_ps::<0x31>(b2, b6);
    let t7 = _mm256_permute2f128_ps::<0x31>(b3, b7);
    // ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)), as in `dot`.
    let left = _mm256_add_ps(_mm256_add_ps(t0, t4), _mm256_add_ps(t1, t5));
    let right = _mm256_add_ps(_mm256_add_ps(t2, t6), _mm256_add_ps(t3, t7));
    // SAFETY: `out` holds 8 floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(left, right)) };
}

/// `out[j] = dot(q, rows[j·stride ..][..q.len()]) · scale` for `j < count` (`out` is replaced),
/// each product as [`dot`] computes it, then one rounded multiply by `scale` (skipped when
/// `scale` is `None`).
pub fn dots(q: &[f32], rows: &[f32], stride: usize, count: usize, scale: Option<f32>, out: &mut Vec<f32>) {
    let hd = q.len();
    assert!(count == 0 || (count - 1) * stride + hd <= rows.len());
    out.clear();
    out.resize(count, 0.0);
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        if hd.is_multiple_of(8) {
            while j + 8 <= count {
                let block: &mut [f32; 8] = (&mut out[j..j + 8]).try_into().expect("8 floats");
                // SAFETY: AVX2 is present; rows j..j+8 lie inside `rows` (asserted above).
                unsafe { dots8_avx2(q, rows.as_ptr().add(j * stride), stride, block) };
                j += 8;
            }
        }
        while j < count {
            // SAFETY: AVX2 is present; row j lies inside `rows` (asserted above).
            out[j] = unsafe { dot_ptr(q.as_ptr(), rows.as_ptr().add(j * stride), hd) };
            j += 1;
        }
    }
    for (j, o) in out.iter_mut().enumerate().skip(j) {
        *o = crate::tensor::cpu::dot(q, &rows[j * stride..j * stride + hd]);
    }
    if let Some(s) = scale {
        out.iter_mut().for_each(|d| *d *= s);
    }
}

/// `out[d] += Σ_j p[j]·v[j·stride + d]` for `d < out.len()`, `j` in order.
pub fn weighted_sum(p: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
    let hd = out.len();
    assert!(p.is_empty() || (p.len() - 1) * stride + hd <= v.len());
    #[cfg(target_arch = "x86_64")]
    if hd.is_multiple_of(8) && has_avx2() {
        // SAFETY: AVX2 is present; the rows read lie inside `v` (asserted above).
        return unsafe { weighted_sum_avx2(p, v, stride, out) };
    }
    for (j, pj) in p.iter().enumerate() {
        let vj = &v[j * stride..j * stride + hd];
        for d in 0..hd {
            out[d] += pj * vj[d];
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn weighted_sum_avx2(p: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
    let (hd, n, pp, vp, op) = (out.len(), p.len(), p.as_ptr(), v.as_ptr(), out.as_mut_ptr());
    let mut c = 0;
    while c < hd {
        // SAFETY: c + 8 <= hd = out.len(); row j's chunk lies inside `v` (the caller's assert).
        unsafe {
            let mut acc = _mm256_loadu_ps(op.add(c));
            let mut j = 0;
            while j < n {
                let vj = _mm256_loadu_ps(vp.add(j * stride + c));
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(*pp.add(j)), vj));
                j += 1;
            }
            _mm256_storeu_ps(op.add(c), acc);
        }
        c += 8;
    }
}

/// One query row `i` of the attention backward, keys `j` in order (`j < p.len()`):
/// `ds = p[j]·(dp[j] − pdp)·scale`, `dv[j] += p[j]·do_i`, `dq_i += ds·k[j]`, `dk[j] += ds·q_i`.
/// `k` rows are `stride` apart; `dk` and `dv` rows are `hd = dq_i.len()` apart.
#[allow(clippy::too_many_arguments)]
pub fn backward_row(
    p: &[f32],
    dp: &[f32],
    pdp: f32,
    scale: f32,
    do_i: &[f32],
    q_i: &[f32],
    k: &[f32],
    stride: usize,
    dq_i: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let (n, hd) = (p.len(), dq_i.len());
    assert!(dp.len() >= n && do_i.len() >= hd && q_i.len() >= hd && dk.len() >= n * hd && dv.len() >= n * hd);
    assert!(n == 0 || (n - 1) * stride + hd <= k.len());
    // `ds` once per key.
    let mut ds = vec![0.0f32; n];
    for j in 0..n {
        ds[j] = p[j] * (dp[j] - pdp) * scale;
    }
    let keys = Keys { p, ds: &ds, k, stride };
    #[cfg(target_arch = "x86_64")]
    if hd.is_multiple_of(8) && has_avx2() {
        // SAFETY: AVX2 is present; every row touched lies inside its slice (asserted above).
        return unsafe { backward_row_avx2(&keys, do_i, q_i, dq_i, dk, dv) };
    }
    for j in 0..n {
        let kj = &k[j * stride..j * stride + hd];
        for d in 0..hd {
            dv[j * hd + d] += p[j] * do_i[d];
            dq_i[d] += ds[j] * kj[d];
            dk[j * hd + d] += ds[j] * q_i[d];
        }
    }
}

/// What [`backward_row`] reads per key `j`: its probability, its score gradient, its key row.
struct Keys<'a> {
    p: &'a [f32],
    ds: &'a [f32],
    k: &'a [f32],
    stride: usize,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn backward_row_avx2(keys: &Keys, do_i: &[f32], q_i: &[f32], dq_i: &mut [f32], dk: &mut [f32], dv: &mut [f32]) {
    let (n, hd, stride) = (keys.p.len(), dq_i.len(), keys.stride);
    let (pp, dsp, kp, dkp, dvp) = (keys.p.as_ptr(), keys.ds.as_ptr(), keys.k.as_ptr(), dk.as_mut_ptr(), dv.as_mut_ptr());
    let mut c = 0;
    while c < hd {
        // SAFETY: c + 8 <= hd; rows j < n of k, dk and dv lie inside them (caller's asserts).
        unsafe {
            let (do_c, q_c) = (_mm256_loadu_ps(do_i.as_ptr().add(c)), _mm256_loadu_ps(q_i.as_ptr().add(c)));
            let mut dq_c = _mm256_loadu_ps(dq_i.as_ptr().add(c));
            let mut j = 0;
            while j < n {
                let (pj, dsv) = (_mm256_set1_ps(*pp.add(j)), _mm256_set1_ps(*dsp.add(j)));
                let dv_at = dvp.add(j * hd + c);
                _mm256_storeu_ps(dv_at, _mm256_add_ps(_mm256_loadu_ps(dv_at), _mm256_mul_ps(pj, do_c)));
                dq_c = _mm256_add_ps(dq_c, _mm256_mul_ps(dsv, _mm256_loadu_ps(kp.add(j * stride + c))));
                let dk_at = dkp.add(j * hd + c);
                _mm256_storeu_ps(dk_at, _mm256_add_ps(_mm256_loadu_ps(dk_at), _mm256_mul_ps(dsv, q_c)));
                j += 1;
            }
            _mm256_storeu_ps(dq_i.as_mut_ptr().add(c), dq_c);
        }
        c += 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn rand_vec(rng: &mut impl Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The vectorised bodies against the plain loops, to the bit, on odd lengths and strides
    /// (the dispatch picks AVX2 where the CPU has it; the plain loops are written out here).
    #[test]
    fn rows_match_the_plain_loops_to_the_bit() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        if !has_avx2() {
            eprintln!("no AVX2 on this CPU path: only the plain loops run");
        }
        for len in [0, 1, 7, 8, 9, 31, 32, 33, 100] {
            let (a, b) = (rand_vec(&mut rng, len), rand_vec(&mut rng, len));
            assert_eq!(dot(&a, &b).to_bits(), crate::tensor::cpu::dot(&a, &b).to_bits(), "len {len}");
        }
        for (n, hd, stride) in [(1, 8, 8), (5, 16, 40), (33, 32, 96), (17, 12, 12), (64, 24, 48)] {
            let p = rand_vec(&mut rng, n);
            let v = rand_vec(&mut rng, (n - 1) * stride + hd);
            let q = rand_vec(&mut rng, hd);
            let mut got = Vec::new();
            for scale in [None, Some(0.17f32)] {
                dots(&q, &v, stride, n, scale, &mut got);
                let want: Vec<f32> = (0..n)
                    .map(|j| crate::tensor::cpu::dot(&q, &v[j * stride..j * stride + hd]))
                    .map(|d| scale.map_or(d, |s| d * s))
                    .collect();
                assert_eq!(bits(&got), bits(&want), "dots n {n} hd {hd} {scale:?}");
            }
            let init = rand_vec(&mut rng, hd);
            let mut out = init.clone();
            weighted_sum(&p, &v, stride, &mut out);
            let mut want = init.clone();
            for j in 0..n {
                for d in 0..hd {
                    want[d] += p[j] * v[j * stride + d];
                }
            }
            assert_eq!(bits(&out), bits(&want), "weighted_sum n {n} hd {hd}");

            let (dp, do_i, q_i) = (rand_vec(&mut rng, n), rand_vec(&mut rng, hd), rand_vec(&mut rng, hd));
            let (pdp, scale) = (0.37f32, 0.125f32);
            let dq0 = rand_vec(&mut rng, hd);
            let (dk0, dv0) = (rand_vec(&mut rng, n * hd), rand_vec(&mut rng, n * hd));
            let (mut dq, mut dk, mut dv) = (dq0.clone(), dk0.clone(), dv0.clone());
            backward_row(&p, &dp, pdp, scale, &do_i, &q_i, &v, stride, &mut dq, &mut dk, &mut dv);
            let (mut wq, mut wk, mut wv) = (dq0, dk0, dv0);
            for j in 0..n {
                let ds = p[j] * (dp[j] - pdp) * scale;
                for d in 0..hd {
                    wv[j * hd + d] += p[j] * do_i[d];
                    wq[d] += ds * v[j * stride + d];
                    wk[j * hd + d] += ds * q_i[d];
                }
            }
            assert_eq!((bits(&dq), bits(&dk), bits(&dv)), (bits(&wq), bits(&wk), bits(&wv)), "backward_row n {n} hd {hd}");
        }
    }
}
