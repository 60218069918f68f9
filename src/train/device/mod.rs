//! The training backend on a device (`tensor::cuda::Gpu`: a real GPU or the emulated one):
//! [`DeviceTrainModel`] trains the very weights the engine serves — a [`CudaModel`]'s
//! `Stack<CudaWeights<A>>`, owned, one copy — and keeps fp32 gradient buffers of the same Stack
//! shape (`CudaModel::<f32>::zeros`). Its forward is the one layer sequence of
//! [`crate::model::forward`] run by a [`record::DeviceRecorder`] whose ops run the inference
//! kernels and keep their activations on the device ([`DeviceTape`]); its backward is the one
//! reverse of [`crate::model::backward`] run by [`backprop::DeviceBackprop`] over the backward
//! kernels (`tensor::cuda::backward`). Per block: [`attention`], [`gdn`], [`moe`] (forward with
//! saved activations + backward), [`proj`] (input projections' backward), [`seq`] (the
//! sequence's index arrays), [`grads`] (names and the CPU trainer's layout), [`update`] (the
//! `DeviceAdamW` step rewriting the serving weights in place), [`checkpoint`] (masters and AdamW
//! state in the CPU trainer's checkpoint format, and resuming from it), [`lora`] (LoRA: adapter
//! gradients instead of dense ones, the merged `W₀ + s·B·A` written into the serving weights).
//! With [`TapeOptions::recompute`] (the CPU trainer's option, same meaning) the tape keeps only
//! each layer's input and the backward re-runs that layer's forward (its recorded routing
//! replayed, the same kernels) right before the layer's backward, then drops it.
//! The same numbers as the CPU trainer in the f32 build: `tests/train_device_grads.rs`;
//! recomputation against the full tape: `tests/train_device_recompute.rs`.

mod attention;
mod backprop;
mod checkpoint;
mod gdn;
mod grads;
mod lora;
mod moe;
mod proj;
mod record;
mod seq;
mod trainer;
mod update;

pub use grads::NamedGrad;
pub use lora::DeviceLora;
pub use trainer::DeviceTrainer;

use super::error::{Result, TrainError};
use super::network::{check_sequence, TapeOptions};
use crate::model::backend::cuda::CudaModel;
use crate::model::config::ModelConfig;
use crate::tensor::cuda::backward::{token_loss, LossRows, TokenObjective};
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use std::path::Path;

/// A layer's mixer activations.
enum MixerSaved<A: Act> {
    Attention(attention::AttnSaved<A>),
    Gdn(gdn::GdnSaved<A>),
}

/// A layer's activations beyond its input: the stream after the mixer, the mixer's and the
/// MoE's activations (what recomputation drops in the forward and rebuilds for the backward).
struct LayerSaved<A: Act> {
    mid: DeviceBuffer<A>,
    mixer: MixerSaved<A>,
    moe: moe::MoeSaved<A>,
}

/// What one layer's backward reads: its input stream and, unless recomputation is on, the
/// rest of its activations.
struct LayerTape<A: Act> {
    input: DeviceBuffer<A>,
    saved: Option<LayerSaved<A>>,
}

/// Everything the device backward needs from one training forward of one sequence, on the
/// device; the logits stay there too.
pub struct DeviceTape<A: Act> {
    ids: Vec<u32>,
    seq: seq::SeqIndex,
    layers: Vec<LayerTape<A>>,
    /// The stream after the last layer and the final-normed rows `[t, hidden]`.
    last: DeviceBuffer<A>,
    normed: DeviceBuffer<A>,
    /// Logits `[t, vocab]` (fp32).
    pub logits: DeviceBuffer<f32>,
    /// Chosen experts per layer `[t · top_k]` (the routing record of this forward).
    pub experts: Vec<Vec<u32>>,
}

impl<A: Act> DeviceTape<A> {
    /// The sequence's token ids.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

/// The serving weights on a device and their fp32 gradients — with LoRA, the adapters and
/// only the vector-sized parameters' gradient buffers (every matrix's is empty).
pub struct DeviceTrainModel<A: Act> {
    model: CudaModel<A>,
    grads: CudaModel<f32>,
    lora: Option<DeviceLora<A>>,
}

/// The training side of a [`DeviceTrainModel`] while its weights serve an engine.
pub(crate) struct TrainSide<A: Act> {
    grads: CudaModel<f32>,
    lora: Option<DeviceLora<A>>,
}

impl<A: Act> DeviceTrainModel<A> {
    /// Train `model`'s weights in place (no copy); the gradients start at zero.
    pub fn new(gpu: &Gpu, model: CudaModel<A>) -> Result<Self> {
        let grads = CudaModel::<f32>::zeros(gpu, model.cfg.clone())?;
        Ok(DeviceTrainModel { model, grads, lora: None })
    }

