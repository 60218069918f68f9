//! Gated DeltaNet (`Qwen3_5MoeGatedDeltaNet`): projections, causal depthwise conv + SiLU with a
//! conv cache, decay/beta gates (A_log, dt_bias), L2-normalised q/k, the delta rule in its chunked
//! prefill form and its recurrent decode form (same math, exposed separately so they can be
//! checked against each other), and the gated RMSNorm before the output projection.

use super::attention::Segment;
use super::backend::schema::GdnParams;
use super::source::WeightSource;
use super::config::ModelConfig;
use super::error::Result;
use super::state::GdnState;
use crate::tensor::cpu::{
    axpy, exp_fast, gemm_strided, l2_normalize, rms_norm_gated, sigmoid, silu_fast,
    simd_fn, softplus, FlushDenormals,
};
use crate::tensor::linear::{linear, linear_batch, LinearJob};
use crate::tensor::profile::scope;
use crate::tensor::Tensor;
use rayon::prelude::*;

/// Chunk length of the chunked delta rule (as HF's `torch_chunk_gated_delta_rule`).
pub const CHUNK: usize = 64;

pub struct GatedDeltaNet {
    in_proj_qkv: Tensor,
    in_proj_z: Tensor,
    in_proj_b: Tensor,
    in_proj_a: Tensor,
    /// `[conv_dim, K]`
    conv: Tensor,
    dt_bias: Tensor,
    a_log: Tensor,
    norm: Tensor,
    out_proj: Tensor,
    kh: usize,
    vh: usize,
    dk: usize,
    dv: usize,
    kernel: usize,
    eps: f32,
}

impl GatedDeltaNet {
    pub fn load(ck: &mut dyn WeightSource, p: &str, c: &ModelConfig) -> Result<Self> {
        let (n, k) = (GdnParams::new(p, c), c.linear_conv_kernel_dim);
        Ok(GatedDeltaNet {
            in_proj_qkv: ck.get_param_weight(&n.in_proj_qkv)?,
            in_proj_z: ck.get_param_weight(&n.in_proj_z)?,
            in_proj_b: ck.get_param_weight(&n.in_proj_b)?,
            in_proj_a: ck.get_param_weight(&n.in_proj_a)?,
            conv: ck.get_param(&n.conv1d)?.reshape(vec![c.gdn_conv_dim(), k]),
            dt_bias: ck.get_param(&n.dt_bias)?,
            a_log: ck.get_param(&n.a_log)?,
            norm: ck.get_param(&n.norm)?,
            out_proj: ck.get_param_weight(&n.out_proj)?,
            kh: c.linear_num_key_heads,
            vh: c.linear_num_value_heads,
            dk: c.linear_key_head_dim,
            dv: c.linear_value_head_dim,
            kernel: k,
            eps: c.rms_norm_eps,
        })
    }

    /// A zeroed state for a new sequence.
    pub fn new_state(c: &ModelConfig) -> GdnState {
        GdnState {
            conv: vec![0.0; (c.linear_conv_kernel_dim - 1) * c.gdn_conv_dim()],
            recurrent: vec![
                0.0;
                c.linear_num_value_heads
                    * c.linear_key_head_dim
                    * c.linear_value_head_dim
            ],
        }
    }

