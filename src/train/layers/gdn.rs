//! Gated DeltaNet layer with backward: projections, causal depthwise conv + SiLU, L2-normalised
//! q/k, gates (β = σ(b), g = −e^{A_log}·softplus(a + dt_bias)), the delta rule per value head
//! ([`super::delta_rule`]), gated RMSNorm and output projection.

use super::delta_rule::{self, DeltaGrads};
use crate::model::gdn::DeltaInput;
use crate::tensor::cpu::{l2_normalize, rms_norm_gated, sigmoid, silu, softplus};
use crate::train::ops::{
    l2_normalize_backward, linear, rms_norm_gated_backward, silu_grad, softplus_grad,
};
use crate::train::grad_sink::GradSink;
use crate::train::params::{ParamStore, Pid};
use rayon::prelude::*;

pub struct GdnW {
    pub in_proj_qkv: Pid,
    pub in_proj_z: Pid,
    pub in_proj_b: Pid,
    pub in_proj_a: Pid,
    /// `[conv_dim, 1, K]`
    pub conv: Pid,
    pub dt_bias: Pid,
    pub a_log: Pid,
    pub norm: Pid,
    pub out_proj: Pid,
    pub hidden: usize,
    pub kh: usize,
    pub vh: usize,
    pub dk: usize,
    pub dv: usize,
    pub kernel: usize,
    pub eps: f32,
}

pub struct GdnSaved {
    x: Vec<f32>,
    n: usize,
    /// Conv input (the qkv projection) and pre-activation `[N, conv_dim]`.
    mixed: Vec<f32>,
    pre: Vec<f32>,
    /// Per value head, time-major: normalised q, k, v `[N, d]`, β, g, chunk-start states.
    heads: Vec<HeadSaved>,
    a: Vec<f32>,
    beta: Vec<f32>,
    g: Vec<f32>,
    z: Vec<f32>,
    o: Vec<f32>,
    on: Vec<f32>,
}

struct HeadSaved {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    beta: Vec<f32>,
    g: Vec<f32>,
    starts: Vec<Vec<f32>>,
}

impl HeadSaved {
    fn input(&self, dk: usize, dv: usize) -> DeltaInput<'_> {
        DeltaInput { q: &self.q, k: &self.k, v: &self.v, beta: &self.beta, g: &self.g, dk, dv }
    }
}

impl GdnW {
    fn dims(&self) -> (usize, usize, usize) {
        let (key, val) = (self.kh * self.dk, self.vh * self.dv);
        (key, val, 2 * key + val)
    }

    /// One sequence of `n` tokens from a fresh state; returns `[n, hidden]`.
    pub fn forward(&self, ps: &ParamStore, x: Vec<f32>, n: usize) -> (Vec<f32>, GdnSaved) {
        let (hs, vh, dk, dv, kk) = (self.hidden, self.vh, self.dk, self.dv, self.kernel);
        let (key, val, cd) = self.dims();
        let mixed = linear(&x, n, hs, ps.get(self.in_proj_qkv), cd);
        let z = linear(&x, n, hs, ps.get(self.in_proj_z), val);
        let b = linear(&x, n, hs, ps.get(self.in_proj_b), vh);
        let a = linear(&x, n, hs, ps.get(self.in_proj_a), vh);
        let pre = causal_conv_forward(&mixed, ps.get(self.conv), n, cd, kk);
        let beta: Vec<f32> = b.iter().map(|v| sigmoid(*v)).collect();
        let (al, dt) = (ps.get(self.a_log), ps.get(self.dt_bias));
        let g: Vec<f32> = a.iter().enumerate().map(|(i, v)| -al[i % vh].exp() * softplus(v + dt[i % vh])).collect();
        let q_scale = 1.0 / (dk as f32).sqrt();
        let ratio = vh / self.kh;
        let (heads, outs): (Vec<HeadSaved>, Vec<Vec<f32>>) = (0..vh)
            .into_par_iter()
            .map(|h| {
                let khd = h / ratio;
                let gather = |off: usize, d: usize, scale: Option<f32>| -> Vec<f32> {
                    let mut r: Vec<f32> = Vec::with_capacity(n * d);
                    for t in 0..n {
                        let mut row: Vec<f32> = pre[t * cd + off..t * cd + off + d].iter().map(|p| silu(*p)).collect();
                        if let Some(s) = scale {
                            l2_normalize(&mut row, 1e-6, s);
                        }
                        r.extend(row);
                    }
                    r
                };
                let mut hsv = HeadSaved {
                    q: gather(khd * dk, dk, Some(q_scale)),
                    k: gather(key + khd * dk, dk, Some(1.0)),
                    v: gather(2 * key + h * dv, dv, None),
                    beta: (0..n).map(|t| beta[t * vh + h]).collect(),
                    g: (0..n).map(|t| g[t * vh + h]).collect(),
                    starts: Vec::new(),
                };
                let (out, starts) = delta_rule::forward(&hsv.input(dk, dv));
                hsv.starts = starts;
                (hsv, out)
            })
            .unzip();
        let mut o = vec![0.0; n * val];
        for (h, out) in outs.iter().enumerate() {
            for t in 0..n {
                o[t * val + h * dv..t * val + (h + 1) * dv].copy_from_slice(&out[t * dv..(t + 1) * dv]);
            }
        }
        let mut on = o.clone();
        rms_norm_gated(&mut on, &z, ps.get(self.norm), self.eps);
        let y = linear(&on, n, val, ps.get(self.out_proj), hs);
        (y, GdnSaved { x, n, mixed, pre, heads, a, beta, g, z, o, on })
    }

