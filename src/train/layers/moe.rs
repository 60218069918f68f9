//! Sparse MoE block with backward: softmax router, top-k (or replayed experts) with
//! renormalised gate weights, SwiGLU experts, sigmoid-gated shared expert. The top-k choice is
//! not differentiated; gradients flow through the renormalised probabilities of the chosen
//! experts into the router logits (`dp_j = (dw_j − Σ w_i dw_i)/S`, then softmax backward).

use super::ffn::{Ffn, FfnSaved};
use crate::model::moe::route;
use crate::tensor::cpu::{dot, sigmoid};
use crate::train::ops::linear;
use crate::train::grad_sink::GradSink;
use crate::train::params::{ParamStore, Pid};

pub struct MoeW {
    pub router: Pid,
    pub experts: Vec<Ffn>,
    pub shared: Ffn,
    pub shared_gate: Pid,
    pub top_k: usize,
    pub hidden: usize,
}

/// One active expert's call: its (token, slot) rows, saved activations, outputs `[rows, hidden]`.
struct ExpertRun {
    expert: usize,
    rows: Vec<(usize, usize)>,
    saved: FfnSaved,
    y: Vec<f32>,
}

pub struct MoeSaved {
    x: Vec<f32>,
    n: usize,
    /// Router probabilities `[N, E]`.
    p: Vec<f32>,
    /// Chosen experts and their renormalised weights `[N, k]`.
    pub chosen: Vec<u32>,
    weights: Vec<f32>,
    expert_runs: Vec<ExpertRun>,
    shared: FfnSaved,
    shared_out: Vec<f32>,
    shared_gate: Vec<f32>,
}

impl MoeW {
    /// `forced[t·k..]`: replayed expert indices per token (routing replay), else the router's
    /// top-k (descending probability, ties to the lower index, as the inference forward).
    pub fn forward(&self, ps: &ParamStore, x: Vec<f32>, n: usize, forced: Option<&[u32]>) -> (Vec<f32>, MoeSaved) {
        let (hd, ne, k) = (self.hidden, self.experts.len(), self.top_k);
        let mut p = linear(&x, n, hd, ps.get(self.router), ne);
        let mut chosen = vec![0u32; n * k];
        let mut weights = vec![0.0f32; n * k];
        for t in 0..n {
            let f = forced.map(|f| &f[t * k..(t + 1) * k]);
            route(&mut p[t * ne..(t + 1) * ne], f, &mut chosen[t * k..(t + 1) * k], &mut weights[t * k..(t + 1) * k]);
        }
        let mut rows_of: Vec<Vec<(usize, usize)>> = vec![Vec::new(); ne];
        for t in 0..n {
            for j in 0..k {
                rows_of[chosen[t * k + j] as usize].push((t, j));
            }
        }
        let (shared_out, shared) = self.shared.forward(ps, x.clone(), n);
        let sg = ps.get(self.shared_gate);
        let shared_gate: Vec<f32> = (0..n).map(|t| sigmoid(dot(&x[t * hd..(t + 1) * hd], sg))).collect();
        let mut out = vec![0.0; n * hd];
        for t in 0..n {
            for i in 0..hd {
                out[t * hd + i] = shared_gate[t] * shared_out[t * hd + i];
            }
        }
        let mut expert_runs = Vec::new();
        for (e, rows) in rows_of.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let xs: Vec<f32> = rows.iter().flat_map(|&(t, _)| x[t * hd..(t + 1) * hd].iter().copied()).collect();
            let (y, saved) = self.experts[e].forward(ps, xs, rows.len());
            for (r, &(t, j)) in rows.iter().enumerate() {
                let w = weights[t * k + j];
                for i in 0..hd {
                    out[t * hd + i] += w * y[r * hd + i];
                }
            }
            expert_runs.push(ExpertRun { expert: e, rows, saved, y });
        }
        (out, MoeSaved { x, n, p, chosen, weights, expert_runs, shared, shared_out, shared_gate })
    }

    /// Accumulates every weight gradient (router, experts, shared expert and its gate);
    /// returns `dx [N, hidden]`.
    pub fn backward(&self, ps: &ParamStore, s: &MoeSaved, dy: &[f32], gr: &mut dyn GradSink) -> Vec<f32> {
        let (hd, ne, k, n) = (self.hidden, self.experts.len(), self.top_k, s.n);
        let mut dx = vec![0.0; n * hd];
        // Routed experts: d(weight) per (token, slot), and each expert's backward.
        let mut dw = vec![0.0f32; n * k];
        for ExpertRun { expert: e, rows, saved, y } in &s.expert_runs {
            let mut dye = vec![0.0; rows.len() * hd];
            for (r, &(t, j)) in rows.iter().enumerate() {
                let dyt = &dy[t * hd..(t + 1) * hd];
                dw[t * k + j] = dot(dyt, &y[r * hd..(r + 1) * hd]);
                let w = s.weights[t * k + j];
                for i in 0..hd {
                    dye[r * hd + i] = w * dyt[i];
                }
            }
            let dxe = self.experts[*e].backward(ps, saved, &dye, gr);
            for (r, &(t, _)) in rows.iter().enumerate() {
                for i in 0..hd {
                    dx[t * hd + i] += dxe[r * hd + i];
                }
            }
        }
        // Router: renormalisation backward, then softmax backward.
        let mut dlogits = vec![0.0f32; n * ne];
        for t in 0..n {
            let pt = &s.p[t * ne..(t + 1) * ne];
            let sum: f32 = (0..k).map(|j| pt[s.chosen[t * k + j] as usize]).sum();
            let wdw: f32 = (0..k).map(|j| s.weights[t * k + j] * dw[t * k + j]).sum();
            let mut dp = vec![0.0f32; ne];
            for j in 0..k {
                dp[s.chosen[t * k + j] as usize] += (dw[t * k + j] - wdw) / sum;
            }
            let pdp = dot(pt, &dp);
            for e in 0..ne {
                dlogits[t * ne + e] = pt[e] * (dp[e] - pdp);
            }
        }
        let dxr = gr.linear(self.router, &dlogits, &s.x, n, hd, ps.get(self.router), ne);
        dx.iter_mut().zip(&dxr).for_each(|(a, b)| *a += b);
        // Shared expert and its sigmoid gate.
        let mut dshared = vec![0.0; n * hd];
        let sg = ps.get(self.shared_gate).to_vec();
        for t in 0..n {
            let (dyt, ft) = (&dy[t * hd..(t + 1) * hd], &s.shared_out[t * hd..(t + 1) * hd]);
            let g = s.shared_gate[t];
            let dlogit = dot(dyt, ft) * g * (1.0 - g);
            let dsg = gr.vector(self.shared_gate);
            for i in 0..hd {
                dsg[i] += dlogit * s.x[t * hd + i];
                dx[t * hd + i] += dlogit * sg[i];
                dshared[t * hd + i] = g * dyt[i];
            }
        }
        let dxs = self.shared.backward(ps, &s.shared, &dshared, gr);
        dx.iter_mut().zip(&dxs).for_each(|(a, b)| *a += b);
        dx
    }
}
