//! LoRA adapters: `W = W₀ + (α/r)·B·A` on chosen 2-D weights (by name pattern: attention, GDN,
//! shared or routed expert projections). The frozen `W₀` is kept aside; after each update the
//! effective weights are written into the model's [`ParamStore`] (so the forward is the plain
//! one and a saved checkpoint is the merged model). Adapter gradients are projections of the
//! dense weight gradient: `dB = s·dW·Aᵀ`, `dA = s·Bᵀ·dW` (exact, since `W` is linear in `B·A`).
//! Only the adapters carry optimizer state. `A` starts uniform in ±1/√in (seeded), `B` at zero.

use super::error::{Result, TrainError};
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
}

impl Lora {
    pub fn new(cfg: LoraConfig, store: &ParamStore) -> Result<Self> {
        if cfg.rank == 0 {
            return Err(TrainError::BadInput("LoRA rank must be > 0".into()));
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut adapters = ParamStore::default();
        let mut adapted = Vec::new();
        for (i, p) in store.params.iter().enumerate() {
            if !is_target(&p.name, &p.shape, &cfg.targets) {
                continue;
            }
            let (out, inp, r) = (p.shape[0], p.shape[1], cfg.rank);
            let bound = 1.0 / (inp as f32).sqrt();
            let a_init: Vec<f32> = (0..r * inp).map(|_| rng.random_range(-bound..bound)).collect();
            let a = adapters.push(format!("{}.lora_A", p.name), &Tensor::new(vec![r, inp], a_init));
            let b = adapters.push(format!("{}.lora_B", p.name), &Tensor::new(vec![out, r], vec![0.0; out * r]));
            adapted.push(Adapted { target: Pid(i), base: p.data.clone(), out, inp, a, b });
        }
        if adapted.is_empty() {
            return Err(TrainError::BadInput(format!("no 2-D parameter matches the LoRA targets {:?}", cfg.targets)));
        }
        Ok(Lora { cfg, adapters, adapted })
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

    /// Adapter gradients from the dense gradients of the model's parameters.
    pub fn project(&self, full: &Grads) -> Grads {
        let (s, r) = (self.scale(), self.cfg.rank);
        let mut g = self.adapters.zero_grads();
        for ad in &self.adapted {
            let dw = full.get(ad.target);
            // dB [out, r] = s·dW [out, in]·Aᵀ [in, r]
            gemm(
                ad.out,
                r,
                ad.inp,
                View::rows(dw, ad.inp),
                View::t(self.adapters.get(ad.a), ad.inp),
                g.get_mut(ad.b),
                false,
            );
            // dA [r, in] = s·Bᵀ [r, out]·dW [out, in]
            gemm(
                r,
                ad.inp,
                ad.out,
                View::t(self.adapters.get(ad.b), r),
                View::rows(dw, ad.inp),
                g.get_mut(ad.a),
                false,
            );
            g.get_mut(ad.a).iter_mut().for_each(|x| *x *= s);
            g.get_mut(ad.b).iter_mut().for_each(|x| *x *= s);
        }
        g
    }
}
