//! Gated full attention on a device, for training: the forward of
//! `model::backend::cuda::CudaStep::attention` (the same inference kernels) that keeps what its
//! backward reads, and that backward over `tensor::cuda::backward` (output projection, sigmoid
//! gate, flash-style GQA attention backward, inverse RoPE, q/k norms, q/gate merge, input
//! projections). One sequence from position 0, its keys and values in a one-block KV pool.

use super::lora::{linear_backward, DeviceLora};
use super::seq::SeqIndex;
use crate::model::backend::schema::AttentionParams;
use crate::model::backend::cuda::AttnW;
use crate::model::config::ModelConfig;
use crate::tensor::cuda::backward as bw;
use crate::tensor::cuda::gemm::linear;
use crate::tensor::cuda::ops::{self, BlockTable, KvIndex, KvPool};
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::tensor::device::Result;


/// What the attention backward reads, per layer.
pub(super) struct AttnSaved<A: Act> {
    /// The normed input rows `[t, hidden]`.
    u: DeviceBuffer<A>,
    /// q and k before their norms, after them (and RoPE), v, the gate, the attention output
    /// before and after the gate.
    q_raw: DeviceBuffer<A>,
    k_raw: DeviceBuffer<A>,
    q: DeviceBuffer<A>,
    k: DeviceBuffer<A>,
    v: DeviceBuffer<A>,
    gate: DeviceBuffer<A>,
    o: DeviceBuffer<A>,
    og: DeviceBuffer<A>,
}

/// The layer's output `[t, hidden]` and its saved activations.
pub(super) fn forward<A: Act>(
    gpu: &Gpu,
    c: &ModelConfig,
    w: &AttnW<A>,
    seq: &SeqIndex,
    u: DeviceBuffer<A>,
) -> Result<(DeviceBuffer<A>, AttnSaved<A>)> {
    let (t, h, eps) = (seq.t, c.hidden_size, c.rms_norm_eps);
    let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    let (nq, nk, theta) = (t * hq * hd, t * hkv * hd, c.rope_theta as f32);
    let mut qg = gpu.zeros::<A>(2 * nq)?;
    linear(gpu, &u, t, h, &w.q, 2 * hq * hd, &mut qg)?;
    let (mut q, mut gate) = (gpu.zeros::<A>(nq)?, gpu.zeros::<A>(nq)?);
    ops::split_q_gate(gpu, &qg, &mut q, &mut gate, t, hq, hd)?;
    let q_raw = gpu.duplicate(&q)?;
    let (mut k_raw, mut v) = (gpu.zeros::<A>(nk)?, gpu.zeros::<A>(nk)?);
    linear(gpu, &u, t, h, &w.k, hkv * hd, &mut k_raw)?;
    linear(gpu, &u, t, h, &w.v, hkv * hd, &mut v)?;
    let mut k = gpu.duplicate(&k_raw)?;
    ops::head_rms_norm_1p(gpu, &mut q, &w.q_norm, t, hq, hd, hq * hd, eps)?;
    ops::head_rms_norm_1p(gpu, &mut k, &w.k_norm, t, hkv, hd, hkv * hd, eps)?;
    ops::rope_partial(gpu, &mut q, &seq.pos, t, hq, hd, c.rotary_dim, theta, true)?;
    ops::rope_partial(gpu, &mut k, &seq.pos, t, hkv, hd, c.rotary_dim, theta, true)?;
    // The sequence's keys and values in one block of a fresh pool (block table [[0]]).
    let mut pool = KvPool::<A>::new(gpu, 1, t, hkv, hd)?;
    let idx = KvIndex {
        cache_pos: &seq.pos,
        seq_of_tok: &seq.zeros,
        blocks: BlockTable { table: &seq.zeros, stride: 1 },
    };
    ops::kv_append(gpu, &k, &v, &mut pool, &idx, t)?;
    let mut o = gpu.zeros::<A>(nq)?;
    ops::attn_prefill(gpu, &q, &pool, &idx, &mut o, t, hq)?;
    let mut og = gpu.duplicate(&o)?;
    ops::sigmoid_gate_mul(gpu, &mut og, &gate, nq)?;
    let mut y = gpu.zeros::<A>(t * h)?;
    linear(gpu, &og, t, hq * hd, &w.o, h, &mut y)?;
    Ok((y, AttnSaved { u, q_raw, k_raw, q, k, v, gate, o, og }))
}

