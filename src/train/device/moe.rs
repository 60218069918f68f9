//! The MoE block on a device, for training: router logits, top-k (or the replayed experts) with
//! renormalised weights, a stable grouping of the (token, slot) pairs by expert (pairs of an
//! expert in ascending order, so the grouped weight gradients sum rows in a fixed order), grouped
//! gate|up GEMM, SwiGLU, grouped down GEMM, the sigmoid-gated shared expert and the combine —
//! keeping what the backward reads — and that backward over `tensor::cuda::backward` (the top-k
//! choice is not differentiated; fused experts keep their `[E, 2I, H]` / `[E, H, I]` gradients).

use super::lora::{linear_backward, DeviceLora, RoutedRows};
use crate::model::backend::cuda::MoeW;
use crate::model::backend::schema::MoeParams;
use crate::model::config::ModelConfig;
use crate::tensor::cuda::backward::{self as bw, SharedGrad};
use crate::tensor::cuda::gemm::linear;
use crate::tensor::cuda::ops::{self, MoeGroups};
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::tensor::device::Result;

type F32 = DeviceBuffer<f32>;
type I32 = DeviceBuffer<i32>;

/// What the MoE backward reads, per layer.
pub(super) struct MoeSaved<A: Act> {
    /// The normed input rows `[t, hidden]`.
    u: DeviceBuffer<A>,
    /// Router logits `[t, e]` (fp32), chosen experts and their renormalised weights `[t, k]`.
    logits: F32,
    idx: I32,
    wts: F32,
    groups: MoeGroups,
    /// Per expert its first grouped row and its number of rows (pairs routed to it).
    spans: Vec<(usize, usize)>,
    /// The chosen expert of each (token, slot) pair `[t · k]`, on the host (the forward
    /// downloads it once; routed LoRA groups the input rows by it in the backward).
    chosen: Vec<u32>,
    /// Most pairs any expert got (the grouped input-gradient GEMM's row bound).
    max_rows: usize,
    /// Grouped rows: gate|up `[pairs, 2I]`, SwiGLU output `[pairs, I]`, expert output `[pairs, h]`.
    gu: DeviceBuffer<A>,
    act: DeviceBuffer<A>,
    y: DeviceBuffer<A>,
    /// Shared expert: gate and up `[t, Is]`, SwiGLU output, its output `[t, h]`, gate logit `[t]`.
    s_g: DeviceBuffer<A>,
    s_u: DeviceBuffer<A>,
    s_h: DeviceBuffer<A>,
    s_out: DeviceBuffer<A>,
    sg: DeviceBuffer<A>,
}

