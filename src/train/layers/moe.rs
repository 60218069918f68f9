//! Sparse MoE block with backward: softmax router, top-k (or replayed experts) with
//! renormalised gate weights, SwiGLU experts, sigmoid-gated shared expert. The top-k choice is
//! not differentiated; gradients flow through the renormalised probabilities of the chosen
//! experts into the router logits (`dp_j = (dw_j − Σ w_i dw_i)/S`, then softmax backward).
//!
//! The routed experts are behind [`RoutedExperts`]: [`AllExperts`] computes every expert here
//! (the trainer); `moe_ep::EpExperts` dispatches the rows to the ranks owning the experts.
//! Router, renormalisation, shared expert and the weighted sum per token (in ascending expert
//! order) are this module's, the same for both.

use super::ffn::{Ffn, FfnSaved};
use crate::model::moe::route;
use crate::tensor::cpu::{dot, sigmoid};
use crate::train::grad_sink::GradSink;
use crate::train::ops::linear;
use crate::train::params::{ParamStore, Pid};
use std::convert::Infallible;

pub struct MoeW {
    pub router: Pid,
    pub experts: Vec<Ffn>,
    pub shared: Ffn,
    pub shared_gate: Pid,
    pub top_k: usize,
    pub hidden: usize,
}

/// The routed experts of one MoE layer. `forward` gets the layer input `x [n, hidden]` and each
/// (token, slot) pair's expert `chosen [n·k]` and returns one output row per pair `[n·k, hidden]`;
/// `backward` gets the gradient per pair (`w · dy` of its token) and returns the input gradient
/// per pair, accumulating the weight gradients of the experts it computes.
pub trait RoutedExperts {
    type Saved;
    type Error;
    fn forward(
        &mut self,
        moe: &MoeW,
        ps: &ParamStore,
        x: &[f32],
        n: usize,
        chosen: &[u32],
    ) -> Result<(Vec<f32>, Self::Saved), Self::Error>;
    fn backward(
        &mut self,
        moe: &MoeW,
        ps: &ParamStore,
        saved: &Self::Saved,
        dy_pair: &[f32],
        gr: &mut dyn GradSink,
    ) -> Result<Vec<f32>, Self::Error>;
}

/// Every routed expert on this rank, on the CPU (the single-process trainer).
pub struct AllExperts;

/// One active expert's call: its pairs (`token·k + slot`, ascending) and saved activations.
pub struct ExpertRun {
    expert: usize,
    pairs: Vec<usize>,
    saved: FfnSaved,
}

impl RoutedExperts for AllExperts {
    type Saved = Vec<ExpertRun>;
    type Error = Infallible;

    fn forward(&mut self, moe: &MoeW, ps: &ParamStore, x: &[f32], _n: usize, chosen: &[u32]) -> Result<(Vec<f32>, Vec<ExpertRun>), Infallible> {
        let (hd, k) = (moe.hidden, moe.top_k);
        let mut pairs_of: Vec<Vec<usize>> = vec![Vec::new(); moe.experts.len()];
        for (p, &e) in chosen.iter().enumerate() {
            pairs_of[e as usize].push(p);
        }
        let mut y_pair = vec![0.0f32; chosen.len() * hd];
        let mut runs = Vec::new();
        for (e, pairs) in pairs_of.into_iter().enumerate() {
            if pairs.is_empty() {
                continue;
            }
            let xs: Vec<f32> = pairs.iter().flat_map(|&p| x[p / k * hd..(p / k + 1) * hd].iter().copied()).collect();
            let (y, saved) = moe.experts[e].forward(ps, xs, pairs.len());
            for (r, &p) in pairs.iter().enumerate() {
                y_pair[p * hd..(p + 1) * hd].copy_from_slice(&y[r * hd..(r + 1) * hd]);
            }
            runs.push(ExpertRun { expert: e, pairs, saved });
        }
        Ok((y_pair, runs))
    }

    fn backward(&mut self, moe: &MoeW, ps: &ParamStore, runs: &Vec<ExpertRun>, dy_pair: &[f32], gr: &mut dyn GradSink) -> Result<Vec<f32>, Infallible> {
        let hd = moe.hidden;
        let mut dx_pair = vec![0.0f32; dy_pair.len()];
        for ExpertRun { expert, pairs, saved } in runs {
            let dye: Vec<f32> = pairs.iter().flat_map(|&p| dy_pair[p * hd..(p + 1) * hd].iter().copied()).collect();
            let dxe = moe.experts[*expert].backward(ps, saved, &dye, gr);
            for (r, &p) in pairs.iter().enumerate() {
                dx_pair[p * hd..(p + 1) * hd].copy_from_slice(&dxe[r * hd..(r + 1) * hd]);
            }
        }
        Ok(dx_pair)
    }
}

