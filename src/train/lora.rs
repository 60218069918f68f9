//! LoRA adapters: `W = W₀ + (α/r)·B·A` on chosen 2-D weights (by name pattern: attention, GDN,
//! shared or routed expert projections). The frozen `W₀` is kept aside; after each update the
//! effective weights are written into the model's [`ParamStore`] (so the forward is the plain
//! one over merged weights — measured faster than adding the adapter path, see docs/train.md —
//! and a saved checkpoint is the merged model). Only the adapters carry optimizer state.
//!
//! Adapter gradients come from each projection's input `X [m, in]` and output gradient
//! `dY [m, out]` directly, through the backward's [`GradSink`] ([`AdapterGrads`]):
//! `dB = s·dYᵀ·(X·Aᵀ)`, `dA = s·(dY·B)ᵀ·X` — `O(m·r·(in + out))` work and no `[out, in]` dense
//! gradient (routed experts: per expert over its routed rows, the rows its FFN backward sees).
//! [`Lora::project`] is the same quantity from a dense gradient (`dB = s·dW·Aᵀ`, `dA = s·Bᵀ·dW`,
//! exact since `W` is linear in `B·A`), kept as the reference the tests compare with.
//! `A` starts uniform in ±1/√in (seeded), `B` at zero.

use super::error::{Result, TrainError};
use super::grad_sink::{frozen_linear, GradSink};
use super::ops::{gemm, View};
use super::params::{Grads, ParamStore, Pid};
use crate::tensor::Tensor;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f32,
    /// A 2-D parameter gets an adapter when its name contains one of these (e.g. `q_proj`,
    /// `linear_attn.in_proj_qkv`, `shared_expert.`, `experts.`).
    pub targets: Vec<String>,
    #[serde(default)]
    pub seed: u64,
}

/// True when the parameter `name` of `shape` gets an adapter: a 2-D weight whose name contains
/// one of `targets`.
pub fn is_target(name: &str, shape: &[usize], targets: &[String]) -> bool {
    shape.len() == 2 && targets.iter().any(|t| name.contains(t.as_str()))
}

/// The adapters of `cfg` over the parameters `params` (name, shape; in the model's order): for
/// each target ([`is_target`]), in order, `<name>.lora_A` `[r, in]` uniform in ±1/√in from a
/// generator seeded by `cfg.seed` and the target's name (so an adapter's start does not depend on
/// the order the parameters are listed in) and `<name>.lora_B` `[out, r]` at zero (parameters
/// `2j`, `2j + 1` of the store), and the targets' indices in `params`. Shared by the CPU [`Lora`]
/// and the device trainer's adapters (which list fused experts in another order), so both start
/// identical.
pub fn init_adapters<'a>(
    cfg: &LoraConfig,
    params: impl IntoIterator<Item = (&'a str, &'a [usize])>,
) -> Result<(ParamStore, Vec<usize>)> {
    if cfg.rank == 0 {
        return Err(TrainError::BadInput("LoRA rank must be > 0".into()));
    }
    let (mut adapters, mut targets) = (ParamStore::default(), vec![]);
    for (i, (name, shape)) in params.into_iter().enumerate() {
        if !is_target(name, shape, &cfg.targets) {
            continue;
        }
        let (out, inp, r) = (shape[0], shape[1], cfg.rank);
        let bound = 1.0 / (inp as f32).sqrt();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed ^ fnv1a(name));
        let a_init: Vec<f32> = (0..r * inp).map(|_| rng.random_range(-bound..bound)).collect();
        adapters.push(format!("{name}.lora_A"), &Tensor::new(vec![r, inp], a_init));
        adapters.push(format!("{name}.lora_B"), &Tensor::new(vec![out, r], vec![0.0; out * r]));
        targets.push(i);
    }
    if targets.is_empty() {
        return Err(TrainError::BadInput(format!("no 2-D parameter matches the LoRA targets {:?}", cfg.targets)));
    }
    Ok((adapters, targets))
}

/// The 64-bit FNV-1a hash of `name` (stable across builds and platforms, unlike std's hasher).
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// One adapted weight: the model parameter, its frozen base, and the adapter parameters.
struct Adapted {
    target: Pid,
    base: Vec<f32>,
    out: usize,
    inp: usize,
    a: Pid,
    b: Pid,
}

