//! The device gradient buffers under their checkpoint names: a `Stack<CudaWeights<f32>>` of the
//! weights' exact shapes (fused experts stay fused `[E, 2I, H]` / `[E, H, I]`), walked in the
//! loading order with the names of `model::backend::schema`, and downloaded in the CPU
//! trainer's layout (`TrainModel`'s `ParamStore`: fused experts split per expert under the
//! per-expert names; a tied head's gradient added to the embedding's).

use crate::model::backend::cuda::CudaWeights;
use crate::model::backend::schema::{AttentionParams, GdnParams, MoeParams, Param};
use crate::model::backend::{Mixer, Stack};
use crate::model::config::ModelConfig;
use crate::tensor::cuda::{DeviceBuffer, Gpu};
use crate::tensor::device::Result;
use std::ops::Range;

type F32 = DeviceBuffer<f32>;

/// One parameter's gradient (or, from `DeviceTrainModel::weights`, its weights) on the host:
/// full name, shape, fp32 values.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedGrad {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

fn param(name: String, shape: &[usize]) -> Param {
    Param { name, shape: shape.to_vec() }
}

/// Every gradient buffer of `g` with its checkpoint tensor (name without the decoder prefix),
/// in the loading order; the head only when it is not tied.
pub(super) fn buffers<'g>(c: &ModelConfig, g: &'g Stack<CudaWeights<f32>>) -> Vec<(Param, &'g F32)> {
    let (v, h) = (c.vocab_size, c.hidden_size);
    let mut out = vec![(param("embed_tokens.weight".into(), &[v, h]), &g.embed)];
    for (i, l) in g.layers.iter().enumerate() {
        let p = format!("layers.{i}.");
        out.push((param(format!("{p}input_layernorm.weight"), &[h]), &l.input_norm));
        match &l.mixer {
            Mixer::Attention(a) => {
                let n = AttentionParams::new(&format!("{p}self_attn."), c);
                out.extend([(n.q_proj, &a.q), (n.k_proj, &a.k), (n.v_proj, &a.v), (n.o_proj, &a.o)]);
                out.extend([(n.q_norm, &a.q_norm), (n.k_norm, &a.k_norm)]);
            }
            Mixer::Gdn(d) => {
                let n = GdnParams::new(&format!("{p}linear_attn."), c);
                out.extend([(n.in_proj_qkv, &d.qkv), (n.in_proj_z, &d.z), (n.in_proj_b, &d.b), (n.in_proj_a, &d.a)]);
                out.extend([(n.conv1d, &d.conv), (n.dt_bias, &d.dt_bias), (n.a_log, &d.a_log)]);
                out.extend([(n.norm, &d.norm), (n.out_proj, &d.out)]);
            }
        }
        out.push((param(format!("{p}post_attention_layernorm.weight"), &[h]), &l.post_norm));
        let (n, m) = (MoeParams::new(&format!("{p}mlp."), c), &l.moe);
        out.extend([(n.router, &m.router), (n.fused_gate_up, &m.gate_up), (n.fused_down, &m.down)]);
        out.extend([(n.shared.gate, &m.s_gate), (n.shared.up, &m.s_up), (n.shared.down, &m.s_down)]);
        out.push((n.shared_gate, &m.s_gate_w));
    }
    out.push((param("norm.weight".into(), &[h]), &g.norm));
    if !c.tie_word_embeddings {
        out.push((param("lm_head.weight".into(), &[v, h]), &g.head));
    }
    out
}

/// Download every buffer of `g` (gradients, or fp32 weights) in the CPU trainer's layout and
/// names: `prefix` (the checkpoint's decoder prefix, `Checkpoint::full_name("")`) before every
/// name but `lm_head.weight`; fused experts split per expert; with `fold_tied_head` a tied
/// head's buffer is added to the embedding's (gradients).
pub(super) fn download(
    gpu: &Gpu,
    c: &ModelConfig,
    g: &Stack<CudaWeights<f32>>,
    prefix: &str,
    fold_tied_head: bool,
) -> Result<Vec<NamedGrad>> {
    let tensors = buffers(c, g)
        .into_iter()
        .map(|(p, buf)| {
            let mut data = gpu.download(buf)?;
            if p.name == "embed_tokens.weight" && c.tie_word_embeddings && fold_tied_head {
                let head = gpu.download(&g.head)?;
                data.iter_mut().zip(head).for_each(|(a, b)| *a += b);
            }
            Ok((p, data))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(named(c, tensors, prefix))
}

/// Host tensors of the loading order (`buffers`' parameters with their values) in the CPU
/// trainer's layout and names (`prefix` as in `download`; fused experts split per expert).
pub(super) fn named(c: &ModelConfig, tensors: Vec<(Param, Vec<f32>)>, prefix: &str) -> Vec<NamedGrad> {
    let mut out = vec![];
    for (p, data) in tensors {
        for (q, range) in parts(c, &p, prefix) {
            out.push(NamedGrad { name: q.name, shape: q.shape, data: data[range].to_vec() });
        }
    }
    out
}

/// The inverse of [`named`]: buffer `p`'s values assembled from the CPU trainer's tensors, each
/// read by `get(full name, shape)` (a fused expert tensor gathered from its per-expert ones).
pub(super) fn gather<E>(
    c: &ModelConfig,
    p: &Param,
    prefix: &str,
    mut get: impl FnMut(&str, &[usize]) -> std::result::Result<Vec<f32>, E>,
) -> std::result::Result<Vec<f32>, E> {
    let mut out = vec![0.0; p.shape.iter().product()];
    for (q, range) in parts(c, p, prefix) {
        let data = get(&q.name, &q.shape)?;
        // `get` checks `q.shape`; a shorter answer would be its bug, not a panic here.
        let n = data.len().min(range.len());
        out[range.start..range.start + n].copy_from_slice(&data[..n]);
    }
    Ok(out)
}

/// The CPU trainer's tensors that make up device buffer `p`: full name (`prefix` before every
/// name but `lm_head.weight`), shape, and the range of the buffer's values each holds — the
/// buffer itself, or per expert its gate and up (`experts.gate_up_proj`) or down projection.
pub(super) fn parts(c: &ModelConfig, p: &Param, prefix: &str) -> Vec<(Param, Range<usize>)> {
    let (h, i) = (c.hidden_size, c.moe_intermediate_size);
    let full = |name: &str| if name == "lm_head.weight" { name.to_string() } else { format!("{prefix}{name}") };
    let len: usize = p.shape.iter().product();
    let Some(moe) = p.name.strip_suffix("experts.gate_up_proj").or(p.name.strip_suffix("experts.down_proj")) else {
        return vec![(param(full(&p.name), &p.shape), 0..len)];
    };
    let n = MoeParams::new(moe, c);
    let gate_up = p.name.ends_with("gate_up_proj");
    let per = if gate_up { 2 * i * h } else { h * i };
    let mut out = vec![];
    for x in 0..len / per {
        let (names, at) = (n.expert(x), x * per);
        if gate_up {
            out.push((param(full(&names.gate.name), &names.gate.shape), at..at + i * h));
            out.push((param(full(&names.up.name), &names.up.shape), at + i * h..at + per));
        } else {
            out.push((param(full(&names.down.name), &names.down.shape), at..at + per));
        }
    }
    out
}