pub struct MoeSaved<S = Vec<ExpertRun>> {
    x: Vec<f32>,
    n: usize,
    /// Router probabilities `[N, E]`.
    p: Vec<f32>,
    /// Chosen experts and their renormalised weights `[N, k]`.
    pub chosen: Vec<u32>,
    weights: Vec<f32>,
    /// Routed expert output per (token, slot) `[N·k, hidden]`.
    y_pair: Vec<f32>,
    routed: S,
    shared: FfnSaved,
    shared_out: Vec<f32>,
    shared_gate: Vec<f32>,
}

/// The slots of token `t` in ascending expert order (ties by slot): the order the weighted sum
/// and the input gradient add the experts in.
fn slots_by_expert(chosen: &[u32], t: usize, k: usize) -> Vec<usize> {
    let mut s: Vec<usize> = (0..k).collect();
    s.sort_by_key(|&j| (chosen[t * k + j], j));
    s
}

impl MoeW {
    /// `forced[t·k..]`: replayed expert indices per token (routing replay), else the router's
    /// top-k (descending probability, ties to the lower index, as the inference forward).
    pub fn forward(&self, ps: &ParamStore, x: Vec<f32>, n: usize, forced: Option<&[u32]>) -> (Vec<f32>, MoeSaved) {
        match self.forward_with(ps, x, n, forced, &mut AllExperts) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// Accumulates every weight gradient (router, experts, shared expert and its gate);
    /// returns `dx [N, hidden]`.
    pub fn backward(&self, ps: &ParamStore, s: &MoeSaved, dy: &[f32], gr: &mut dyn GradSink) -> Vec<f32> {
        match self.backward_with(ps, s, dy, gr, &mut AllExperts) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// [`MoeW::forward`] with the routed experts computed by `routed`.
    pub fn forward_with<R: RoutedExperts>(
        &self,
        ps: &ParamStore,
        x: Vec<f32>,
        n: usize,
        forced: Option<&[u32]>,
        routed: &mut R,
    ) -> Result<(Vec<f32>, MoeSaved<R::Saved>), R::Error> {
        let (hd, ne, k) = (self.hidden, self.experts.len(), self.top_k);
        let mut p = linear(&x, n, hd, ps.get(self.router), ne);
        let mut chosen = vec![0u32; n * k];
        let mut weights = vec![0.0f32; n * k];
        for t in 0..n {
            let f = forced.map(|f| &f[t * k..(t + 1) * k]);
            route(&mut p[t * ne..(t + 1) * ne], f, &mut chosen[t * k..(t + 1) * k], &mut weights[t * k..(t + 1) * k]);
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
        let (y_pair, routed) = routed.forward(self, ps, &x, n, &chosen)?;
        for t in 0..n {
            for j in slots_by_expert(&chosen, t, k) {
                let (w, y) = (weights[t * k + j], &y_pair[(t * k + j) * hd..(t * k + j + 1) * hd]);
                for i in 0..hd {
                    out[t * hd + i] += w * y[i];
                }
            }
        }
        Ok((out, MoeSaved { x, n, p, chosen, weights, y_pair, routed, shared, shared_out, shared_gate }))
    }

    /// [`MoeW::backward`] with the routed experts' backward done by `routed`.
    pub fn backward_with<R: RoutedExperts>(
        &self,
        ps: &ParamStore,
        s: &MoeSaved<R::Saved>,
        dy: &[f32],
        gr: &mut dyn GradSink,
        routed: &mut R,
    ) -> Result<Vec<f32>, R::Error> {
        let (hd, ne, k, n) = (self.hidden, self.experts.len(), self.top_k, s.n);
        let mut dx = vec![0.0; n * hd];
        // Routed experts: d(weight) per (token, slot), and the experts' backward.
        let mut dw = vec![0.0f32; n * k];
        let mut dy_pair = vec![0.0f32; n * k * hd];
        for t in 0..n {
            let dyt = &dy[t * hd..(t + 1) * hd];
            for j in 0..k {
                let p = t * k + j;
                dw[p] = dot(dyt, &s.y_pair[p * hd..(p + 1) * hd]);
                let w = s.weights[p];
                for i in 0..hd {
                    dy_pair[p * hd + i] = w * dyt[i];
                }
            }
        }
        let dx_pair = routed.backward(self, ps, &s.routed, &dy_pair, gr)?;
        for t in 0..n {
            for j in slots_by_expert(&s.chosen, t, k) {
                let p = t * k + j;
                for i in 0..hd {
                    dx[t * hd + i] += dx_pair[p * hd + i];
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
        Ok(dx)
    }
}
