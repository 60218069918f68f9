//! `DeviceAdamW`: the AdamW of [`super::optim`] on a device (a GPU, or the emulated one), over a
//! set of device parameter buffers. The training side owns the fp32 master weights and the fp32
//! moments on the device; the gradients are device buffers; global-norm clipping is computed on
//! the device (per-buffer block reductions of `g²`, then one block that forms the norm and the
//! clip factor, read by the update kernel without a host round trip); after each step the
//! serving copy of a parameter (the weights the engine reads, storage type `A`: bf16 or f32) is
//! rewritten in place from its master. Kernels: `kernels/optim.cu`; launch wrappers:
//! `tensor::cuda::ops::adamw_*`. Same numbers as the CPU `AdamW` (its semantics are
//! `torch.optim.AdamW`'s): `tests/train_device_adamw.rs`.

use super::error::{Result, TrainError};
use super::optim::{AdamWConfig, Schedule, StepStats};
use crate::tensor::cuda::ops::{self, AdamWStep};
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};

/// The serving copy of one parameter, rewritten from its master after each step: in the
/// storage type `A`, or fp32 (parameters the model keeps in fp32 in every build, e.g. GDN's
/// `A_log` and `dt_bias`).
pub enum Serving<'a, A: Act> {
    Act(&'a mut DeviceBuffer<A>),
    F32(&'a mut DeviceBuffer<f32>),
}

/// One trained parameter on the device: fp32 master and moments.
struct Slot {
    master: DeviceBuffer<f32>,
    m: DeviceBuffer<f32>,
    v: DeviceBuffer<f32>,
    /// Where this parameter's partial sums of `g²` start.
    partial_offset: usize,
}

/// AdamW state on the device for a fixed list of parameters (in the order given to `new`).
pub struct DeviceAdamW {
    pub cfg: AdamWConfig,
    /// Steps taken (the bias corrections use `step + 1` on the next one).
    pub step: u64,
    slots: Vec<Slot>,
    /// Per-block partial sums of `g²` of every gradient (f64).
    partials: DeviceBuffer<f64>,
    /// `[global norm, clip factor]` of the last step (f64).
    stats: DeviceBuffer<f64>,
}

impl DeviceAdamW {
    /// Upload the fp32 master copies `masters` (one per parameter) and zero moments.
    pub fn new(gpu: &Gpu, cfg: AdamWConfig, masters: &[&[f32]]) -> Result<Self> {
        let mut slots = Vec::with_capacity(masters.len());
        let mut offset = 0;
        for w in masters {
            slots.push(Slot {
                master: gpu.upload::<f32>(w)?,
                m: gpu.zeros(w.len())?,
                v: gpu.zeros(w.len())?,
                partial_offset: offset,
            });
            offset += ops::adamw_norm_blocks(w.len());
        }
        Ok(DeviceAdamW { cfg, step: 0, slots, partials: gpu.zeros(offset.max(1))?, stats: gpu.zeros(2)? })
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// One update with learning rate `cfg.lr · schedule.factor(step)`: clip the gradients to the
    /// configured global norm (on the device), AdamW on every master, then each `serving[i]`
    /// that is given rewritten from master `i`. `grads[i]` and `serving[i]` have parameter `i`'s
    /// length. The gradients are read, not modified. Returns what the CPU's `AdamW::step` returns
    /// (the norm is downloaded: one 16-byte copy after the launches).
    pub fn step<A: Act>(
        &mut self,
        gpu: &Gpu,
        grads: &[&DeviceBuffer<f32>],
        serving: &mut [Option<&mut DeviceBuffer<A>>],
        schedule: &Schedule,
    ) -> Result<StepStats> {
        let mut serving: Vec<Option<Serving<'_, A>>> =
            serving.iter_mut().map(|s| s.as_deref_mut().map(Serving::Act)).collect();
        self.step_serving(gpu, grads, &mut serving, schedule)
    }

    /// [`Self::step`] with serving copies in the storage type or in fp32 ([`Serving`]: the
    /// model keeps a few parameters in fp32 in every build).
    pub fn step_serving<A: Act>(
        &mut self,
        gpu: &Gpu,
        grads: &[&DeviceBuffer<f32>],
        serving: &mut [Option<Serving<'_, A>>],
        schedule: &Schedule,
    ) -> Result<StepStats> {
        let n = self.slots.len();
        if grads.len() != n || serving.len() != n {
            return Err(TrainError::BadInput(format!(
                "device AdamW over {n} parameters got {} gradients and {} serving buffers",
                grads.len(),
                serving.len()
            )));
        }
        if let Some((i, _)) = self.slots.iter().zip(grads).enumerate().find(|(_, (s, g))| s.master.len() != g.len()) {
            return Err(TrainError::BadInput(format!(
                "parameter {i}: gradient of {} elements for a weight of {}",
                grads[i].len(),
                self.slots[i].master.len()
            )));
        }
        for (s, g) in self.slots.iter().zip(grads) {
            ops::adamw_sq_norm(gpu, g, &mut self.partials, s.partial_offset)?;
        }
        let count = self.slots.last().map_or(0, |s| s.partial_offset + ops::adamw_norm_blocks(s.master.len()));
        ops::adamw_clip_scale(gpu, &self.partials, count, self.cfg.max_grad_norm, &mut self.stats)?;
        let lr = self.cfg.lr * schedule.factor(self.step);
        self.step += 1;
        let (bc1, bc2) = self.cfg.bias_corrections(self.step);
        let c = self.cfg;
        let h = AdamWStep { lr, beta1: c.beta1, beta2: c.beta2, eps: c.eps, weight_decay: c.weight_decay, bc1, bc2 };
        for ((s, g), serve) in self.slots.iter_mut().zip(grads).zip(serving.iter_mut()) {
            let (p, m, v, st) = (&mut s.master, &mut s.m, &mut s.v, &self.stats);
            match serve {
                Some(Serving::Act(b)) => ops::adamw_update(gpu, p, m, v, g, Some(&mut **b), st, &h)?,
                Some(Serving::F32(b)) => ops::adamw_update::<f32>(gpu, p, m, v, g, Some(&mut **b), st, &h)?,
                None => ops::adamw_update::<A>(gpu, p, m, v, g, None, st, &h)?,
            }
        }
        let stats = gpu.download(&self.stats)?;
        let norm = stats[0];
        let clipped = c.max_grad_norm.is_some_and(|max| norm > max as f64 && norm.is_finite());
        Ok(StepStats { lr, grad_norm: norm, clipped })
    }

    /// Parameter `i`'s fp32 master weights (downloaded).
    pub fn master(&self, gpu: &Gpu, i: usize) -> Result<Vec<f32>> {
        Ok(gpu.download(&self.slot(i)?.master)?)
    }

    /// Parameter `i`'s first and second moments (downloaded).
    pub fn moments(&self, gpu: &Gpu, i: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let s = self.slot(i)?;
        Ok((gpu.download(&s.m)?, gpu.download(&s.v)?))
    }

    /// Overwrite parameter `i`'s fp32 master and moments (a resumed run's state); each must
    /// have the parameter's length.
    pub fn load_slot(&mut self, gpu: &Gpu, i: usize, master: &[f32], m: &[f32], v: &[f32]) -> Result<()> {
        let n = self.slot(i)?.master.len();
        if let Some(bad) = [master.len(), m.len(), v.len()].into_iter().find(|&l| l != n) {
            return Err(TrainError::BadInput(format!("parameter {i}: {bad} values of optimizer state for a weight of {n}")));
        }
        let s = &mut self.slots[i];
        gpu.write(&mut s.master, master)?;
        gpu.write(&mut s.m, m)?;
        gpu.write(&mut s.v, v)?;
        Ok(())
    }

    fn slot(&self, i: usize) -> Result<&Slot> {
        self.slots
            .get(i)
            .ok_or_else(|| TrainError::BadInput(format!("parameter {i} of a device AdamW over {}", self.slots.len())))
    }
}