pub struct Lora {
    pub cfg: LoraConfig,
    /// `<name>.lora_A` `[r, in]` and `<name>.lora_B` `[out, r]`.
    pub adapters: ParamStore,
    adapted: Vec<Adapted>,
    /// Model parameter index → its entry in `adapted`.
    by_param: Vec<Option<usize>>,
}

impl Lora {
    pub fn new(cfg: LoraConfig, store: &ParamStore) -> Result<Self> {
        let shapes = store.params.iter().map(|p| (p.name.as_str(), p.shape.as_slice()));
        let (adapters, targets) = init_adapters(&cfg, shapes)?;
        let mut by_param = vec![None; store.len()];
        let mut adapted = Vec::with_capacity(targets.len());
        for (j, &i) in targets.iter().enumerate() {
            let p = &store.params[i];
            by_param[i] = Some(j);
            let (a, b) = (Pid(2 * j), Pid(2 * j + 1));
            adapted.push(Adapted { target: Pid(i), base: p.data.clone(), out: p.shape[0], inp: p.shape[1], a, b });
        }
        Ok(Lora { cfg, adapters, adapted, by_param })
    }

    fn scale(&self) -> f32 {
        self.cfg.alpha / self.cfg.rank as f32
    }

    /// Number of adapted weights.
    pub fn len(&self) -> usize {
        self.adapted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.adapted.is_empty()
    }

    /// Write `W₀ + s·B·A` into the model's parameters (the merge).
    pub fn apply(&self, store: &mut ParamStore) {
        let (s, r) = (self.scale(), self.cfg.rank);
        for ad in &self.adapted {
            let w = store.get_mut(ad.target);
            w.copy_from_slice(&ad.base);
            let mut ba = vec![0.0; ad.out * ad.inp];
            gemm(
                ad.out,
                ad.inp,
                r,
                View::rows(self.adapters.get(ad.b), r),
                View::rows(self.adapters.get(ad.a), ad.inp),
                &mut ba,
                false,
            );
            w.iter_mut().zip(&ba).for_each(|(x, y)| *x += s * y);
        }
    }

    /// Adapter gradients from the dense gradients of the model's parameters (the reference).
    pub fn project(&self, full: &Grads) -> Grads {
        let mut g = self.adapters.zero_grads();
        for (i, ad) in self.adapted.iter().enumerate() {
            self.project_one(i, full.get(ad.target), &mut g);
        }
        g
    }

    /// Adds the projection of adapted weight `i`'s dense gradient `dw [out, in]` to `g`.
    fn project_one(&self, i: usize, dw: &[f32], g: &mut Grads) {
        let (s, r) = (self.scale(), self.cfg.rank);
        let ad = &self.adapted[i];
        let mut ga = vec![0.0; r * ad.inp];
        let mut gb = vec![0.0; ad.out * r];
        {
            // dB [out, r] = s·dW [out, in]·Aᵀ [in, r]
            gemm(
                ad.out,
                r,
                ad.inp,
                View::rows(dw, ad.inp),
                View::t(self.adapters.get(ad.a), ad.inp),
                &mut gb,
                false,
            );
            // dA [r, in] = s·Bᵀ [r, out]·dW [out, in]
            gemm(
                r,
                ad.inp,
                ad.out,
                View::t(self.adapters.get(ad.b), r),
                View::rows(dw, ad.inp),
                &mut ga,
                false,
            );
        }
        g.get_mut(ad.a).iter_mut().zip(&ga).for_each(|(x, y)| *x += s * y);
        g.get_mut(ad.b).iter_mut().zip(&gb).for_each(|(x, y)| *x += s * y);
    }

