//! [`DeviceBackprop`]: the backward's backend on a device. Each op of
//! `model::backward::BackwardOps` runs the backward kernels of `tensor::cuda::backward` over
//! what the forward kept on the [`DeviceTape`], accumulating the fp32 weight gradients into a
//! `Stack<CudaWeights<f32>>` of the weights' shapes (the activation gradients are in the storage
//! type `A`, as the forward's activations). A layer the tape kept only the input of is
//! recomputed in `prepare_layer` and dropped when the next layer's backward starts.

use super::lora::{linear_backward, DeviceLora};
use super::record::DeviceRecorder;
use super::{attention, gdn, moe, DeviceTape, LayerSaved, MixerSaved};
use crate::model::backend::cuda::{AttnW, CudaWeights, GdnW, MoeW};
use crate::model::backend::{Layer, Mixer, Site, Stack};
use crate::model::backward::BackwardOps;
use crate::model::config::ModelConfig;
use crate::tensor::cuda::backward as bw;
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::train::error::{Result, TrainError};

pub(super) struct DeviceBackprop<'a, A: Act> {
    pub gpu: &'a Gpu,
    pub c: &'a ModelConfig,
    pub tape: &'a DeviceTape<A>,
    /// The loss gradient w.r.t. the logits `[t, vocab]`.
    pub dlogits: &'a DeviceBuffer<A>,
    /// Where the weight gradients accumulate.
    pub grads: &'a mut Stack<CudaWeights<f32>>,
    /// With LoRA: the adapters, whose gradients replace every dense projection gradient (the
    /// embedding, routed experts and LM head get none).
    pub lora: Option<&'a mut DeviceLora<A>>,
    /// The current layer's recomputed activations (when the tape kept only its input).
    pub recomputed: Option<LayerSaved<A>>,
}

/// Layer `li`'s activations: the recomputed ones, else the tape's.
fn saved<'s, A: Act>(recomputed: &'s Option<LayerSaved<A>>, tape: &'s DeviceTape<A>, li: usize) -> Result<&'s LayerSaved<A>> {
    recomputed
        .as_ref()
        .or(tape.layers[li].saved.as_ref())
        .ok_or_else(|| TrainError::BadInput(format!("layer {li}: neither kept nor recomputed")))
}

/// The error of a layer whose saved mixer is not the weights' (never from a tape of this model).
fn mismatch(li: usize) -> TrainError {
    TrainError::BadInput(format!("layer {li}: the tape's mixer differs from the model's"))
}

impl<A: Act> DeviceBackprop<'_, A> {
    fn rows(&self) -> usize {
        self.tape.seq.t
    }
}

impl<A: Act> BackwardOps for DeviceBackprop<'_, A> {
    type W = CudaWeights<A>;
    type Grad = DeviceBuffer<A>;
    type Error = TrainError;

    fn head_backward(&mut self, w: &DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let (c, t) = (self.c, self.rows());
        let mut dx = self.gpu.zeros::<A>(t * c.hidden_size)?;
        let (normed, dl) = (&self.tape.normed, self.dlogits);
        let (lora, dw) = (self.lora.as_deref_mut(), &mut self.grads.head);
        linear_backward(self.gpu, lora, "lm_head.weight", dl, normed, (t, c.hidden_size, c.vocab_size), w, &mut dx, false, dw)?;
        Ok(dx)
    }

    fn norm_backward(&mut self, site: Site, w: &DeviceBuffer<A>, dy: &DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let (c, t, tape) = (self.c, self.rows(), self.tape);
        let (x, dw) = match site {
            Site::Final => (&tape.last, &mut self.grads.norm),
            Site::Post(li) => (&saved(&self.recomputed, tape, li)?.mid, &mut self.grads.layers[li].post_norm),
            Site::Input(li) => (&tape.layers[li].input, &mut self.grads.layers[li].input_norm),
        };
        let mut dx = self.gpu.zeros::<A>(t * c.hidden_size)?;
        bw::rms_norm_1p_backward(self.gpu, x, w, dy, &mut dx, dw, t, c.hidden_size, c.rms_norm_eps)?;
        Ok(dx)
    }

    fn attention_backward(&mut self, li: usize, w: &AttnW<A>, dy: &DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let mixer = &saved(&self.recomputed, self.tape, li)?.mixer;
        let (MixerSaved::Attention(s), Mixer::Attention(g)) = (mixer, &mut self.grads.layers[li].mixer) else {
            return Err(mismatch(li));
        };
        attention::backward(self.gpu, self.c, w, &self.tape.seq, s, dy, g, (li, self.lora.as_deref_mut()))
    }

    fn gdn_backward(&mut self, li: usize, w: &GdnW<A>, dy: &DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let mixer = &saved(&self.recomputed, self.tape, li)?.mixer;
        let (MixerSaved::Gdn(s), Mixer::Gdn(g)) = (mixer, &mut self.grads.layers[li].mixer) else {
            return Err(mismatch(li));
        };
        gdn::backward(self.gpu, self.c, w, &self.tape.seq, s, dy, g, (li, self.lora.as_deref_mut()))
    }

    fn moe_backward(&mut self, li: usize, w: &MoeW<A>, dy: &DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let (t, s) = (self.rows(), &saved(&self.recomputed, self.tape, li)?.moe);
        let g = &mut self.grads.layers[li].moe;
        moe::backward(self.gpu, self.c, w, t, s, dy, g, (li, self.lora.as_deref_mut()))
    }

    fn accumulate(&mut self, acc: &mut DeviceBuffer<A>, g: DeviceBuffer<A>) -> Result<()> {
        let n = self.rows() * self.c.hidden_size;
        Ok(bw::residual_grad_add(self.gpu, acc, &g, n)?)
    }

    fn embed_backward(&mut self, _: &DeviceBuffer<A>, dx: DeviceBuffer<A>) -> Result<()> {
        if self.lora.is_some() {
            return Ok(()); // a frozen embedding
        }
        let c = self.c;
        let groups = &self.tape.seq.groups;
        Ok(bw::embedding_backward(self.gpu, &dx, groups, &mut self.grads.embed, c.vocab_size, c.hidden_size)?)
    }

    fn prepare_layer(&mut self, li: usize, w: &Layer<CudaWeights<A>>) -> Result<()> {
        // The previous layer's recomputed activations go first: one layer's at a time.
        self.recomputed = None;
        let (tape, lt) = (self.tape, &self.tape.layers[li]);
        if lt.saved.is_none() {
            let rec = DeviceRecorder::new(self.gpu, self.c, &tape.seq, Some(&tape.experts), true);
            self.recomputed = Some(rec.recompute_layer(li, w, &lt.input)?);
        }
        Ok(())
    }
}
