//! The backward of [`crate::model::forward`], written once: head → final norm → per layer in
//! reverse [MoE → post norm → residual → mixer by layer type → input norm → residual] →
//! embedding. A backend supplies each op's backward from the activations its forward saved
//! ([`BackwardOps`]): the CPU training backend (`train::network`) and the device one
//! (`train::device`).

use super::backend::{Layer, Mixer, Site, Stack, WeightTypes};

/// The backward of each [`crate::model::backend::Backend`] op. `Grad` is a gradient w.r.t.
/// activations; weight gradients are accumulated by the backend. Every op reads what the
/// forward saved at that site.
pub trait BackwardOps {
    type W: WeightTypes;
    type Grad;
    type Error;

    /// Gradient w.r.t. the final-normed rows, from the loss gradient the backend holds.
    fn head_backward(
        &mut self,
        w: &<Self::W as WeightTypes>::Head,
    ) -> Result<Self::Grad, Self::Error>;
    /// Gradient w.r.t. the residual at `site` through its RMSNorm1p (not the residual path).
    fn norm_backward(
        &mut self,
        site: Site,
        w: &<Self::W as WeightTypes>::Norm,
        dy: &Self::Grad,
    ) -> Result<Self::Grad, Self::Error>;
    fn attention_backward(
        &mut self,
        layer: usize,
        w: &<Self::W as WeightTypes>::Attention,
        dy: &Self::Grad,
    ) -> Result<Self::Grad, Self::Error>;
    fn gdn_backward(
        &mut self,
        layer: usize,
        w: &<Self::W as WeightTypes>::Gdn,
        dy: &Self::Grad,
    ) -> Result<Self::Grad, Self::Error>;
    fn moe_backward(
        &mut self,
        layer: usize,
        w: &<Self::W as WeightTypes>::Moe,
        dy: &Self::Grad,
    ) -> Result<Self::Grad, Self::Error>;
    /// `acc += g` (the residual path).
    fn accumulate(&mut self, acc: &mut Self::Grad, g: Self::Grad) -> Result<(), Self::Error>;
    /// Scatter the gradient of the embedded rows into the embedding.
    fn embed_backward(
        &mut self,
        w: &<Self::W as WeightTypes>::Embed,
        dx: Self::Grad,
    ) -> Result<(), Self::Error>;
    /// Called before layer `layer`'s backward: a backend that kept only the layer's input
    /// recomputes its activations here (through [`crate::model::forward::layer_forward`]).
    fn prepare_layer(&mut self, layer: usize, w: &Layer<Self::W>) -> Result<(), Self::Error>;
}

/// The whole backward over backend `b`, after a forward that saved what `b` needs.
pub fn backward<B: BackwardOps>(b: &mut B, w: &Stack<B::W>) -> Result<(), B::Error> {
    let dnormed = b.head_backward(&w.head)?;
    let mut dx = b.norm_backward(Site::Final, &w.norm, &dnormed)?;
    for (li, layer) in w.layers.iter().enumerate().rev() {
        b.prepare_layer(li, layer)?;
        dx = layer_backward(b, li, layer, dx)?;
    }
    b.embed_backward(&w.embed, dx)
}

/// Layer `li` in reverse: `dout` is the gradient w.r.t. the layer's output, the result the one
/// w.r.t. its input.
fn layer_backward<B: BackwardOps>(
    b: &mut B,
    li: usize,
    layer: &Layer<B::W>,
    dout: B::Grad,
) -> Result<B::Grad, B::Error> {
    let du = b.moe_backward(li, &layer.moe, &dout)?;
    let dn = b.norm_backward(Site::Post(li), &layer.post_norm, &du)?;
    let mut dmid = dout;
    b.accumulate(&mut dmid, dn)?;
    let du = match &layer.mixer {
        Mixer::Attention(a) => b.attention_backward(li, a, &dmid)?,
        Mixer::Gdn(g) => b.gdn_backward(li, g, &dmid)?,
    };
    let dn = b.norm_backward(Site::Input(li), &layer.input_norm, &du)?;
    b.accumulate(&mut dmid, dn)?;
    Ok(dmid)
}
