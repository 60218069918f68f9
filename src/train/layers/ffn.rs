//! SwiGLU feed-forward `down(SiLU(x·gateᵀ) ⊙ x·upᵀ)` with saved activations and its backward
//! (used by every routed expert and by the shared expert).

use crate::tensor::cpu::silu;
use crate::train::ops::{linear, silu_grad};
use crate::train::grad_sink::GradSink;
use crate::train::params::{ParamStore, Pid};

#[derive(Clone, Copy, Debug)]
pub struct Ffn {
    pub gate: Pid,
    pub up: Pid,
    pub down: Pid,
    pub hidden: usize,
    pub inter: usize,
}

/// Activations of one FFN call on `m` rows.
pub struct FfnSaved {
    pub x: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    h: Vec<f32>,
    pub m: usize,
}

impl FfnSaved {
    /// Activations computed elsewhere (e.g. by grouped GEMMs on a device): input `x [m, hidden]`,
    /// gate and up projections `g`, `u` and `h = SiLU(g) ⊙ u`, each `[m, inter]`.
    pub fn from_parts(x: Vec<f32>, g: Vec<f32>, u: Vec<f32>, h: Vec<f32>, m: usize) -> FfnSaved {
        FfnSaved { x, g, u, h, m }
    }
}

impl Ffn {
    pub fn forward(&self, ps: &ParamStore, x: Vec<f32>, m: usize) -> (Vec<f32>, FfnSaved) {
        let (hd, it) = (self.hidden, self.inter);
        let g = linear(&x, m, hd, ps.get(self.gate), it);
        let u = linear(&x, m, hd, ps.get(self.up), it);
        let h: Vec<f32> = g.iter().zip(&u).map(|(a, b)| silu(*a) * b).collect();
        let y = linear(&h, m, it, ps.get(self.down), hd);
        (y, FfnSaved { x, g, u, h, m })
    }

    /// Accumulates the weight gradients, returns `dx [m, hidden]`.
    pub fn backward(&self, ps: &ParamStore, s: &FfnSaved, dy: &[f32], gr: &mut dyn GradSink) -> Vec<f32> {
        let (hd, it, m) = (self.hidden, self.inter, s.m);
        let dh = gr.linear(self.down, dy, &s.h, m, it, ps.get(self.down), hd);
        let mut dg = vec![0.0; m * it];
        let mut du = vec![0.0; m * it];
        for i in 0..m * it {
            dg[i] = dh[i] * s.u[i] * silu_grad(s.g[i]);
            du[i] = dh[i] * silu(s.g[i]);
        }
        let mut dx = gr.linear(self.gate, &dg, &s.x, m, hd, ps.get(self.gate), it);
        let dx2 = gr.linear(self.up, &du, &s.x, m, hd, ps.get(self.up), it);
        dx.iter_mut().zip(&dx2).for_each(|(a, b)| *a += b);
        dx
    }
}