    /// Accumulates every weight gradient (projections, conv, A_log, dt_bias, norm); returns
    /// `dx [n, hidden]`.
    pub fn backward(&self, ps: &ParamStore, s: &GdnSaved, dy: &[f32], gr: &mut dyn GradSink) -> Vec<f32> {
        let (hs, vh, dk, dv, kk, n) = (self.hidden, self.vh, self.dk, self.dv, self.kernel, s.n);
        let (key, val, cd) = self.dims();
        let d_on = gr.linear(self.out_proj, dy, &s.on, n, val, ps.get(self.out_proj), hs);
        let (d_o, dz) = rms_norm_gated_backward(&s.o, &s.z, ps.get(self.norm), self.eps, &d_on, gr.vector(self.norm));
        let per_head: Vec<DeltaGrads> = (0..vh)
            .into_par_iter()
            .map(|h| {
                let doh: Vec<f32> =
                    (0..n).flat_map(|t| d_o[t * val + h * dv..t * val + (h + 1) * dv].iter().copied()).collect();
                delta_rule::backward(&s.heads[h].input(dk, dv), &s.heads[h].starts, &doh)
            })
            .collect();
        // Gradient w.r.t. the conv output after SiLU, `[N, conv_dim]`.
        let ratio = vh / self.kh;
        let q_scale = 1.0 / (dk as f32).sqrt();
        let mut dact = vec![0.0f32; n * cd];
        for t in 0..n {
            for khd in 0..self.kh {
                let mut dqh = vec![0.0f32; dk];
                let mut dkh = vec![0.0f32; dk];
                for ph in &per_head[khd * ratio..(khd + 1) * ratio] {
                    for d in 0..dk {
                        dqh[d] += ph.dq[t * dk + d];
                        dkh[d] += ph.dk[t * dk + d];
                    }
                }
                for (off, dh, scale) in [(khd * dk, &dqh, q_scale), (key + khd * dk, &dkh, 1.0)] {
                    let raw: Vec<f32> = s.pre[t * cd + off..t * cd + off + dk].iter().map(|p| silu(*p)).collect();
                    let dr = l2_normalize_backward(&raw, 1e-6, scale, dh);
                    dact[t * cd + off..t * cd + off + dk].copy_from_slice(&dr);
                }
            }
            for (h, ph) in per_head.iter().enumerate() {
                let off = t * cd + 2 * key + h * dv;
                dact[off..off + dv].copy_from_slice(&ph.dv[t * dv..(t + 1) * dv]);
            }
        }
        let dpre: Vec<f32> = dact.iter().zip(&s.pre).map(|(d, p)| d * silu_grad(*p)).collect();
        let w = ps.get(self.conv).to_vec();
        let dmixed = causal_conv_backward(&dpre, &s.mixed, &w, n, cd, kk, gr.vector(self.conv));
        // Gates.
        let al = ps.get(self.a_log).to_vec();
        let dt = ps.get(self.dt_bias).to_vec();
        let mut d_alog = vec![0.0f32; vh];
        let mut d_dt = vec![0.0f32; vh];
        let dbeta: Vec<f32> = (0..n * vh).map(|i| per_head[i % vh].dbeta[i / vh]).collect();
        let dg: Vec<f32> = (0..n * vh).map(|i| per_head[i % vh].dg[i / vh]).collect();
        let gs = GateSaved { beta: &s.beta, g: &s.g, a: &s.a, a_log: &al, dt_bias: &dt };
        let (db, da) = gates_backward(&gs, &dbeta, &dg, &mut d_alog, &mut d_dt);
        gr.vector(self.a_log).iter_mut().zip(&d_alog).for_each(|(a, b)| *a += b);
        gr.vector(self.dt_bias).iter_mut().zip(&d_dt).for_each(|(a, b)| *a += b);
        let mut dx = gr.linear(self.in_proj_qkv, &dmixed, &s.x, n, hs, ps.get(self.in_proj_qkv), cd);
        for (dpart, wp, rows) in [(&dz, self.in_proj_z, val), (&db, self.in_proj_b, vh), (&da, self.in_proj_a, vh)] {
            let d = gr.linear(wp, dpart, &s.x, n, hs, ps.get(wp), rows);
            dx.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
        }
        dx
    }
}