    /// `x`: normed input rows `[N, hidden]` of the whole batch; returns `[N, hidden]`.
    /// Segments of one token use the recurrent form, longer ones the chunked form; both start
    /// from the segment's state and leave it updated.
    pub fn forward(&self, x: &[f32], n: usize, segs: &mut [Segment<'_, GdnState>]) -> Vec<f32> {
        let hidden = self.out_proj.rows();
        let (kh, vh, dk, dv) = (self.kh, self.vh, self.dk, self.dv);
        let (key_dim, val_dim) = (kh * dk, vh * dv);
        let conv_dim = 2 * key_dim + val_dim;
        let mut mixed = vec![0.0; n * conv_dim];
        let mut z = vec![0.0; n * val_dim];
        let mut b = vec![0.0; n * vh];
        let mut a = vec![0.0; n * vh];
        let p = scope("gdn.proj");
        // The four input projections of the same rows as one batch (one parallel region when
        // decoding).
        linear_batch(
            &mut [
                LinearJob::of(x, n, &self.in_proj_qkv, &mut mixed),
                LinearJob::of(x, n, &self.in_proj_z, &mut z),
                LinearJob::of(x, n, &self.in_proj_b, &mut b),
                LinearJob::of(x, n, &self.in_proj_a, &mut a),
            ],
            true,
        );
        drop(p);
        let p = scope("gdn.conv_gates");
        // Causal conv + SiLU in place on `mixed`, then L2-normalised q/k heads, in parallel over
        // blocks of rows of one sequence; each block carries the K-1 input rows before it (the
        // conv cache for a sequence's first block), copied before any block is overwritten.
        let q_scale = 1.0 / (dk as f32).sqrt();
        let wt = tap_major(self.conv.data(), self.kernel);
        let mut blocks: Vec<(&mut [f32], Vec<f32>)> = Vec::new();
        let mut rest: &mut [f32] = &mut mixed;
        let mut row0 = 0;
        for seg in segs.iter_mut() {
            assert!(seg.start >= row0, "segments overlap or are out of order");
            let (_, tail) = std::mem::take(&mut rest).split_at_mut((seg.start - row0) * conv_dim);
            let (rows, tail) = tail.split_at_mut(seg.len * conv_dim);
            (rest, row0) = (tail, seg.start + seg.len);
            blocks.extend(conv_blocks(rows, &mut seg.state.conv, conv_dim));
        }
        let conv_norm = |(rows, prefix): &mut (&mut [f32], Vec<f32>)| {
            causal_conv(rows, prefix, &wt);
            l2_normalize_qk(rows, conv_dim, 2 * key_dim, dk, q_scale);
        };
        if n >= CONV_BLOCK {
            blocks.par_iter_mut().for_each(conv_norm);
        } else {
            blocks.iter_mut().for_each(conv_norm);
        }
        drop(blocks);
        let qkv = &mixed;
        let beta: Vec<f32> = b.iter().map(|&x| sigmoid(x)).collect();
        let neg_a: Vec<f32> = self.a_log.data().iter().map(|a| -a.exp()).collect();
        let dt_bias = self.dt_bias.data();
        let g: Vec<f32> = a
            .iter()
            .enumerate()
            .map(|(i, &x)| neg_a[i % vh] * softplus(x + dt_bias[i % vh]))
            .collect();

        drop(p);
        // Delta rule per (sequence, value head); each work item owns its head's state and reads
        // its q/k/v rows in place (row stride `conv_dim`).
        let p = scope("gdn.delta_rule");
        let ratio = vh / kh;
        let mut work: Vec<(usize, usize, usize, &mut [f32])> = Vec::new();
        for seg in segs.iter_mut() {
            for (h, st) in seg.state.recurrent.chunks_exact_mut(dk * dv).enumerate() {
                work.push((seg.start, seg.len, h, st));
            }
        }
        let outs: Vec<Vec<f32>> = work
            .par_iter_mut()
            .map(|(start, len, h, st)| {
                let (start, len, h) = (*start, *len, *h);
                let khd = h / ratio;
                let rows = |off: usize, width: usize| Rows {
                    data: &qkv[start * conv_dim + off..],
                    ld: conv_dim,
                    width,
                };
                let pg = scope("dr.gather");
                let bt: Vec<f32> = (start..start + len).map(|t| beta[t * vh + h]).collect();
                let gt: Vec<f32> = (start..start + len).map(|t| g[t * vh + h]).collect();
                drop(pg);
                let inp = HeadRows {
                    q: rows(khd * dk, dk),
                    k: rows(key_dim + khd * dk, dk),
                    v: rows(2 * key_dim + h * dv, dv),
                    beta: &bt,
                    g: &gt,
                };
                if len == 1 {
                    recurrent(&inp, st)
                } else {
                    chunked(&inp, st, CHUNK)
                }
            })
            .collect();
        let mut o = vec![0.0; n * val_dim];
        for ((start, len, h, _), out) in work.iter().zip(&outs) {
            for i in 0..*len {
                let dst = (start + i) * val_dim + h * dv;
                o[dst..dst + dv].copy_from_slice(&out[i * dv..(i + 1) * dv]);
            }
        }
        drop(p);
        let p = scope("gdn.gated_norm");
        rms_norm_gated(&mut o, &z, self.norm.data(), self.eps);
        drop(p);
        let _p = scope("gdn.out_proj");
        let mut y = vec![0.0; n * hidden];
        linear(&o, n, val_dim, self.out_proj.weight(), hidden, &mut y, true);
        y
    }
}

/// Rows per task of the parallel conv + L2-norm pass of a prefill.
const CONV_BLOCK: usize = 64;

/// Conv weights `[C, K]` tap-major (`[K, C]`), so the channel loop runs over contiguous memory.
fn tap_major(w: &[f32], k: usize) -> Vec<f32> {
    let cd = w.len() / k;
    let mut wt = vec![0.0f32; k * cd];
    for (c, taps) in w.chunks_exact(k).enumerate() {
        for (j, &v) in taps.iter().enumerate() {
            wt[j * cd + c] = v;
        }
    }
    wt
}

/// Split one sequence's conv input `rows` `[len, cd]` into blocks of [`CONV_BLOCK`] rows, each
/// with a copy of the K-1 input rows before it (the conv cache for the first), and advance the
/// cache past `rows`. [`causal_conv`] can then run the blocks in place and in any order.
fn conv_blocks<'a>(
    rows: &'a mut [f32],
    cache: &mut [f32],
    cd: usize,
) -> impl Iterator<Item = (&'a mut [f32], Vec<f32>)> {
    let (c, n) = (cache.len(), rows.len());
    let mut prefixes = vec![cache.to_vec()];
    prefixes.extend(
        (CONV_BLOCK * cd..n)
            .step_by(CONV_BLOCK * cd)
            .map(|b0| rows[b0 - c..b0].to_vec()),
    );
    if n >= c {
        cache.copy_from_slice(&rows[n - c..]);
    } else {
        cache.copy_within(n.., 0);
        cache[c - n..].copy_from_slice(rows);
    }
    rows.chunks_mut(CONV_BLOCK * cd).zip(prefixes)
}

