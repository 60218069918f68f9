//! The Qwen3.5-MoE forward, written once for every backend: embedding → per layer [add +
//! RMSNorm1p → mixer by layer type (gated attention | Gated DeltaNet) → add + RMSNorm1p → MoE
//! with shared expert] → add + final RMSNorm1p → head. The residual add of a block's output
//! happens in the next `add_norm`, so a backend can fuse the two.

use super::backend::{Backend, Layer, Mixer, Site, Stack};

/// The whole decoder over backend `b`.
pub fn forward<B: Backend>(b: &mut B, w: &Stack<B::W>) -> Result<B::Out, B::Error> {
    let mut x = b.embed(&w.embed)?;
    let mut pending = None;
    for (li, layer) in w.layers.iter().enumerate() {
        pending = Some(layer_forward(b, li, layer, &mut x, pending)?);
    }
    let u = b.add_norm(Site::Final, &mut x, pending, &w.norm)?;
    b.head(u, &w.head)
}

/// Layer `li` on the residual `x` (with the previous block's output `pending` still to add);
/// returns the MoE output, to be added by the next `add_norm`. Training recomputation runs a
/// single layer through this too.
pub fn layer_forward<B: Backend>(
    b: &mut B,
    li: usize,
    layer: &Layer<B::W>,
    x: &mut B::Hidden,
    pending: Option<B::Delta>,
) -> Result<B::Delta, B::Error> {
    let u = b.add_norm(Site::Input(li), x, pending, &layer.input_norm)?;
    let d = match &layer.mixer {
        Mixer::Attention(a) => b.attention(li, a, u)?,
        Mixer::Gdn(g) => b.gdn(li, g, u)?,
    };
    let u = b.add_norm(Site::Post(li), x, Some(d), &layer.post_norm)?;
    b.moe(li, &layer.moe, u)
}
