//! Device checkpoints: the fp32 masters and the AdamW state of a [`DeviceAdamW`] in the CPU
//! trainer's checkpoint format (`train::checkpoint`: weights under the CPU trainer's names with
//! fused experts split per expert, the moments in `optimizer.safetensors` under the same names,
//! step and AdamW settings in `trainer_state.json`), so a device run resumes from its own
//! checkpoints and from the CPU trainer's, and the CPU trainer from a device run's.

use super::{grads, DeviceTrainModel};
use crate::model::checkpoint::Checkpoint;
use crate::tensor::cuda::{Act, Gpu};
use crate::train::checkpoint::read_optimizer;
use crate::train::device_optim::DeviceAdamW;
use crate::train::error::Result;
use crate::train::optim::AdamW;
use crate::train::params::{Param, ParamStore};
use std::path::Path;

impl<A: Act> DeviceTrainModel<A> {
    /// `opt`'s fp32 masters and moments (from [`Self::optimizer`]) downloaded in the CPU
    /// trainer's layout and names (`prefix`: the decoder prefix of the source checkpoint): what
    /// `train::checkpoint::save` writes. With LoRA: the merged weights and no optimizer state
    /// (the adapters' state is not saved, as on the CPU: a LoRA run does not resume).
    pub fn host_state(&self, gpu: &Gpu, opt: &DeviceAdamW, prefix: &str) -> Result<(ParamStore, Option<AdamW>)> {
        let c = &self.model.cfg;
        let params = self
            .masters(gpu, opt, prefix)?
            .into_iter()
            .map(|n| Param { name: n.name, shape: n.shape, data: n.data })
            .collect();
        if self.lora().is_some() {
            return Ok((ParamStore { params }, None));
        }
        let (mut m, mut v) = (Vec::new(), Vec::new());
        for (i, (p, _)) in grads::buffers(c, self.grads.stack()).into_iter().enumerate() {
            let (mi, vi) = opt.moments(gpu, i)?;
            m.extend(grads::named(c, vec![(p.clone(), mi)], prefix).into_iter().map(|n| n.data));
            v.extend(grads::named(c, vec![(p, vi)], prefix).into_iter().map(|n| n.data));
        }
        Ok((ParamStore { params }, Some(AdamW { cfg: opt.cfg, m, v, step: opt.step })))
    }

    /// Load the training state of the checkpoint at `dir` into `opt`: the masters (the
    /// checkpoint's weights, read as fp32), the moments, the step and the AdamW settings. A
    /// missing or mis-shaped tensor is an error. The serving weights are not touched: they are
    /// loaded from the same folder (`DeviceTrainer::resume`).
    pub fn load_state(&self, gpu: &Gpu, opt: &mut DeviceAdamW, dir: &Path) -> Result<()> {
        let mut ck = Checkpoint::open(dir)?;
        let prefix = ck.full_name("");
        let c = &self.model.cfg;
        read_optimizer(dir, |f| {
            for (i, (p, _)) in grads::buffers(c, self.grads.stack()).into_iter().enumerate() {
                let master = grads::gather(c, &p, &prefix, |n, s| ck.get_exact(n, s).map(|t| t.data().to_vec()))?;
                let m = grads::gather(c, &p, &prefix, |n, s| f.exp_avg(n, s))?;
                let v = grads::gather(c, &p, &prefix, |n, s| f.exp_avg_sq(n, s))?;
                opt.load_slot(gpu, i, &master, &m, &v)?;
            }
            opt.step = f.step;
            opt.cfg = f.cfg;
            Ok(())
        })
    }
}