simd_fn! {
    /// Depthwise causal conv (tap-major weights `wt [K, C]`, no bias) + SiLU, in place over the
    /// rows `[len, C]`, given the K-1 input rows before them (`prefix`). Runs backwards in time
    /// so every output overwrites an input no later output needs; channels go in tiles that
    /// keep the accumulators in registers.
    fn causal_conv(rows: &mut [f32], prefix: &[f32], wt: &[f32]) {
        const TILE: usize = 64;
        let cd = wt.len() - prefix.len();
        let (len, km) = (rows.len() / cd, prefix.len() / cd);
        for t in (0..len).rev() {
            for c0 in (0..cd).step_by(TILE) {
                let w = TILE.min(cd - c0);
                let mut acc = [0.0f32; TILE];
                let acc = &mut acc[..w];
                for (j, taps) in wt.chunks_exact(cd).enumerate() {
                    // Input row t + j - (K-1), from the prefix while that is negative.
                    let s = t + j;
                    let src = if s < km { &prefix[s * cd..] } else { &rows[(s - km) * cd..] };
                    for ((a, x), wj) in acc.iter_mut().zip(&src[c0..c0 + w]).zip(&taps[c0..c0 + w]) {
                        *a += wj * x;
                    }
                }
                for (o, a) in rows[t * cd + c0..t * cd + c0 + w].iter_mut().zip(acc.iter()) {
                    *o = silu_fast(*a);
                }
            }
        }
    }
}

simd_fn! {
    /// L2-normalise every `dk` head in the first `qk` columns of each row (width `cd`): the q
    /// heads (first half) scaled by `q_scale`, the k heads by 1.
    fn l2_normalize_qk(rows: &mut [f32], cd: usize, qk: usize, dk: usize, q_scale: f32) {
        for row in rows.chunks_exact_mut(cd) {
            let (q, k) = row[..qk].split_at_mut(qk / 2);
            for hq in q.chunks_exact_mut(dk) {
                l2_normalize(hq, 1e-6, q_scale);
            }
            for hk in k.chunks_exact_mut(dk) {
                l2_normalize(hk, 1e-6, 1.0);
            }
        }
    }
}

/// Inputs of the delta rule for one value head over T steps: `q` (L2-normalised and scaled by
/// dk^-½), `k` (L2-normalised) `[T, dk]`, `v` `[T, dv]`, `beta` and log-decay `g` `[T]`.
pub struct DeltaInput<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub beta: &'a [f32],
    pub g: &'a [f32],
    pub dk: usize,
    pub dv: usize,
}

/// Rows of `width` values, row `t` at `data[t·ld..]`: a head's q, k or v read in place from the
/// fused `[T, conv_dim]` conv output (or from a contiguous `[T, width]` array).
#[derive(Clone, Copy)]
struct Rows<'a> {
    data: &'a [f32],
    ld: usize,
    width: usize,
}

impl<'a> Rows<'a> {
    fn contiguous(data: &'a [f32], width: usize) -> Self {
        Rows {
            data,
            ld: width,
            width,
        }
    }

