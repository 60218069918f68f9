//! The seam between the Qwen3.5-MoE layer structure and the machines that run it.
//!
//! The layer sequence (embedding → per layer [add + RMSNorm1p → GDN | gated attention → add +
//! RMSNorm1p → MoE with shared expert] → add + final norm → head) is written once, in
//! [`crate::model::forward`], over the layer-level operations of [`Backend`]; its reverse is
//! written once in [`crate::model::backward`] over [`crate::model::backward::BackwardOps`].
//! Each backend brings its own weight handles ([`WeightTypes`]) held in one [`Stack`] shape and
//! built by one loading skeleton ([`Stack::load`]), and implements the ops with its own kernels:
//!
//! - [`cpu`]: the inference forward on the host (f32 or bf16 weights), over `model::{attention,
//!   gdn, moe}` and a batch of sequences each with its own [`crate::model::SeqState`];
//! - [`cuda`]: the forward on a [`crate::tensor::cuda::Gpu`] (a real GPU or the emulated device),
//!   calling the launch wrappers of `tensor::cuda::ops`;
//! - `train::network`: the training forward that records a tape, and the CPU backward.
//!
//! The ops are coarse on purpose (a whole mixer, a whole MoE, residual add fused with the next
//! norm): a backend fuses freely inside an op while the structure stays in one place.

pub mod cpu;
pub mod cuda;
pub mod schema;

use super::config::{LayerType, ModelConfig};

/// Where a residual add + RMSNorm1p sits in the layer sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// Before layer `i`'s mixer; the residual then holds layer `i`'s input.
    Input(usize),
    /// Before layer `i`'s MoE; the residual then holds the stream after the mixer.
    Post(usize),
    /// The final norm before the head; the residual then holds the last layer's output.
    Final,
}

/// The weight handle types of one backend.
pub trait WeightTypes {
    type Embed;
    type Norm;
    type Attention;
    type Gdn;
    type Moe;
    type Head;
}

/// A layer's token mixer, chosen by the config's layer type.
pub enum Mixer<W: WeightTypes> {
    Attention(W::Attention),
    Gdn(W::Gdn),
}

/// One decoder layer's weights.
pub struct Layer<W: WeightTypes> {
    pub input_norm: W::Norm,
    pub post_norm: W::Norm,
    pub mixer: Mixer<W>,
    pub moe: W::Moe,
}

/// The whole decoder's weights in one backend's handles.
pub struct Stack<W: WeightTypes> {
    pub embed: W::Embed,
    pub layers: Vec<Layer<W>>,
    pub norm: W::Norm,
    /// The output head (the embedding's storage or handle when tied).
    pub head: W::Head,
}

/// How one backend builds its handles from a checkpoint's tensor names; [`Stack::load`] walks
/// the layer structure and names once for every backend.
pub trait StackLoader<W: WeightTypes> {
    type Error;
    fn embed(&mut self, name: &str, shape: [usize; 2]) -> Result<W::Embed, Self::Error>;
    fn norm(&mut self, name: &str, len: usize) -> Result<W::Norm, Self::Error>;
    /// `prefix` ends in `self_attn.`.
    fn attention(&mut self, prefix: &str, c: &ModelConfig) -> Result<W::Attention, Self::Error>;
    /// `prefix` ends in `linear_attn.`.
    fn gdn(&mut self, prefix: &str, c: &ModelConfig) -> Result<W::Gdn, Self::Error>;
    /// `prefix` ends in `mlp.`.
    fn moe(&mut self, prefix: &str, c: &ModelConfig) -> Result<W::Moe, Self::Error>;
    /// The untied head `lm_head.weight`.
    fn head(&mut self, name: &str, shape: [usize; 2]) -> Result<W::Head, Self::Error>;
    /// The head tied to the embedding.
    fn tied_head(&mut self, embed: &W::Embed) -> Result<W::Head, Self::Error>;
}

impl<W: WeightTypes> Stack<W> {
    /// Load every layer of `c` through `ld` (checkpoint names without the `model.` prefix).
    pub fn load<L: StackLoader<W>>(c: &ModelConfig, ld: &mut L) -> Result<Self, L::Error> {
        let (v, h) = (c.vocab_size, c.hidden_size);
        let embed = ld.embed("embed_tokens.weight", [v, h])?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for (i, lt) in c.layer_types.iter().enumerate() {
            let p = format!("layers.{i}.");
            let input_norm = ld.norm(&format!("{p}input_layernorm.weight"), h)?;
            let mixer = match lt {
                LayerType::Full => Mixer::Attention(ld.attention(&format!("{p}self_attn."), c)?),
                LayerType::Linear => Mixer::Gdn(ld.gdn(&format!("{p}linear_attn."), c)?),
            };
            let post_norm = ld.norm(&format!("{p}post_attention_layernorm.weight"), h)?;
            let moe = ld.moe(&format!("{p}mlp."), c)?;
            layers.push(Layer {
                input_norm,
                post_norm,
                mixer,
                moe,
            });
        }
        let norm = ld.norm("norm.weight", h)?;
        let head = if c.tie_word_embeddings {
            ld.tied_head(&embed)?
        } else {
            ld.head("lm_head.weight", [v, h])?
        };
        Ok(Stack {
            embed,
            layers,
            norm,
            head,
        })
    }
}

/// The layer-level operations one machine implements. `Hidden` is the residual stream, `Normed`
/// a normed copy fed to a block, `Delta` a block's output still to be added to the residual
/// (so a backend may fuse the add into the next norm).
pub trait Backend {
    type W: WeightTypes;
    type Hidden;
    type Normed;
    type Delta;
    type Out;
    type Error;

    /// The embedded tokens of the step.
    fn embed(&mut self, w: &<Self::W as WeightTypes>::Embed) -> Result<Self::Hidden, Self::Error>;
    /// Add `delta` (when given) to the residual `x`, then return RMSNorm1p(x) with weight `w`.
    fn add_norm(
        &mut self,
        site: Site,
        x: &mut Self::Hidden,
        delta: Option<Self::Delta>,
        w: &<Self::W as WeightTypes>::Norm,
    ) -> Result<Self::Normed, Self::Error>;
    /// Layer `layer`'s gated full attention (appending to its KV cache where there is one).
    fn attention(
        &mut self,
        layer: usize,
        w: &<Self::W as WeightTypes>::Attention,
        u: Self::Normed,
    ) -> Result<Self::Delta, Self::Error>;
    /// Layer `layer`'s Gated DeltaNet (advancing its conv and recurrent state where there is one).
    fn gdn(
        &mut self,
        layer: usize,
        w: &<Self::W as WeightTypes>::Gdn,
        u: Self::Normed,
    ) -> Result<Self::Delta, Self::Error>;
    /// Layer `layer`'s routed experts plus the gated shared expert (recording or replaying the
    /// routing where the step asks for it).
    fn moe(
        &mut self,
        layer: usize,
        w: &<Self::W as WeightTypes>::Moe,
        u: Self::Normed,
    ) -> Result<Self::Delta, Self::Error>;
    /// The output head over the final-normed rows.
    fn head(
        &mut self,
        u: Self::Normed,
        w: &<Self::W as WeightTypes>::Head,
    ) -> Result<Self::Out, Self::Error>;
}