    /// LoRA training of `model`'s weights in place: adapters of `cfg` (initialised as the CPU
    /// `Lora`, the targets matched against the CPU trainer's names under `prefix`, the
    /// checkpoint's decoder prefix `Checkpoint::full_name("")`), their frozen bases copied on the
    /// device, and no dense gradient buffer of any matrix.
    pub fn with_lora(gpu: &Gpu, model: CudaModel<A>, cfg: crate::train::lora::LoraConfig, prefix: &str) -> Result<Self> {
        let c = model.cfg.clone();
        let grads = CudaModel::<f32>::zeros_where(gpu, c.clone(), &lora::keeps_gradient)?;
        let params: Vec<_> = grads::buffers(&c, grads.stack()).into_iter().map(|(p, _)| p).collect();
        let served = update::served(model.stack(), c.tie_word_embeddings);
        let lora = DeviceLora::new(gpu, cfg, &c, &params, &served, prefix)?;
        drop(served);
        Ok(DeviceTrainModel { model, grads, lora: Some(lora) })
    }

    /// The LoRA adapters (`None`: every parameter trains).
    pub fn lora(&self) -> Option<&DeviceLora<A>> {
        self.lora.as_ref()
    }

    /// Upload a Hugging Face folder's weights (as `CudaModel::load`) to train them.
    pub fn load(gpu: &Gpu, dir: &Path) -> Result<Self> {
        Self::new(gpu, CudaModel::load(gpu, dir)?)
    }

    pub fn cfg(&self) -> &ModelConfig {
        &self.model.cfg
    }

    /// The weights (what the engine serves).
    pub fn model(&self) -> &CudaModel<A> {
        &self.model
    }

    /// Give the weights back (e.g. to an engine).
    pub fn into_model(self) -> CudaModel<A> {
        self.model
    }

    /// Split into the weights (to serve an engine) and the gradients (and adapters), to be put
    /// back together by [`Self::reassemble`].
    pub(crate) fn lend(self) -> (CudaModel<A>, TrainSide<A>) {
        (self.model, TrainSide { grads: self.grads, lora: self.lora })
    }

    pub(crate) fn reassemble(model: CudaModel<A>, side: TrainSide<A>) -> Self {
        DeviceTrainModel { model, grads: side.grads, lora: side.lora }
    }

    /// Reset every gradient to zero (with LoRA: the adapters').
    pub fn zero_grads(&mut self, gpu: &Gpu) -> Result<()> {
        match &mut self.lora {
            Some(lora) => lora.zero_grads(gpu),
            None => {
                self.grads = CudaModel::<f32>::zeros(gpu, self.model.cfg.clone())?;
                Ok(())
            }
        }
    }

    /// Training forward of one sequence (positions `0..t`, a fresh state) keeping every
    /// activation. `forced`: per layer `[t · top_k]` experts to replay instead of the router's
    /// top-k.
    pub fn forward(&self, gpu: &Gpu, ids: &[u32], forced: Option<&[Vec<u32>]>) -> Result<DeviceTape<A>> {
        self.forward_with(gpu, ids, forced, TapeOptions::default())
    }

    /// [`Self::forward`] under `opts`: with `recompute` the tape keeps only each layer's input
    /// (the backward recomputes the rest, one layer at a time).
    pub fn forward_with(
        &self,
        gpu: &Gpu,
        ids: &[u32],
        forced: Option<&[Vec<u32>]>,
        opts: TapeOptions,
    ) -> Result<DeviceTape<A>> {
        let c = &self.model.cfg;
        check_sequence(c, ids, forced)?;
        let seq = seq::SeqIndex::new(gpu, ids, c.vocab_size)?;
        let mut rec = record::DeviceRecorder::new(gpu, c, &seq, forced, !opts.recompute);
        let logits = crate::model::forward::forward(&mut rec, self.model.stack())?;
        let rec = rec.finish()?;
        Ok(DeviceTape {
            ids: ids.to_vec(),
            seq,
            layers: rec.layers,
            last: rec.last,
            normed: rec.normed,
            logits,
            experts: rec.experts,
        })
    }

