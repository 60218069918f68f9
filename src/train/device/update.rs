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

/// Every serving weight of `s`, in the order of the gradient buffers (`grads`: the loading
/// order); the head only when it is not tied.
fn serving<A: Act>(s: &mut Stack<CudaWeights<A>>, tied: bool) -> Vec<Serving<'_, A>> {
    use Serving::{Act as W, F32};
    let mut out = vec![W(&mut s.embed)];
    for l in s.layers.iter_mut() {
        out.push(W(&mut l.input_norm));
        match &mut l.mixer {
            Mixer::Attention(a) => {
                out.extend([W(&mut a.q), W(&mut a.k), W(&mut a.v), W(&mut a.o), W(&mut a.q_norm), W(&mut a.k_norm)])
            }
            Mixer::Gdn(d) => {
                out.extend([W(&mut d.qkv), W(&mut d.z), W(&mut d.b), W(&mut d.a), W(&mut d.conv)]);
                out.extend([F32(&mut d.dt_bias), F32(&mut d.a_log), W(&mut d.norm), W(&mut d.out)]);
            }
        }
        out.push(W(&mut l.post_norm));
        let m = &mut l.moe;
        out.extend([W(&mut m.router), W(&mut m.gate_up), W(&mut m.down)]);
        out.extend([W(&mut m.s_gate), W(&mut m.s_up), W(&mut m.s_down), W(&mut m.s_gate_w)]);
    }
    out.push(W(&mut s.norm));
    if !tied {
        out.push(W(&mut s.head));
    }
    out
}

impl<A: Act> DeviceTrainModel<A> {
    /// A device AdamW over every parameter, its fp32 masters read from the serving weights.
    pub fn optimizer(&mut self, gpu: &Gpu, cfg: AdamWConfig) -> Result<DeviceAdamW> {
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
    pub fn step(&mut self, gpu: &Gpu, opt: &mut DeviceAdamW, schedule: &Schedule) -> Result<StepStats> {
        let c = self.model.cfg.clone();
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
