//! AdamW with decoupled weight decay (PyTorch `torch.optim.AdamW` semantics), the paper's
//! defaults (β 0.9/0.98, weight decay 0.1, lr 1e-6), global-norm gradient clipping, and the
//! learning-rate schedules (constant; linear warm-up then cosine decay). Moments are f32 and
//! live next to the f32 master parameters of the [`ParamStore`].

use super::params::{Grads, ParamStore};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdamWConfig {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Clip the global gradient L2 norm to this value (none when absent).
    pub max_grad_norm: Option<f32>,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { lr: 1e-6, beta1: 0.9, beta2: 0.98, eps: 1e-8, weight_decay: 0.1, max_grad_norm: Some(1.0) }
    }
}

impl AdamWConfig {
    /// The bias corrections `(1 − β1^t, 1 − β2^t)` of step `t` (1-based), as f32 (the CPU and
    /// the device optimizer share them).
    pub fn bias_corrections(&self, t: u64) -> (f32, f32) {
        (1.0 - self.beta1.powi(t as i32), 1.0 - self.beta2.powi(t as i32))
    }
}

/// Learning-rate schedule as a multiplier of the base lr at a given step (0-based).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Schedule {
    Constant,
    /// Linear warm-up over `warmup_steps`, then cosine from 1 to `min_ratio` at `total_steps`.
    Cosine {
        total_steps: u64,
        warmup_steps: u64,
        min_ratio: f32,
    },
}

impl Schedule {
    pub fn factor(&self, step: u64) -> f32 {
        match *self {
            Schedule::Constant => 1.0,
            Schedule::Cosine { total_steps, warmup_steps, min_ratio } => {
                if step < warmup_steps {
                    return (step + 1) as f32 / warmup_steps as f32;
                }
                let span = total_steps.saturating_sub(warmup_steps).max(1);
                let prog = ((step - warmup_steps) as f32 / span as f32).min(1.0);
                min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + (std::f32::consts::PI * prog).cos())
            }
        }
    }
}

/// What one optimizer step did.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StepStats {
    pub lr: f32,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    pub clipped: bool,
}

/// AdamW state: first and second moments per parameter and the step count.
#[derive(Clone, Debug)]
pub struct AdamW {
    pub cfg: AdamWConfig,
    pub m: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
    pub step: u64,
}

impl AdamW {
    pub fn new(cfg: AdamWConfig, store: &ParamStore) -> Self {
        let z = || store.params.iter().map(|p| vec![0.0; p.data.len()]).collect();
        AdamW { cfg, m: z(), v: z(), step: 0 }
    }

    /// Clip `grads` in place to the configured global norm; returns (norm before, clipped).
    pub fn clip(&self, grads: &mut Grads) -> (f64, bool) {
        let norm = grads.global_norm();
        match self.cfg.max_grad_norm {
            Some(max) if norm > max as f64 && norm.is_finite() => {
                grads.scale((max as f64 / (norm + 1e-6)) as f32);
                (norm, true)
            }
            _ => (norm, false),
        }
    }

    /// One update with learning rate `cfg.lr · schedule.factor(step)`; clips first.
    pub fn step(&mut self, store: &mut ParamStore, grads: &mut Grads, schedule: &Schedule) -> StepStats {
        let (grad_norm, clipped) = self.clip(grads);
        let lr = self.cfg.lr * schedule.factor(self.step);
        self.step += 1;
        let c = self.cfg;
        let (bc1, bc2) = c.bias_corrections(self.step);
        for (((p, g), m), v) in store.params.iter_mut().zip(&grads.0).zip(&mut self.m).zip(&mut self.v) {
            for i in 0..g.len() {
                m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * g[i];
                v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * g[i] * g[i];
                let denom = (v[i] / bc2).sqrt() + c.eps;
                p.data[i] *= 1.0 - lr * c.weight_decay;
                p.data[i] -= lr * (m[i] / bc1) / denom;
            }
        }
        StepStats { lr, grad_norm, clipped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    #[test]
    fn adamw_first_steps_by_hand() {
        let mut ps = ParamStore::default();
        ps.push("w".into(), &Tensor::new(vec![2], vec![1.0, -2.0]));
        let cfg = AdamWConfig { lr: 0.1, max_grad_norm: None, ..Default::default() };
        let mut opt = AdamW::new(cfg, &ps);
        let mut g = Grads(vec![vec![0.5, 0.0]]);
        let st = opt.step(&mut ps, &mut g, &Schedule::Constant);
        assert_eq!(st.lr, 0.1);
        // Step 1: m̂ = g, v̂ = g², update = lr·g/|g| = 0.1; decay first: 1·(1 − 0.01).
        assert!((ps.get(crate::train::Pid(0))[0] - (0.99 - 0.1)).abs() < 1e-6);
        // Zero gradient: only the decay moves the weight.
        assert!((ps.get(crate::train::Pid(0))[1] - (-2.0 * 0.99)).abs() < 1e-6);
        // Step 2 with the same gradient: m̂ = g, v̂ = g² again → same Adam step.
        let before = ps.get(crate::train::Pid(0))[0];
        opt.step(&mut ps, &mut g, &Schedule::Constant);
        assert!((ps.get(crate::train::Pid(0))[0] - (before * 0.99 - 0.1)).abs() < 1e-5);
    }

    #[test]
    fn clipping_and_schedules() {
        let ps = ParamStore::default();
        let opt = AdamW::new(AdamWConfig { max_grad_norm: Some(1.0), ..Default::default() }, &ps);
        let mut g = Grads(vec![vec![3.0, 4.0]]);
        let (n, c) = opt.clip(&mut g);
        assert!(c && (n - 5.0).abs() < 1e-9);
        assert!((g.global_norm() - 1.0).abs() < 1e-5);
        let mut small = Grads(vec![vec![0.3, 0.4]]);
        assert!(!opt.clip(&mut small).1);
        let cos = Schedule::Cosine { total_steps: 10, warmup_steps: 2, min_ratio: 0.1 };
        assert_eq!(cos.factor(0), 0.5);
        assert_eq!(cos.factor(1), 1.0);
        assert!((cos.factor(2) - 1.0).abs() < 1e-6);
        assert!((cos.factor(6) - 0.55).abs() < 1e-6);
        assert!((cos.factor(10) - 0.1).abs() < 1e-6);
        assert!((cos.factor(100) - 0.1).abs() < 1e-6);
        assert_eq!(Schedule::Constant.factor(123), 1.0);
    }
}