    /// Adds adapted weight `i`'s adapter gradients for one projection call with input
    /// `x [m, in]` and output gradient `dy [m, out]` to `g`, without the dense gradient:
    /// `dB += dYᵀ·(s·X·Aᵀ)`, `dA += (s·dY·B)ᵀ·X`.
    fn accumulate(&self, i: usize, dy: &[f32], x: &[f32], m: usize, g: &mut Grads) {
        let (s, r) = (self.scale(), self.cfg.rank);
        let ad = &self.adapted[i];
        let (a, b) = (self.adapters.get(ad.a), self.adapters.get(ad.b));
        let mut xa = vec![0.0; m * r];
        gemm(m, r, ad.inp, View::rows(x, ad.inp), View::t(a, ad.inp), &mut xa, false);
        xa.iter_mut().for_each(|v| *v *= s);
        gemm(ad.out, r, m, View::t(dy, ad.out), View::rows(&xa, r), g.get_mut(ad.b), true);
        let mut dyb = vec![0.0; m * r];
        gemm(m, r, ad.out, View::rows(dy, ad.out), View::rows(b, r), &mut dyb, false);
        dyb.iter_mut().for_each(|v| *v *= s);
        gemm(r, ad.inp, m, View::t(&dyb, r), View::rows(x, ad.inp), g.get_mut(ad.a), true);
    }

    /// A gradient sink for a backward of the model whose parameters are `store` that forms the
    /// adapter gradients only (see [`AdapterGrads`]).
    pub fn sink<'a>(&'a self, store: &'a ParamStore) -> AdapterGrads<'a> {
        AdapterGrads { lora: self, store, grads: self.adapters.zero_grads(), scratch: vec![], dense: vec![] }
    }
}

/// The LoRA training path's [`GradSink`]: adapter gradients from each adapted projection's
/// `X` and `dY` ([`Lora`]'s formulas), input gradients only for every other (frozen) weight.
/// What it allocates is the adapters' gradients, one scratch vector for frozen vector-sized
/// parameters, and — only when a backward reaches an adapted weight element-wise instead of as a
/// projection (a pattern matching e.g. the `[1, hidden]` shared-expert gate) — that weight's
/// dense gradient, projected in [`AdapterGrads::finish`]. No projection's `[out, in]` gradient.
pub struct AdapterGrads<'a> {
    lora: &'a Lora,
    store: &'a ParamStore,
    grads: Grads,
    scratch: Vec<f32>,
    dense: Vec<(usize, Vec<f32>)>,
}

impl AdapterGrads<'_> {
    /// The adapter gradients (layout of [`Lora::adapters`]).
    pub fn finish(mut self) -> Grads {
        for (i, dw) in std::mem::take(&mut self.dense) {
            self.lora.project_one(i, &dw, &mut self.grads);
        }
        self.grads
    }

    /// Scalars this sink holds: adapter gradients, scratch and element-wise fallbacks.
    pub fn allocated_scalars(&self) -> usize {
        self.grads.0.iter().map(Vec::len).sum::<usize>()
            + self.scratch.capacity()
            + self.dense.iter().map(|(_, d)| d.len()).sum::<usize>()
    }

    /// Adapted weight `i`'s dense fallback buffer (created on first use).
    fn dense_of(&mut self, i: usize) -> &mut [f32] {
        let at = match self.dense.iter().position(|(j, _)| *j == i) {
            Some(at) => at,
            None => {
                let ad = &self.lora.adapted[i];
                self.dense.push((i, vec![0.0; ad.out * ad.inp]));
                self.dense.len() - 1
            }
        };
        &mut self.dense[at].1
    }
}

impl GradSink for AdapterGrads<'_> {
    #[allow(clippy::too_many_arguments)]
    fn linear(&mut self, p: Pid, dy: &[f32], x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
        if let Some(i) = self.lora.by_param.get(p.0).copied().flatten() {
            self.lora.accumulate(i, dy, x, m, &mut self.grads);
        }
        frozen_linear(dy, m, k, w, n)
    }

    fn vector(&mut self, p: Pid) -> &mut [f32] {
        if let Some(i) = self.lora.by_param.get(p.0).copied().flatten() {
            return self.dense_of(i);
        }
        let len = self.store.params[p.0].data.len();
        self.scratch.clear();
        self.scratch.resize(len, 0.0);
        &mut self.scratch
    }

    fn table(&mut self, p: Pid) -> Option<&mut [f32]> {
        let i = self.lora.by_param.get(p.0).copied().flatten()?;
        Some(self.dense_of(i))
    }
}
