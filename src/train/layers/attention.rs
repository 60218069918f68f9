//! Gated full attention with backward: q/gate projection (per-head interleave), (1+w) q/k
//! RMSNorm, partial RoPE, grouped-query causal softmax attention, sigmoid output gate, output
//! projection. The attention probabilities are recomputed in the backward, not stored. The
//! per-row loops are [`super::attention_rows`] (vectorised, bit-identical to plain loops).

use crate::model::rope::Rope;
use super::attention_rows::{backward_row, dot, dots, weighted_sum};
use crate::tensor::cpu::{rms_norm_1p, sigmoid, softmax};
use crate::train::ops::{linear, rms_norm_1p_backward};
use crate::train::grad_sink::GradSink;
use crate::train::params::{ParamStore, Pid};
use rayon::prelude::*;

pub struct AttentionW {
    pub q_proj: Pid,
    pub k_proj: Pid,
    pub v_proj: Pid,
    pub o_proj: Pid,
    pub q_norm: Pid,
    pub k_norm: Pid,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
}

pub struct AttentionSaved {
    x: Vec<f32>,
    n: usize,
    /// q and k before their norm `[N, H, hd]`.
    q_raw: Vec<f32>,
    k_raw: Vec<f32>,
    /// q and k after norm and RoPE, v, gate logits, attention output before the gate.
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    gate: Vec<f32>,
    o: Vec<f32>,
}

impl AttentionW {
    fn rope_all(&self, rope: &Rope, t_rows: &mut [f32], heads: usize, n: usize, inverse: bool) {
        let hd = self.head_dim;
        for t in 0..n {
            let (cos, mut sin) = rope.cos_sin(t);
            if inverse {
                sin.iter_mut().for_each(|s| *s = -*s);
            }
            for h in 0..heads {
                Rope::apply(&mut t_rows[(t * heads + h) * hd..(t * heads + h + 1) * hd], &cos, &sin);
            }
        }
    }

    /// One sequence of `n` tokens at positions `0..n`; returns `[n, hidden]`.
    pub fn forward(&self, ps: &ParamStore, x: Vec<f32>, n: usize, rope: &Rope) -> (Vec<f32>, AttentionSaved) {
        let (hs, hq, hkv, hd) = (self.hidden, self.heads, self.kv_heads, self.head_dim);
        let qg = linear(&x, n, hs, ps.get(self.q_proj), hq * hd * 2);
        let k_raw = linear(&x, n, hs, ps.get(self.k_proj), hkv * hd);
        let v = linear(&x, n, hs, ps.get(self.v_proj), hkv * hd);
        let mut q_raw = vec![0.0; n * hq * hd];
        let mut gate = vec![0.0; n * hq * hd];
        for r in 0..n * hq {
            q_raw[r * hd..(r + 1) * hd].copy_from_slice(&qg[r * 2 * hd..r * 2 * hd + hd]);
            gate[r * hd..(r + 1) * hd].copy_from_slice(&qg[r * 2 * hd + hd..(r + 1) * 2 * hd]);
        }
        let mut q = q_raw.clone();
        let mut k = k_raw.clone();
        rms_norm_1p(&mut q, ps.get(self.q_norm), self.eps);
        rms_norm_1p(&mut k, ps.get(self.k_norm), self.eps);
        self.rope_all(rope, &mut q, hq, n, false);
        self.rope_all(rope, &mut k, hkv, n, false);
        let outs: Vec<Vec<f32>> = (0..hq).into_par_iter().map(|h| self.head_forward(&q, &k, &v, n, h)).collect();
        let mut o = vec![0.0; n * hq * hd];
        for (h, out) in outs.iter().enumerate() {
            for t in 0..n {
                o[(t * hq + h) * hd..(t * hq + h + 1) * hd].copy_from_slice(&out[t * hd..(t + 1) * hd]);
            }
        }
        let og: Vec<f32> = o.iter().zip(&gate).map(|(a, g)| a * sigmoid(*g)).collect();
        let y = linear(&og, n, hq * hd, ps.get(self.o_proj), hs);
        (y, AttentionSaved { x, n, q_raw, k_raw, q, k, v, gate, o })
    }

