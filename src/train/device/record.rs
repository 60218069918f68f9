//! [`DeviceRecorder`]: the training forward's backend on a device. Each op of
//! `model::backend::Backend` runs the inference kernels (`tensor::cuda::ops`, the GEMMs) over
//! fresh device buffers and keeps on the device what its backward reads (per layer: the input
//! and — unless recomputation is on — the mid-layer stream, the mixer's and the MoE's
//! activations; the last stream and the final-normed rows), then [`DeviceRecorder::finish`]
//! hands it over for the [`super::DeviceTape`]. The backward's recomputation runs one layer
//! through it again ([`DeviceRecorder::recompute_layer`]).

use super::{attention, gdn, moe, LayerSaved, LayerTape, MixerSaved};
use super::seq::SeqIndex;
use crate::model::backend::cuda::{AttnW, CudaWeights, GdnW, MoeW};
use crate::model::backend::{Backend, Site};
use crate::model::forward::layer_forward;
use crate::model::backend::Layer;
use crate::model::config::ModelConfig;
use crate::tensor::cuda::gemm::linear;
use crate::tensor::cuda::ops;
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::train::error::{Result, TrainError};

pub(super) struct DeviceRecorder<'a, A: Act> {
    gpu: &'a Gpu,
    c: &'a ModelConfig,
    seq: &'a SeqIndex,
    forced: Option<&'a [Vec<u32>]>,
    /// Keep every layer's activations (else only each layer's input: recomputation).
    keep: bool,
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
    pub(super) fn new(
        gpu: &'a Gpu,
        c: &'a ModelConfig,
        seq: &'a SeqIndex,
        forced: Option<&'a [Vec<u32>]>,
        keep: bool,
    ) -> Self {
        DeviceRecorder {
            gpu,
            c,
            seq,
            forced,
            keep,
            layers: Vec::with_capacity(c.num_hidden_layers),
            input: None,
            mixer: None,
            mid: None,
            experts: Vec::with_capacity(c.num_hidden_layers),
            last: None,
            normed: None,
        }
    }

    /// What a completed forward kept (the tape without its ids, index arrays and logits).
    pub(super) fn finish(self) -> Result<Recorded<A>> {
        let incomplete = || TrainError::BadInput("the device forward did not reach the head".into());
        Ok(Recorded {
            layers: self.layers,
            last: self.last.ok_or_else(incomplete)?,
            normed: self.normed.ok_or_else(incomplete)?,
            experts: self.experts,
        })
    }

    /// Recomputation: layer `li`'s activations from its saved `input` (the stream after the
    /// previous block's output was added), run through the one layer forward by a keeping
    /// recorder whose `forced` routing is the tape's record.
    pub(super) fn recompute_layer(
        mut self,
        li: usize,
        w: &Layer<CudaWeights<A>>,
        input: &DeviceBuffer<A>,
    ) -> Result<LayerSaved<A>> {
        let mut x = self.gpu.duplicate(input)?;
        layer_forward(&mut self, li, w, &mut x, None)?;
        self.finish_layer(li)
    }

    /// The activations of the one layer this recorder ran.
    fn finish_layer(mut self, li: usize) -> Result<LayerSaved<A>> {
        self.layers
            .pop()
            .and_then(|l| l.saved)
            .ok_or_else(|| TrainError::BadInput(format!("layer {li}: the recomputation kept no activations")))
    }
}

/// What one training forward kept on the device, for its [`super::DeviceTape`].
pub(super) struct Recorded<A: Act> {
    pub layers: Vec<LayerTape<A>>,
    pub last: DeviceBuffer<A>,
    pub normed: DeviceBuffer<A>,
    pub experts: Vec<Vec<u32>>,
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
        match site {
            Site::Input(_) => self.input = Some(gpu.duplicate(x)?),
            Site::Post(_) if self.keep => self.mid = Some(gpu.duplicate(x)?),
            Site::Post(_) => {}
            Site::Final => self.last = Some(gpu.duplicate(x)?),
        }
        Ok(u)
    }

    fn attention(&mut self, _: usize, w: &AttnW<A>, u: DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let (y, s) = attention::forward(self.gpu, self.c, w, self.seq, u)?;
        self.mixer = Some(MixerSaved::Attention(s));
        Ok(y)
    }

    fn gdn(&mut self, _: usize, w: &GdnW<A>, u: DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let (y, s) = gdn::forward(self.gpu, self.c, w, self.seq, u)?;
        self.mixer = Some(MixerSaved::Gdn(s));
        Ok(y)
    }

    fn moe(&mut self, li: usize, w: &MoeW<A>, u: DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        let forced = self.forced.map(|f| f[li].as_slice());
        let (y, moe, chosen) = moe::forward(self.gpu, self.c, w, self.seq.t, u, forced)?;
        self.experts.push(chosen);
        let before_mixer = || TrainError::BadInput(format!("layer {li}: MoE before its mixer"));
        let (input, mixer) = (self.input.take().ok_or_else(before_mixer)?, self.mixer.take().ok_or_else(before_mixer)?);
        let saved = match self.mid.take() {
            Some(mid) if self.keep => Some(LayerSaved { mid, mixer, moe }),
            _ if self.keep => return Err(before_mixer()),
            _ => None,
        };
        self.layers.push(LayerTape { input, saved });
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