    /// Backward from `dlogits [t, vocab]` (the loss gradient w.r.t. the tape's logits, in the
    /// storage type: what `tensor::cuda::backward::token_loss` writes), accumulating into the
    /// gradient buffers.
    pub fn backward(&mut self, gpu: &Gpu, tape: &DeviceTape<A>, dlogits: &DeviceBuffer<A>) -> Result<()> {
        let c = &self.model.cfg;
        let want = tape.ids.len() * c.vocab_size;
        if dlogits.len() < want || tape.layers.len() != c.num_hidden_layers {
            return Err(TrainError::BadInput(format!(
                "dlogits has {} values for a tape of {} tokens (expected {want}) and {} layers",
                dlogits.len(),
                tape.ids.len(),
                tape.layers.len()
            )));
        }
        let (grads, lora) = (self.grads.stack_mut(), self.lora.as_mut());
        let mut bp = backprop::DeviceBackprop { gpu, c, tape, dlogits, grads, lora, recomputed: None };
        crate::model::backward::backward(&mut bp, self.model.stack())
    }

    /// Mean next-token NLL of `ids` (computed on the device from logits that stay there) and
    /// its gradients, accumulated into the gradient buffers (what `execcritic grads` reports).
    pub fn nll_gradients(&mut self, gpu: &Gpu, ids: &[u32], opts: TapeOptions) -> Result<f64> {
        let tape = self.forward_with(gpu, ids, None, opts)?;
        let v = self.model.cfg.vocab_size;
        let rows = LossRows::sft(gpu, ids, &vec![true; ids.len()], v)?;
        let t = ids.len();
        let (mut loss, mut logp, mut dlogits) = (gpu.zeros::<f32>(t)?, gpu.zeros::<f32>(t)?, gpu.zeros::<A>(t * v)?);
        let denom = (t - 1) as f64;
        token_loss(gpu, &tape.logits, v, &rows, TokenObjective::Sft, denom, &mut loss, &mut logp, &mut dlogits)?;
        self.backward(gpu, &tape, &dlogits)?;
        Ok(gpu.download(&loss)?.iter().map(|&x| x as f64).sum())
    }

    /// Every parameter's gradient, downloaded in the CPU trainer's layout and names (`prefix`:
    /// the checkpoint's decoder prefix, `Checkpoint::full_name("")`; fused experts split per
    /// expert; a tied head's gradient added to the embedding's).
    /// With LoRA there are no dense gradients: the adapters' are [`DeviceLora::gradients`].
    pub fn gradients(&self, gpu: &Gpu, prefix: &str) -> Result<Vec<NamedGrad>> {
        if self.lora.is_some() {
            return Err(TrainError::BadInput("LoRA training keeps no dense gradients (see the adapters' gradients)".into()));
        }
        Ok(grads::download(gpu, &self.model.cfg, self.grads.stack(), prefix, true)?)
    }
}

impl<A: Act> DeviceTrainModel<A> {
    /// The fp32 masters of `opt` (from [`Self::optimizer`]) in the CPU trainer's layout and
    /// names (as [`Self::gradients`]): what a checkpoint of a device run holds.
    /// With LoRA: the merged serving weights, as fp32 (`opt` holds the adapters' masters).
    pub fn masters(&self, gpu: &Gpu, opt: &crate::train::device_optim::DeviceAdamW, prefix: &str) -> Result<Vec<NamedGrad>> {
        if self.lora.is_some() {
            let c = &self.model.cfg;
            let served = update::served(self.model.stack(), c.tie_word_embeddings);
            let tensors = grads::buffers(c, self.grads.stack())
                .into_iter()
                .zip(served)
                .map(|((p, _), w)| Ok((p, w.download(gpu)?)))
                .collect::<Result<Vec<_>>>()?;
            return Ok(grads::named(c, tensors, prefix));
        }
        let tensors = grads::buffers(&self.model.cfg, self.grads.stack())
            .into_iter()
            .enumerate()
            .map(|(i, (p, _))| Ok((p, opt.master(gpu, i)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(grads::named(&self.model.cfg, tensors, prefix))
    }
}

impl DeviceTrainModel<f32> {
    /// The serving weights of the f32 build, downloaded in the CPU trainer's layout and names
    /// (as [`Self::gradients`]).
    pub fn weights(&self, gpu: &Gpu, prefix: &str) -> Result<Vec<NamedGrad>> {
        Ok(grads::download(gpu, &self.model.cfg, self.model.stack(), prefix, false)?)
    }
}
