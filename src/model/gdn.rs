//! Gated DeltaNet (`Qwen3_5MoeGatedDeltaNet`): projections, causal depthwise conv + SiLU with a
//! conv cache, decay/beta gates (A_log, dt_bias), L2-normalised q/k, the delta rule in its chunked
//! prefill form and its recurrent decode form (same math, exposed separately so they can be
//! checked against each other), and the gated RMSNorm before the output projection.

use super::attention::Segment;
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
        let h = c.hidden_size;
        let (conv_dim, vd, hv, k) = (
            c.gdn_conv_dim(),
            c.gdn_value_dim(),
            c.linear_num_value_heads,
            c.linear_conv_kernel_dim,
        );
        Ok(GatedDeltaNet {
            in_proj_qkv: ck.get_weight(&format!("{p}in_proj_qkv.weight"), &[conv_dim, h])?,
            in_proj_z: ck.get_weight(&format!("{p}in_proj_z.weight"), &[vd, h])?,
            in_proj_b: ck.get_weight(&format!("{p}in_proj_b.weight"), &[hv, h])?,
            in_proj_a: ck.get_weight(&format!("{p}in_proj_a.weight"), &[hv, h])?,
            conv: ck
                .get(&format!("{p}conv1d.weight"), &[conv_dim, 1, k])?
                .reshape(vec![conv_dim, k]),
            dt_bias: ck.get(&format!("{p}dt_bias"), &[hv])?,
            a_log: ck.get(&format!("{p}A_log"), &[hv])?,
            norm: ck.get(&format!("{p}norm.weight"), &[c.linear_value_head_dim])?,
            out_proj: ck.get_weight(&format!("{p}out_proj.weight"), &[h, vd])?,
            kh: c.linear_num_key_heads,
            vh: hv,
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

        // Causal conv + SiLU per sequence, then split, L2-normalise and compute the gates.
        let q_scale = 1.0 / (dk as f32).sqrt();
        let mut qkv = vec![0.0; n * conv_dim];
        for seg in segs.iter_mut() {
            let rows = &mixed[seg.start * conv_dim..(seg.start + seg.len) * conv_dim];
            let out = &mut qkv[seg.start * conv_dim..(seg.start + seg.len) * conv_dim];
            causal_conv(
                rows,
                seg.len,
                self.conv.data(),
                self.kernel,
                &mut seg.state.conv,
                out,
            );
        }
        for row in qkv.chunks_exact_mut(conv_dim) {
            let (qk, _) = row.split_at_mut(2 * key_dim);
            let (q, k) = qk.split_at_mut(key_dim);
            for hq in q.chunks_exact_mut(dk) {
                l2_normalize(hq, 1e-6, q_scale);
            }
            for hk in k.chunks_exact_mut(dk) {
                l2_normalize(hk, 1e-6, 1.0);
            }
        }
        let beta: Vec<f32> = b.iter().map(|&x| sigmoid(x)).collect();
        let (a_log, dt_bias) = (self.a_log.data(), self.dt_bias.data());
        let g: Vec<f32> = a
            .iter()
            .enumerate()
            .map(|(i, &x)| -a_log[i % vh].exp() * softplus(x + dt_bias[i % vh]))
            .collect();

        drop(p);
        // Delta rule per (sequence, value head); each work item owns its head's state.
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
                let gather = |off: usize, d: usize| -> Vec<f32> {
                    (start..start + len)
                        .flat_map(|t| {
                            qkv[t * conv_dim + off..t * conv_dim + off + d]
                                .iter()
                                .copied()
                        })
                        .collect()
                };
                let pg = scope("dr.gather");
                let q = gather(khd * dk, dk);
                let k = gather(key_dim + khd * dk, dk);
                let v = gather(2 * key_dim + h * dv, dv);
                let bt: Vec<f32> = (start..start + len).map(|t| beta[t * vh + h]).collect();
                let gt: Vec<f32> = (start..start + len).map(|t| g[t * vh + h]).collect();
                drop(pg);
                let inp = DeltaInput {
                    q: &q,
                    k: &k,
                    v: &v,
                    beta: &bt,
                    g: &gt,
                    dk,
                    dv,
                };
                if len == 1 {
                    recurrent_delta_rule(&inp, st)
                } else {
                    chunked_delta_rule(&inp, st, CHUNK)
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

simd_fn! {
    /// Depthwise causal conv (`w [C, K]`, no bias) + SiLU over `len` rows `[len, C]`, continuing
    /// from and updating the conv cache (the last K-1 input rows).
    fn causal_conv(rows: &[f32], len: usize, w: &[f32], k: usize, cache: &mut [f32], out: &mut [f32]) {
        let cd = w.len() / k;
        // Tap-major weights `[K, C]` so the channel loop runs over contiguous memory.
        let mut wt = vec![0.0f32; k * cd];
        for (c, taps) in w.chunks_exact(k).enumerate() {
            for (j, &v) in taps.iter().enumerate() {
                wt[j * cd + c] = v;
            }
        }
        let mut inp = Vec::with_capacity((k - 1 + len) * cd);
        inp.extend_from_slice(cache);
        inp.extend_from_slice(rows);
        for t in 0..len {
            let o = &mut out[t * cd..(t + 1) * cd];
            o.fill(0.0);
            for j in 0..k {
                let src = &inp[(t + j) * cd..(t + j + 1) * cd];
                for ((oc, x), wj) in o.iter_mut().zip(src).zip(&wt[j * cd..(j + 1) * cd]) {
                    *oc += wj * x;
                }
            }
            for oc in o.iter_mut() {
                *oc = silu_fast(*oc);
            }
        }
        cache.copy_from_slice(&inp[len * cd..]);
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

simd_fn! {
/// Recurrent form, one step at a time; `state` is `S [dk, dv]`. Returns `[T, dv]`.
pub fn recurrent_delta_rule(x: &DeltaInput<'_>, state: &mut [f32]) -> Vec<f32> {
    let _ftz = FlushDenormals::new();
    let (dk, dv) = (x.dk, x.dv);
    let steps = x.beta.len();
    let mut out = vec![0.0; steps * dv];
    let mut m = vec![0.0; dv];
    for t in 0..steps {
        let (qt, kt, vt) = (
            &x.q[t * dk..(t + 1) * dk],
            &x.k[t * dk..(t + 1) * dk],
            &x.v[t * dv..(t + 1) * dv],
        );
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
/// Chunked (WY / UT-transform) form over chunks of `chunk` steps, as HF's
/// `torch_chunk_gated_delta_rule`; starts from and updates `state`. Returns `[T, dv]`.
/// The products run through [`gemm_strided`] with operands contiguous along the output columns
/// (the unpacked AVX-512 kernel where available).
pub fn chunked_delta_rule(x: &DeltaInput<'_>, state: &mut [f32], chunk: usize) -> Vec<f32> {
    let _ftz = FlushDenormals::new();
    let (dk, dv) = (x.dk, x.dv);
    let steps = x.beta.len();
    let mut out = vec![0.0; steps * dv];
    // Scratch reused by every chunk (sized for a full chunk).
    let cl = chunk.min(steps).max(1);
    let mut kt = vec![0.0f32; dk * cl];
    let mut kk = vec![0.0f32; cl * cl];
    let mut qk = vec![0.0f32; cl * cl];
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
        let q = &x.q[c0 * dk..(c0 + l) * dk];
        let k = &x.k[c0 * dk..(c0 + l) * dk];
        let v = &x.v[c0 * dv..(c0 + l) * dv];
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
        // Gram matrices K·Kᵀ and Q·Kᵀ of the chunk (Kᵀ made contiguous along the chunk).
        for (t, row) in k.chunks_exact(dk).enumerate() {
            for (d, &val) in row.iter().enumerate() {
                kt[d * l + t] = val;
            }
        }
        let (kt, kk, qk) = (&kt[..dk * l], &mut kk[..l * l], &mut qk[..l * l]);
        gemm_strided((l, l, dk), k, (dk, 1), kt, (l, 1), kk, false);
        gemm_strided((l, l, dk), q, (dk, 1), kt, (l, 1), qk, false);
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