    #[inline(always)]
    fn row(&self, t: usize) -> &'a [f32] {
        &self.data[t * self.ld..t * self.ld + self.width]
    }

    /// Copy rows `t0..t0 + n` into `dst` `[n, width]`.
    #[inline(always)]
    fn copy_to(&self, t0: usize, n: usize, dst: &mut [f32]) {
        for (i, d) in dst[..n * self.width]
            .chunks_exact_mut(self.width)
            .enumerate()
        {
            d.copy_from_slice(self.row(t0 + i));
        }
    }
}

/// [`DeltaInput`] with row-strided q/k/v.
struct HeadRows<'a> {
    q: Rows<'a>,
    k: Rows<'a>,
    v: Rows<'a>,
    beta: &'a [f32],
    g: &'a [f32],
}

impl<'a> From<&DeltaInput<'a>> for HeadRows<'a> {
    fn from(x: &DeltaInput<'a>) -> Self {
        HeadRows {
            q: Rows::contiguous(x.q, x.dk),
            k: Rows::contiguous(x.k, x.dk),
            v: Rows::contiguous(x.v, x.dv),
            beta: x.beta,
            g: x.g,
        }
    }
}

/// Recurrent form, one step at a time; `state` is `S [dk, dv]`. Returns `[T, dv]`.
pub fn recurrent_delta_rule(x: &DeltaInput<'_>, state: &mut [f32]) -> Vec<f32> {
    recurrent(&x.into(), state)
}

/// Chunked (WY / UT-transform) form over chunks of `chunk` steps, as HF's
/// `torch_chunk_gated_delta_rule`; starts from and updates `state`. Returns `[T, dv]`.
pub fn chunked_delta_rule(x: &DeltaInput<'_>, state: &mut [f32], chunk: usize) -> Vec<f32> {
    chunked(&x.into(), state, chunk)
}

simd_fn! {
/// [`recurrent_delta_rule`] on row-strided inputs.
fn recurrent(x: &HeadRows<'_>, state: &mut [f32]) -> Vec<f32> {
    let _ftz = FlushDenormals::new();
    let dv = x.v.width;
    let steps = x.beta.len();
    let mut out = vec![0.0; steps * dv];
    let mut m = vec![0.0; dv];
    for t in 0..steps {
        let (qt, kt, vt) = (x.q.row(t), x.k.row(t), x.v.row(t));
        let decay = x.g[t].exp();
        m.fill(0.0);
        for (i, row) in state.chunks_exact_mut(dv).enumerate() {
            for (s, mm) in row.iter_mut().zip(m.iter_mut()) {
                *s *= decay;
                *mm += *s * kt[i];
            }
        }
        let delta: Vec<f32> = vt.iter().zip(&m).map(|(v, mm)| x.beta[t] * (v - mm)).collect();
        let o = &mut out[t * dv..(t + 1) * dv];
        for (i, row) in state.chunks_exact_mut(dv).enumerate() {
            for ((s, d), oo) in row.iter_mut().zip(&delta).zip(o.iter_mut()) {
                *s += kt[i] * d;
                *oo += *s * qt[i];
            }
        }
    }
    out
}
}