    /// Causal softmax probabilities of query row `i` of head `h` (length `i+1`).
    fn probs(&self, q: &[f32], k: &[f32], h: usize, i: usize) -> Vec<f32> {
        let (hq, hkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let kvh = h / (hq / hkv);
        let scale = 1.0 / (hd as f32).sqrt();
        let qi = &q[(i * hq + h) * hd..(i * hq + h + 1) * hd];
        let mut p = Vec::new();
        dots(qi, &k[kvh * hd..], hkv * hd, i + 1, Some(scale), &mut p);
        softmax(&mut p);
        p
    }

    fn head_forward(&self, q: &[f32], k: &[f32], v: &[f32], n: usize, h: usize) -> Vec<f32> {
        let (hq, hkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let kvh = h / (hq / hkv);
        let mut out = vec![0.0; n * hd];
        for i in 0..n {
            let p = self.probs(q, k, h, i);
            weighted_sum(&p, &v[kvh * hd..], hkv * hd, &mut out[i * hd..(i + 1) * hd]);
        }
        out
    }

    /// Per head: `(dq [n, hd], dk [n, hd], dv [n, hd])` given `do [N, Hq, hd]` (before the gate).
    fn head_backward(&self, s: &AttentionSaved, d_o: &[f32], h: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let (n, hq, hkv, hd) = (s.n, self.heads, self.kv_heads, self.head_dim);
        let kvh = h / (hq / hkv);
        let scale = 1.0 / (hd as f32).sqrt();
        let (mut dq, mut dk, mut dv) = (vec![0.0; n * hd], vec![0.0; n * hd], vec![0.0; n * hd]);
        for i in 0..n {
            let p = self.probs(&s.q, &s.k, h, i);
            let doi = &d_o[(i * hq + h) * hd..(i * hq + h + 1) * hd];
            let mut dp = Vec::new();
            dots(doi, &s.v[kvh * hd..], hkv * hd, i + 1, None, &mut dp);
            let pdp = dot(&p, &dp);
            let qi = &s.q[(i * hq + h) * hd..(i * hq + h + 1) * hd];
            let dq_i = &mut dq[i * hd..(i + 1) * hd];
            backward_row(&p, &dp, pdp, scale, doi, qi, &s.k[kvh * hd..], hkv * hd, dq_i, &mut dk, &mut dv);
        }
        (dq, dk, dv)
    }

    /// Accumulates the weight gradients, returns `dx [n, hidden]`.
    pub fn backward(&self, ps: &ParamStore, rope: &Rope, s: &AttentionSaved, dy: &[f32], gr: &mut dyn GradSink) -> Vec<f32> {
        let (hs, hq, hkv, hd, n) = (self.hidden, self.heads, self.kv_heads, self.head_dim, s.n);
        let og: Vec<f32> = s.o.iter().zip(&s.gate).map(|(a, g)| a * sigmoid(*g)).collect();
        let dog = gr.linear(self.o_proj, dy, &og, n, hq * hd, ps.get(self.o_proj), hs);
        let mut d_o = vec![0.0; n * hq * hd];
        let mut dgate = vec![0.0; n * hq * hd];
        for i in 0..n * hq * hd {
            let sg = sigmoid(s.gate[i]);
            d_o[i] = dog[i] * sg;
            dgate[i] = dog[i] * s.o[i] * sg * (1.0 - sg);
        }
        let per_head: Vec<_> = (0..hq).into_par_iter().map(|h| self.head_backward(s, &d_o, h)).collect();
        let mut dq = vec![0.0; n * hq * hd];
        let mut dk = vec![0.0; n * hkv * hd];
        let mut dv = vec![0.0; n * hkv * hd];
        for (h, (q_h, k_h, v_h)) in per_head.iter().enumerate() {
            let kvh = h / (hq / hkv);
            for t in 0..n {
                for d in 0..hd {
                    dq[(t * hq + h) * hd + d] = q_h[t * hd + d];
                    dk[(t * hkv + kvh) * hd + d] += k_h[t * hd + d];
                    dv[(t * hkv + kvh) * hd + d] += v_h[t * hd + d];
                }
            }
        }
        self.rope_all(rope, &mut dq, hq, n, true);
        self.rope_all(rope, &mut dk, hkv, n, true);
        let dq_raw = rms_norm_1p_backward(&s.q_raw, ps.get(self.q_norm), self.eps, &dq, gr.vector(self.q_norm));
        let dk_raw = rms_norm_1p_backward(&s.k_raw, ps.get(self.k_norm), self.eps, &dk, gr.vector(self.k_norm));
        let mut dqg = vec![0.0; n * hq * hd * 2];
        for r in 0..n * hq {
            dqg[r * 2 * hd..r * 2 * hd + hd].copy_from_slice(&dq_raw[r * hd..(r + 1) * hd]);
            dqg[r * 2 * hd + hd..(r + 1) * 2 * hd].copy_from_slice(&dgate[r * hd..(r + 1) * hd]);
        }
        let mut dx = gr.linear(self.q_proj, &dqg, &s.x, n, hs, ps.get(self.q_proj), hq * hd * 2);
        for (dpart, w) in [(&dk_raw, self.k_proj), (&dv, self.v_proj)] {
            let d = gr.linear(w, dpart, &s.x, n, hs, ps.get(w), hkv * hd);
            dx.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
        }
        dx
    }
}