/// From `dy [t, hidden]` (the gradient of the layer's output): accumulates the weight gradients
/// into `g` (fp32, the layer's shapes; with `lora`, layer `li`'s adapter gradients instead of
/// the projections') and returns the gradient w.r.t. the normed input rows.
pub(super) fn backward<A: Act>(
    gpu: &Gpu,
    c: &ModelConfig,
    w: &AttnW<A>,
    seq: &SeqIndex,
    s: &AttnSaved<A>,
    dy: &DeviceBuffer<A>,
    g: &mut AttnW<f32>,
    (li, mut lora): (usize, Option<&mut DeviceLora<A>>),
) -> crate::train::error::Result<DeviceBuffer<A>> {
    let n = AttentionParams::new(&format!("layers.{li}.self_attn."), c);
    let (t, h, eps) = (seq.t, c.hidden_size, c.rms_norm_eps);
    let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    let (nq, nk, theta, rot) = (t * hq * hd, t * hkv * hd, c.rope_theta as f32, c.rotary_dim);
    let mut dog = gpu.zeros::<A>(nq)?;
    linear_backward(gpu, lora.as_deref_mut(), &n.o_proj.name, dy, &s.og, (t, hq * hd, h), &w.o, &mut dog, false, &mut g.o)?;
    let (mut d_o, mut dgate) = (gpu.zeros::<A>(nq)?, gpu.zeros::<A>(nq)?);
    bw::sigmoid_gate_mul_backward(gpu, &s.o, &s.gate, &dog, &mut d_o, &mut dgate, nq)?;
    let (mut dq, mut dk, mut dv) = (gpu.zeros::<A>(nq)?, gpu.zeros::<A>(nk)?, gpu.zeros::<A>(nk)?);
    bw::attention_backward(gpu, &s.q, &s.k, &s.v, &s.o, &d_o, &seq.spans, &mut dq, &mut dk, &mut dv, hq, hkv, hd)?;
    bw::rope_partial_backward(gpu, &mut dq, &seq.pos, t, hq, hd, rot, theta, true)?;
    bw::rope_partial_backward(gpu, &mut dk, &seq.pos, t, hkv, hd, rot, theta, true)?;
    let (mut dq_raw, mut dk_raw) = (gpu.zeros::<A>(nq)?, gpu.zeros::<A>(nk)?);
    bw::rms_norm_1p_backward(gpu, &s.q_raw, &w.q_norm, &dq, &mut dq_raw, &mut g.q_norm, t * hq, hd, eps)?;
    bw::rms_norm_1p_backward(gpu, &s.k_raw, &w.k_norm, &dk, &mut dk_raw, &mut g.k_norm, t * hkv, hd, eps)?;
    let mut dqg = gpu.zeros::<A>(2 * nq)?;
    bw::merge_q_gate(gpu, &dq_raw, &dgate, &mut dqg, t, hq, hd)?;
    let mut dx = gpu.zeros::<A>(t * h)?;
    let projs: [super::proj::Proj<'_, A>; 3] = [
        (&dqg, &w.q, 2 * hq * hd, &mut g.q, &n.q_proj.name),
        (&dk_raw, &w.k, hkv * hd, &mut g.k, &n.k_proj.name),
        (&dv, &w.v, hkv * hd, &mut g.v, &n.v_proj.name),
    ];
    super::proj::backward(gpu, lora, &s.u, t, h, &mut dx, false, projs)?;
    Ok(dx)
}