/// The block's output `[t, hidden]`, its saved activations and the chosen experts `[t · k]`.
/// `forced`: the `[t · k]` experts to replay instead of the router's top-k (checked by the caller).
pub(super) fn forward<A: Act>(
    gpu: &Gpu,
    c: &ModelConfig,
    w: &MoeW<A>,
    t: usize,
    u: DeviceBuffer<A>,
    forced: Option<&[u32]>,
) -> Result<(DeviceBuffer<A>, MoeSaved<A>, Vec<u32>)> {
    let (h, e, k, i, is) =
        (c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.shared_expert_intermediate_size);
    let pairs = t * k;
    let mut logits = gpu.zeros::<f32>(t * e)?;
    linear(gpu, &u, t, h, &w.router, e, &mut logits)?;
    let (mut idx, mut wts) = (gpu.zeros::<i32>(pairs)?, gpu.zeros::<f32>(pairs)?);
    let forced = forced.map(|f| gpu.upload(&f.iter().map(|&x| x as i32).collect::<Vec<_>>())).transpose()?;
    ops::router_topk::<A>(gpu, &logits, &mut idx, &mut wts, forced.as_ref(), t, e, k)?;
    let mut groups = MoeGroups::new(gpu, pairs, e)?;
    bw::moe_group_stable(gpu, &idx, pairs, e, &mut groups)?;
    let chosen: Vec<u32> = gpu.download(&idx)?.iter().map(|&x| x as u32).collect();
    let mut counts = vec![0usize; e];
    chosen.iter().for_each(|&x| counts[x as usize] += 1);
    let max_rows = counts.iter().copied().max().unwrap_or(0);
    let spans = counts.iter().scan(0, |first, &n| Some((std::mem::replace(first, *first + n), n))).collect();
    let (mut gu, mut act, mut y) = (gpu.zeros::<A>(pairs * 2 * i)?, gpu.zeros::<A>(pairs * i)?, gpu.zeros::<A>(pairs * h)?);
    ops::grouped_gemm(gpu, &u, &w.gate_up, &mut gu, &groups, true, k, e, 2 * i, h, pairs)?;
    ops::swiglu(gpu, &gu, &mut act, pairs, i)?;
    ops::grouped_gemm(gpu, &act, &w.down, &mut y, &groups, false, k, e, h, i, pairs)?;
    let (mut s_g, mut s_u, mut s_h) = (gpu.zeros::<A>(t * is)?, gpu.zeros::<A>(t * is)?, gpu.zeros::<A>(t * is)?);
    linear(gpu, &u, t, h, &w.s_gate, is, &mut s_g)?;
    linear(gpu, &u, t, h, &w.s_up, is, &mut s_u)?;
    ops::silu_mul(gpu, &s_g, &s_u, &mut s_h, t * is)?;
    let (mut s_out, mut sg) = (gpu.zeros::<A>(t * h)?, gpu.zeros::<A>(t)?);
    linear(gpu, &s_h, t, is, &w.s_down, h, &mut s_out)?;
    linear(gpu, &u, t, h, &w.s_gate_w, 1, &mut sg)?;
    let mut out = gpu.zeros::<A>(t * h)?;
    ops::moe_combine(gpu, &y, &groups, &wts, Some((&s_out, &sg)), &mut out, t, h, k)?;
    let saved = MoeSaved { u, logits, idx, wts, groups, spans, chosen: chosen.clone(), max_rows, gu, act, y, s_g, s_u, s_h, s_out, sg };
    Ok((out, saved, chosen))
}