/// Causal depthwise conv from zero history over `n` rows of `cd` channels (kernel `kk`, weights
/// `w [cd, kk]`): `pre[t, c] = Σ_j w[c, j]·x[t + j − (kk − 1), c]`.
pub fn causal_conv_forward(x: &[f32], w: &[f32], n: usize, cd: usize, kk: usize) -> Vec<f32> {
    let mut pre = vec![0.0; n * cd];
    for t in 0..n {
        for c in 0..cd {
            let mut s = 0.0;
            for j in 0..kk {
                if t + j >= kk - 1 {
                    s += w[c * kk + j] * x[(t + j + 1 - kk) * cd + c];
                }
            }
            pre[t * cd + c] = s;
        }
    }
    pre
}

/// Backward of [`causal_conv_forward`] given `dpre`: accumulates `dw [cd, kk]`, returns `dx`.
pub fn causal_conv_backward(dpre: &[f32], x: &[f32], w: &[f32], n: usize, cd: usize, kk: usize, dw: &mut [f32]) -> Vec<f32> {
    let mut dx = vec![0.0f32; n * cd];
    for t in 0..n {
        for c in 0..cd {
            let dp = dpre[t * cd + c];
            for j in 0..kk {
                if t + j >= kk - 1 {
                    let src = (t + j + 1 - kk) * cd + c;
                    dw[c * kk + j] += dp * x[src];
                    dx[src] += dp * w[c * kk + j];
                }
            }
        }
    }
    dx
}

/// What the gates' backward reads: `β = σ(b)`, `g = −exp(A_log)·softplus(a + dt_bias)` and the
/// input `a`, all `[n, vh]`, and the per-head parameters `A_log`, `dt_bias` `[vh]`.
pub struct GateSaved<'a> {
    pub beta: &'a [f32],
    pub g: &'a [f32],
    pub a: &'a [f32],
    pub a_log: &'a [f32],
    pub dt_bias: &'a [f32],
}

/// Backward of the gates from `dβ`, `dg` `[n, vh]`: returns `(db, da)` and accumulates the
/// per-head `d_alog`, `d_dt` (sums over tokens in order).
pub fn gates_backward(s: &GateSaved<'_>, dbeta: &[f32], dg: &[f32], d_alog: &mut [f32], d_dt: &mut [f32]) -> (Vec<f32>, Vec<f32>) {
    let vh = s.a_log.len();
    let mut db = vec![0.0f32; dbeta.len()];
    let mut da = vec![0.0f32; dbeta.len()];
    for i in 0..dbeta.len() {
        let h = i % vh;
        db[i] = dbeta[i] * s.beta[i] * (1.0 - s.beta[i]);
        d_alog[h] += dg[i] * s.g[i];
        da[i] = dg[i] * -s.a_log[h].exp() * softplus_grad(s.a[i] + s.dt_bias[h]);
        d_dt[h] += da[i];
    }
    (db, da)
}
