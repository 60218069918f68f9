//! [`DeviceRecorder`]: the training forward's backend on a device. Each op of
//! `model::backend::Backend` runs the inference kernels (`tensor::cuda::ops`, the GEMMs) over
//! fresh device buffers and keeps on the device what its backward reads (per layer: the input,
//! the mid-layer stream, the mixer's and the MoE's activations; the last stream and the
//! final-normed rows), then [`DeviceRecorder::finish`] hands it over as a [`DeviceTape`].

use super::{attention, gdn, moe, DeviceTape, LayerTape, MixerSaved};
use super::seq::SeqIndex;
use crate::model::backend::cuda::{AttnW, CudaWeights, GdnW, MoeW};
use crate::model::backend::{Backend, Site};
use crate::model::config::ModelConfig;
use crate::tensor::cuda::gemm::linear;
use crate::tensor::cuda::ops;
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::train::error::{Result, TrainError};

pub(super) struct DeviceRecorder<'a, A: Act> {
    gpu: &'a Gpu,
    c: &'a ModelConfig,
    seq: SeqIndex,
    forced: Option<&'a [Vec<u32>]>,
    layers: Vec<LayerTape<A>>,
    /// The current layer's pieces until its MoE completes it.
    input: Option<DeviceBuffer<A>>,
    mixer: Option<MixerSaved<A>>,
    mid: Option<DeviceBuffer<A>>,
    experts: Vec<Vec<u32>>,
    last: Option<DeviceBuffer<A>>,
    normed: Option<DeviceBuffer<A>>,
}

impl<'a, A: Act> DeviceRecorder<'a, A> {
    pub(super) fn new(gpu: &'a Gpu, c: &'a ModelConfig, seq: SeqIndex, forced: Option<&'a [Vec<u32>]>) -> Self {
        DeviceRecorder {
            gpu,
            c,
            seq,
            forced,
            layers: Vec::with_capacity(c.num_hidden_layers),
            input: None,
            mixer: None,
            mid: None,
            experts: Vec::with_capacity(c.num_hidden_layers),
            last: None,
            normed: None,
        }
    }

    /// The tape of a completed forward with its logits `[t, vocab]`.
    pub(super) fn finish(self, ids: &[u32], logits: DeviceBuffer<f32>) -> Result<DeviceTape<A>> {
        let incomplete = || TrainError::BadInput("the device forward did not reach the head".into());
        Ok(DeviceTape {
            ids: ids.to_vec(),
            seq: self.seq,
            layers: self.layers,
            last: self.last.ok_or_else(incomplete)?,
            normed: self.normed.ok_or_else(incomplete)?,
            logits,
            experts: self.experts,
        })
    }
}

impl<A: Act> Backend for DeviceRecorder<'_, A> {
    type W = CudaWeights<A>;
    type Hidden = DeviceBuffer<A>;
    type Normed = DeviceBuffer<A>;
    type Delta = DeviceBuffer<A>;
    /// Logits `[t, vocab]` (fp32, on the device).
    type Out = DeviceBuffer<f32>;
    type Error = TrainError;

    fn embed(&mut self, w: &DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let (c, t) = (self.c, self.seq.t);
        let mut x = self.gpu.zeros::<A>(t * c.hidden_size)?;
        ops::embedding(self.gpu, w, c.vocab_size, c.hidden_size, &self.seq.ids, t, &mut x)?;
        Ok(x)
    }

    fn add_norm(
        &mut self,
        site: Site,
        x: &mut DeviceBuffer<A>,
        delta: Option<DeviceBuffer<A>>,
        w: &DeviceBuffer<A>,
    ) -> Result<DeviceBuffer<A>> {
        let (gpu, c, t) = (self.gpu, self.c, self.seq.t);
        let mut u = gpu.zeros::<A>(t * c.hidden_size)?;
        ops::add_rms_norm_1p(gpu, x, delta.as_ref(), w, &mut u, t, c.hidden_size, c.rms_norm_eps)?;
        let kept = Some(gpu.duplicate(x)?);
        match site {
            Site::Input(_) => self.input = kept,
            Site::Post(_) => self.mid = kept,
            Site::Final => self.last = kept,
        }
        Ok(u)
    }

    fn attention(&mut self, _: usize, w: &AttnW<A>, u: DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let (y, s) = attention::forward(self.gpu, self.c, w, &self.seq, u)?;
        self.mixer = Some(MixerSaved::Attention(s));
        Ok(y)
    }

    fn gdn(&mut self, _: usize, w: &GdnW<A>, u: DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let (y, s) = gdn::forward(self.gpu, self.c, w, &self.seq, u)?;
        self.mixer = Some(MixerSaved::Gdn(s));
        Ok(y)
    }

    fn moe(&mut self, li: usize, w: &MoeW<A>, u: DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let forced = self.forced.map(|f| f[li].as_slice());
        let (y, moe, chosen) = moe::forward(self.gpu, self.c, w, self.seq.t, u, forced)?;
        self.experts.push(chosen);
        let (Some(input), Some(mixer), Some(mid)) = (self.input.take(), self.mixer.take(), self.mid.take()) else {
            return Err(TrainError::BadInput(format!("layer {li}: MoE before its mixer")));
        };
        self.layers.push(LayerTape { input, mid, mixer, moe });
        Ok(y)
    }

    fn head(&mut self, u: DeviceBuffer<A>, w: &DeviceBuffer<A>) -> Result<DeviceBuffer<f32>> {
        let (c, t) = (self.c, self.seq.t);
        let mut logits = self.gpu.zeros::<f32>(t * c.vocab_size)?;
        linear(self.gpu, &u, t, c.hidden_size, w, c.vocab_size, &mut logits)?;
        self.normed = Some(u);
        Ok(logits)
    }
}