/// From `dy [t, hidden]`: accumulates the weight gradients into `g` (fp32; with `lora`, layer
/// `li`'s adapter gradients instead — the routed experts' from their rows — and no dense weight
/// gradient) and returns the gradient w.r.t. the normed input rows.
pub(super) fn backward<A: Act>(
    gpu: &Gpu,
    c: &ModelConfig,
    w: &MoeW<A>,
    t: usize,
    s: &MoeSaved<A>,
    dy: &DeviceBuffer<A>,
    g: &mut MoeW<f32>,
    (li, mut lora): (usize, Option<&mut DeviceLora<A>>),
) -> crate::train::error::Result<DeviceBuffer<A>> {
    let n = MoeParams::new(&format!("layers.{li}.mlp."), c);
    // With LoRA no dense expert weight gradient (adapters, if any: `routed_adapters`).
    let experts_dw = lora.is_none();
    let (h, e, k, i, is) =
        (c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.shared_expert_intermediate_size);
    let pairs = t * k;
    let (mut dwts, mut dye) = (gpu.zeros::<f32>(pairs)?, gpu.zeros::<A>(pairs * h)?);
    let (mut ds_out, mut dsg) = (gpu.zeros::<A>(t * h)?, gpu.zeros::<A>(t)?);
    let shared = SharedGrad { out: &s.s_out, sg: &s.sg, dout: &mut ds_out, dsg: &mut dsg };
    bw::moe_combine_backward(gpu, dy, &s.y, &s.groups, &s.wts, Some(shared), &mut dwts, &mut dye, t, h, k)?;
    let mut dlog = gpu.zeros::<A>(t * e)?;
    bw::router_backward(gpu, &s.logits, &s.idx, &s.wts, &dwts, &mut dlog, t, e, k)?;
    // Routed experts: down, SwiGLU, gate|up, then each pair's input gradient onto its token.
    let mut dh = gpu.zeros::<A>(pairs * i)?;
    bw::grouped_gemm_dx(gpu, &dye, &w.down, &mut dh, &s.groups, e, h, i, s.max_rows, pairs, false)?;
    if experts_dw {
        bw::grouped_gemm_dw(gpu, &dye, &s.act, &mut g.down, &s.groups, false, k, e, h, i, pairs)?;
    }
    let mut dgu = gpu.zeros::<A>(pairs * 2 * i)?;
    bw::swiglu_backward(gpu, &s.gu, &dh, &mut dgu, i, pairs)?;
    let mut dxr = gpu.zeros::<A>(pairs * h)?;
    bw::grouped_gemm_dx(gpu, &dgu, &w.gate_up, &mut dxr, &s.groups, e, 2 * i, h, s.max_rows, pairs, false)?;
    if experts_dw {
        bw::grouped_gemm_dw(gpu, &dgu, &s.u, &mut g.gate_up, &s.groups, true, k, e, 2 * i, h, pairs)?;
    }
    if let Some(l) = lora.as_deref_mut() {
        routed_adapters(gpu, l, (&n.fused_gate_up.name, &n.fused_down.name), s, (t, h, k, i), &dgu, &dye)?;
    }
    // Shared expert: down, SwiGLU.
    let mut dsh = gpu.zeros::<A>(t * is)?;
    let s_down = &n.shared.down.name;
    linear_backward(gpu, lora.as_deref_mut(), s_down, &ds_out, &s.s_h, (t, is, h), &w.s_down, &mut dsh, false, &mut g.s_down)?;
    let (mut dsgt, mut dsut) = (gpu.zeros::<A>(t * is)?, gpu.zeros::<A>(t * is)?);
    bw::silu_mul_backward(gpu, &s.s_g, &s.s_u, &dsh, &mut dsgt, &mut dsut, t * is)?;
    // Every projection of the input rows: router, shared gate/up, shared-expert gate.
    let mut dx = gpu.zeros::<A>(t * h)?;
    let projs: [super::proj::Proj<'_, A>; 4] = [
        (&dlog, &w.router, e, &mut g.router, &n.router.name),
        (&dsgt, &w.s_gate, is, &mut g.s_gate, &n.shared.gate.name),
        (&dsut, &w.s_up, is, &mut g.s_up, &n.shared.up.name),
        (&dsg, &w.s_gate_w, 1, &mut g.s_gate_w, &n.shared_gate.name),
    ];
    super::proj::backward(gpu, lora, &s.u, t, h, &mut dx, false, projs)?;
    bw::moe_gather_add(gpu, &dxr, &s.groups, &mut dx, t, h, k, true)?;
    Ok(dx)
}

/// With LoRA on this layer's routed experts (`names`: its fused gate|up and down weights), the
/// adapters' gradients from the rows routed to each expert: the input rows gathered into the
/// grouped order, the gate|up gradients `dgu` and the expert-output gradients `dye`.
fn routed_adapters<A: Act>(
    gpu: &Gpu,
    lora: &mut DeviceLora<A>,
    (gate_up, down): (&str, &str),
    s: &MoeSaved<A>,
    (t, h, k, i): (usize, usize, usize, usize),
    dgu: &DeviceBuffer<A>,
    dye: &DeviceBuffer<A>,
) -> crate::train::error::Result<()> {
    if !lora.adapts(gate_up) && !lora.adapts(down) {
        return Ok(());
    }
    // The token of each grouped row: experts ascending, each expert's pairs ascending.
    let pairs = t * k;
    let mut next: Vec<usize> = s.spans.iter().map(|sp| sp.0).collect();
    let mut tokens = vec![0i32; pairs];
    for (p, &x) in s.chosen.iter().enumerate() {
        let slot = next.get_mut(x as usize).ok_or_else(|| crate::tensor::device::DeviceError::Shape {
            op: "routed LoRA",
            msg: format!("expert {x} of pair {p} beyond {} experts", s.spans.len()),
        })?;
        tokens[*slot] = (p / k) as i32;
        *slot += 1;
    }
    let mut x = gpu.zeros::<A>(pairs * h)?;
    ops::gather_rows(gpu, &s.u, &gpu.upload(&tokens)?, &mut x, pairs, h)?;
    let rows = RoutedRows { spans: &s.spans, x: &x, dgu, act: &s.act, dye, hidden: h, inter: i };
    lora.routed_backward(gpu, gate_up, down, &rows)
}