simd_fn! {
/// [`chunked_delta_rule`] on row-strided inputs; each chunk's rows are first copied into
/// contiguous scratch. The products run through [`gemm_strided`] with operands contiguous along
/// the output columns (the unpacked AVX-512 kernel where available).
fn chunked(x: &HeadRows<'_>, state: &mut [f32], chunk: usize) -> Vec<f32> {
    let _ftz = FlushDenormals::new();
    let (dk, dv) = (x.k.width, x.v.width);
    let steps = x.beta.len();
    let mut out = vec![0.0; steps * dv];
    // Scratch reused by every chunk (sized for a full chunk).
    let cl = chunk.min(steps).max(1);
    let mut kq = vec![0.0f32; 2 * cl * dk];
    let mut vc = vec![0.0f32; cl * dv];
    let mut kt = vec![0.0f32; dk * cl];
    let mut gram = vec![0.0f32; 2 * cl * cl];
    let mut decay = vec![0.0f32; cl * cl];
    let mut u = vec![0.0f32; cl * dv];
    let mut tmat = vec![0.0f32; cl * cl];
    let mut bv = vec![0.0f32; cl * dv];
    let mut bk = vec![0.0f32; cl * dk];
    let mut wq = vec![0.0f32; 2 * cl * dk];
    let mut ws = vec![0.0f32; 2 * cl * dv];
    let mut kd = vec![0.0f32; cl * dk];
    let mut gam = vec![0.0f32; cl];
    let mut eg = vec![0.0f32; cl];
    let mut c0 = 0;
    while c0 < steps {
        let l = chunk.min(steps - c0);
        let ps = scope("dr.gather");
        // [K; Q] and V of the chunk, contiguous.
        let kq = &mut kq[..2 * l * dk];
        x.k.copy_to(c0, l, kq);
        x.q.copy_to(c0, l, &mut kq[l * dk..]);
        x.v.copy_to(c0, l, &mut vc);
        let (kq, v) = (&*kq, &vc[..l * dv]);
        let (k, q) = kq.split_at(l * dk);
        drop(ps);
        let beta = &x.beta[c0..c0 + l];
        let mut acc = 0.0f32;
        for (gm, g) in gam.iter_mut().zip(&x.g[c0..c0 + l]) {
            acc += g;
            *gm = acc;
        }
        let gam = &gam[..l];
        for (e, g) in eg.iter_mut().zip(gam) {
            *e = g.exp();
        }
        // Γ_ij = e^{γ_i − γ_j} for j ≤ i.
        for i in 0..l {
            for (d, gj) in decay[i * l..i * l + i + 1].iter_mut().zip(gam) {
                *d = exp_fast(gam[i] - gj);
            }
        }
        let ps = scope("dr.gram");
        // Gram matrices [K·Kᵀ; Q·Kᵀ] of the chunk in one product (Kᵀ made contiguous along the
        // chunk).
        for (t, row) in k.chunks_exact(dk).enumerate() {
            for (d, &val) in row.iter().enumerate() {
                kt[d * l + t] = val;
            }
        }
        let (kt, gram) = (&kt[..dk * l], &mut gram[..2 * l * l]);
        gemm_strided((2 * l, l, dk), kq, (dk, 1), kt, (l, 1), gram, false);
        let (kk, qk) = gram.split_at_mut(l * l);
        // L_ij = β_i (k_i·k_j) Γ_ij strictly below the diagonal; T = (I+L)⁻¹ (unit lower
        // triangular) by forward substitution on its rows, T_i = e_i − Σ_{j<i} L_ij T_j (as HF's
        // solve). Then U = T·(β v) and W = T·(β e^γ k); `wq` holds [W; e^γ ⊙ Q] for one
        // product with S.
        drop(ps);
        let ps = scope("dr.subst");
        let tm = &mut tmat[..l * l];
        tm.fill(0.0);
        for i in 0..l {
            let (head, tail) = tm.split_at_mut(i * l);
            let ti = &mut tail[..l];
            ti[i] = 1.0;
            for j in 0..i {
                let lij = beta[i] * kk[i * l + j] * decay[i * l + j];
                axpy(-lij, &head[j * l..j * l + j + 1], &mut ti[..j + 1]);
            }
        }
        let (bv, bk) = (&mut bv[..l * dv], &mut bk[..l * dk]);
        for i in 0..l {
            let (cu, cw) = (beta[i], beta[i] * eg[i]);
            for (o, vv) in bv[i * dv..(i + 1) * dv].iter_mut().zip(&v[i * dv..(i + 1) * dv]) {
                *o = cu * vv;
            }
            for (o, kv) in bk[i * dk..(i + 1) * dk].iter_mut().zip(&k[i * dk..(i + 1) * dk]) {
                *o = cw * kv;
            }
        }
        let (u, wq) = (&mut u[..l * dv], &mut wq[..2 * l * dk]);
        for i in 0..l {
            for (o, qv) in wq[(l + i) * dk..(l + i + 1) * dk].iter_mut().zip(&q[i * dk..(i + 1) * dk]) {
                *o = eg[i] * qv;
            }
        }
        gemm_strided((l, dv, l), tm, (l, 1), bv, (dv, 1), u, false);
        gemm_strided((l, dk, l), tm, (l, 1), bk, (dk, 1), &mut wq[..l * dk], false);
        // [W·S; (e^γ q)·S], then Vn = U − W·S and O = (e^γ q)·S + P·Vn with
        // P_ij = (q_i·k_j) Γ_ij (j ≤ i).
        drop(ps);
        let ps = scope("dr.ws");
        let ws = &mut ws[..2 * l * dv];
        gemm_strided((2 * l, dv, dk), wq, (dk, 1), state, (dv, 1), ws, false);
        let (w_s, o) = ws.split_at_mut(l * dv);
        for (a, b) in u.iter_mut().zip(w_s.iter()) {
            *a -= b;
        }
        let vn = &*u;
        drop(ps);
        let ps = scope("dr.out");
        for i in 0..l {
            for j in 0..=i {
                qk[i * l + j] *= decay[i * l + j];
            }
            qk[i * l + i + 1..(i + 1) * l].fill(0.0);
        }
        gemm_strided((l, dv, l), qk, (l, 1), vn, (dv, 1), o, true);
        out[c0 * dv..(c0 + l) * dv].copy_from_slice(o);
        drop(ps);
        let _ps = scope("dr.state");
        // S = e^{γ_last} S + (e^{γ_last − γ} ⊙ K)ᵀ·Vn
        let glast = gam[l - 1];
        let total = glast.exp();
        for s in state.iter_mut() {
            *s *= total;
        }
        let kd = &mut kd[..l * dk];
        for (t, (row, src)) in kd.chunks_exact_mut(dk).zip(k.chunks_exact(dk)).enumerate() {
            let f = (glast - gam[t]).exp();
            for (o, kv) in row.iter_mut().zip(src) {
                *o = kv * f;
            }
        }
        gemm_strided((dk, dv, l), kd, (1, dk), vn, (dv, 1), state, true);
        c0 += l;
    }
    out
}
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn blocked_conv_equals_step_by_step() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (t, cd, k) = (150, 72, 4);
        let w: Vec<f32> = (0..cd * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let x: Vec<f32> = (0..t * cd).map(|_| rng.random_range(-1.0..1.0)).collect();
        let c0: Vec<f32> = (0..(k - 1) * cd)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let wt = tap_major(&w, k);
        let (mut whole, mut cache1) = (x.clone(), c0.clone());
        for (rows, prefix) in conv_blocks(&mut whole, &mut cache1, cd) {
            causal_conv(rows, &prefix, &wt);
        }
        let (mut steps, mut cache2) = (x.clone(), c0.clone());
        for row in steps.chunks_exact_mut(cd) {
            for (r, prefix) in conv_blocks(row, &mut cache2, cd) {
                causal_conv(r, &prefix, &wt);
            }
        }
        assert_eq!(whole, steps);
        assert_eq!(cache1, cache2);
        assert_eq!(cache1, x[(t - k + 1) * cd..]);
        // Row 1 against the definition: inputs are cache rows 1, 2 and x rows 0, 1.
        for c in 0..cd {
            let xin = [c0[cd + c], c0[2 * cd + c], x[c], x[cd + c]];
            let acc: f32 = (0..k).map(|j| w[c * k + j] * xin[j]).sum();
            assert!((whole[cd + c] - crate::tensor::cpu::silu(acc)).abs() < 1e-5);
        }
    }

    #[test]
    fn chunked_equals_recurrent_across_chunks_and_with_initial_state() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (t, dk, dv) = (150, 16, 12);
        let mut q: Vec<f32> = (0..t * dk).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut k: Vec<f32> = (0..t * dk).map(|_| rng.random_range(-1.0..1.0)).collect();
        for r in q.chunks_exact_mut(dk) {
            l2_normalize(r, 1e-6, 0.25);
        }
        for r in k.chunks_exact_mut(dk) {
            l2_normalize(r, 1e-6, 1.0);
        }
        let v: Vec<f32> = (0..t * dv).map(|_| rng.random_range(-1.0..1.0)).collect();
        let beta: Vec<f32> = (0..t).map(|_| rng.random_range(0.0..1.0)).collect();
        let g: Vec<f32> = (0..t).map(|_| -rng.random_range(0.0..0.5)).collect();
        let s0: Vec<f32> = (0..dk * dv).map(|_| rng.random_range(-0.5..0.5)).collect();
        let inp = DeltaInput {
            q: &q,
            k: &k,
            v: &v,
            beta: &beta,
            g: &g,
            dk,
            dv,
        };
        let (mut s1, mut s2) = (s0.clone(), s0.clone());
        let o1 = recurrent_delta_rule(&inp, &mut s1);
        let o2 = chunked_delta_rule(&inp, &mut s2, CHUNK);
        let max = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max)
        };
        assert!(max(&o1, &o2) < 1e-4, "outputs differ by {}", max(&o1, &o2));
        assert!(max(&s1, &s2) < 1e-4, "states differ by {}", max(&s1, &s2));
    }
}
