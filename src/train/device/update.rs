//! The optimizer step of the device trainer: `DeviceAdamW` over the fp32 gradient buffers, with
//! the serving weights — the `CudaModel`'s, the very buffers the engine reads — rewritten in
//! place from the fp32 masters after the update (a tied head is the embedding's copy again).

use super::{grads, DeviceTrainModel};
use crate::model::backend::cuda::CudaWeights;
use crate::model::backend::{Mixer, Stack};
use crate::tensor::cuda::backward::residual_grad_add;
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::tensor::device::DeviceError;
use crate::train::device_optim::{DeviceAdamW, Serving};
use crate::train::error::Result;
use crate::train::optim::{AdamWConfig, Schedule, StepStats};

/// The serving weights of a stack `$s` in the order of the gradient buffers (`grads`: the
/// loading order; the head only when not `$tied`), each wrapped in `$W` (storage type) or `$F`
/// (the fp32 gate vectors), borrowed with `$r` (`&` or `&mut`).
macro_rules! serving_walk {
    ($s:expr, $tied:expr, $W:path, $F:path, $($r:tt)+) => {{
        let s = $s;
        let mut out = vec![$W($($r)+ s.embed)];
        for l in $($r)+ s.layers {
            out.push($W($($r)+ l.input_norm));
            match $($r)+ l.mixer {
                Mixer::Attention(a) => out.extend([
                    $W($($r)+ a.q), $W($($r)+ a.k), $W($($r)+ a.v), $W($($r)+ a.o), $W($($r)+ a.q_norm), $W($($r)+ a.k_norm),
                ]),
                Mixer::Gdn(d) => {
                    out.extend([$W($($r)+ d.qkv), $W($($r)+ d.z), $W($($r)+ d.b), $W($($r)+ d.a), $W($($r)+ d.conv)]);
                    out.extend([$F($($r)+ d.dt_bias), $F($($r)+ d.a_log), $W($($r)+ d.norm), $W($($r)+ d.out)]);
                }
            }
            out.push($W($($r)+ l.post_norm));
            let m = $($r)+ l.moe;
            out.extend([$W($($r)+ m.router), $W($($r)+ m.gate_up), $W($($r)+ m.down)]);
            out.extend([$W($($r)+ m.s_gate), $W($($r)+ m.s_up), $W($($r)+ m.s_down), $W($($r)+ m.s_gate_w)]);
        }
        out.push($W($($r)+ s.norm));
        if !$tied {
            out.push($W($($r)+ s.head));
        }
        out
    }};
}

/// Every serving weight of `s`, writable, in the order of the gradient buffers.
pub(super) fn serving<A: Act>(s: &mut Stack<CudaWeights<A>>, tied: bool) -> Vec<Serving<'_, A>> {
    serving_walk!(s, tied, Serving::Act, Serving::F32, &mut)
}

/// A serving weight, read-only: in the storage type or fp32.
pub(super) enum Served<'a, A: Act> {
    Act(&'a DeviceBuffer<A>),
    F32(&'a DeviceBuffer<f32>),
}

impl<A: Act> Served<'_, A> {
    /// The values, downloaded as fp32.
    pub(super) fn download(&self, gpu: &Gpu) -> std::result::Result<Vec<f32>, DeviceError> {
        match self {
            Served::Act(b) => gpu.download(*b).map(|x| A::to_f32(&x)),
            Served::F32(b) => gpu.download(*b),
        }
    }
}

/// Every serving weight of `s`, read-only, in the order of the gradient buffers.
pub(super) fn served<A: Act>(s: &Stack<CudaWeights<A>>, tied: bool) -> Vec<Served<'_, A>> {
    serving_walk!(s, tied, Served::Act, Served::F32, &)
}

impl<A: Act> DeviceTrainModel<A> {
    /// A device AdamW over every parameter, its fp32 masters read from the serving weights.
    /// With LoRA: over the adapters only.
    pub fn optimizer(&mut self, gpu: &Gpu, cfg: AdamWConfig) -> Result<DeviceAdamW> {
        if let Some(lora) = &self.lora {
            return lora.optimizer(gpu, cfg);
        }
        let tied = self.model.cfg.tie_word_embeddings;
        let masters = serving(self.model.stack_mut(), tied)
            .into_iter()
            .map(|s| match s {
                Serving::Act(b) => gpu.download(b).map(|x| A::to_f32(&x)),
                Serving::F32(b) => gpu.download(b),
            })
            .collect::<std::result::Result<Vec<_>, DeviceError>>()?;
        let refs: Vec<&[f32]> = masters.iter().map(Vec::as_slice).collect();
        DeviceAdamW::new(gpu, cfg, &refs)
    }

    /// One AdamW step (`opt` from [`Self::optimizer`]) over the accumulated gradients; the
    /// serving weights are rewritten in place. The gradients are left as they are.
    /// With LoRA: the adapters' step, then every target's serving weight rewritten as the merge.
    pub fn step(&mut self, gpu: &Gpu, opt: &mut DeviceAdamW, schedule: &Schedule) -> Result<StepStats> {
        let c = self.model.cfg.clone();
        if let Some(lora) = &mut self.lora {
            return lora.step(gpu, opt, schedule, self.model.stack_mut(), c.tie_word_embeddings);
        }
        let g = self.grads.stack();
        // A tied head's gradient joins the embedding's.
        let folded = match c.tie_word_embeddings {
            true => {
                let mut e = gpu.duplicate(&g.embed)?;
                residual_grad_add(gpu, &mut e, &g.head, g.embed.len())?;
                Some(e)
            }
            false => None,
        };
        let mut bufs: Vec<&DeviceBuffer<f32>> = grads::buffers(&c, g).into_iter().map(|(_, b)| b).collect();
        if let Some(e) = &folded {
            bufs[0] = e;
        }
        let mut serve: Vec<Option<Serving<'_, A>>> =
            serving(self.model.stack_mut(), c.tie_word_embeddings).into_iter().map(Some).collect();
        let stats = opt.step_serving(gpu, &bufs, &mut serve, schedule)?;
        drop(serve);
        if c.tie_word_embeddings {
            let s = self.model.stack_mut();
            gpu.copy_into(&s.embed, 0, &mut s.head, 0, s.embed.len())?;
        }
        Ok(stats)
    }
}
