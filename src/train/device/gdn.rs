//! Gated DeltaNet on a device, for training: the forward of
//! `model::backend::cuda::CudaStep::gdn` (projections, causal conv + SiLU, q/k L2 norm and gates,
//! chunked delta rule from a zero state, gated RMSNorm, output projection) keeping what its
//! backward reads, and that backward over `tensor::cuda::backward` (the delta rule's backward
//! recomputes its chunk-start states itself).

use super::lora::{linear_backward, DeviceLora};
use super::seq::SeqIndex;
use crate::model::backend::schema::GdnParams;
use crate::model::backend::cuda::GdnW;
use crate::model::config::{GdnDims, ModelConfig};
use crate::tensor::cuda::backward as bw;
use crate::tensor::cuda::gemm::linear;
use crate::tensor::cuda::ops::{self, DeltaBufs, GdnGates, GdnPool};
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::tensor::device::Result;

type F32 = DeviceBuffer<f32>;

/// What the GDN backward reads, per layer.
pub(super) struct GdnSaved<A: Act> {
    /// The normed input rows `[t, hidden]`.
    u: DeviceBuffer<A>,
    /// The qkv projection (the conv's input) and the conv + SiLU output `[t, conv_dim]`.
    mixed: DeviceBuffer<A>,
    conv_y: DeviceBuffer<A>,
    /// Output-gate, β and decay projections.
    z: DeviceBuffer<A>,
    bb: DeviceBuffer<A>,
    aa: DeviceBuffer<A>,
    /// The delta rule's fp32 inputs.
    qn: F32,
    kn: F32,
    vv: F32,
    beta: F32,
    g: F32,
    /// The delta rule's output and the gated norm's.
    o: DeviceBuffer<A>,
    on: DeviceBuffer<A>,
}

impl<A: Act> GdnSaved<A> {
    fn delta(&self, c: &ModelConfig) -> DeltaBufs<'_> {
        DeltaBufs {
            qn: &self.qn,
            kn: &self.kn,
            v: &self.vv,
            beta: &self.beta,
            g: &self.g,
            hk: c.linear_num_key_heads,
            hv: c.linear_num_value_heads,
            dk: c.linear_key_head_dim,
            dv: c.linear_value_head_dim,
        }
    }
}

/// The layer's output `[t, hidden]` and its saved activations.
pub(super) fn forward<A: Act>(
    gpu: &Gpu,
    c: &ModelConfig,
    w: &GdnW<A>,
    seq: &SeqIndex,
    u: DeviceBuffer<A>,
) -> Result<(DeviceBuffer<A>, GdnSaved<A>)> {
    let (t, h, eps) = (seq.t, c.hidden_size, c.rms_norm_eps);
    let GdnDims { hk, hv, dk, dv, conv: cd, value: vd, kernel: kk } = c.gdn_dims();
    let (mut mixed, mut z) = (gpu.zeros::<A>(t * cd)?, gpu.zeros::<A>(t * vd)?);
    let (mut bb, mut aa) = (gpu.zeros::<A>(t * hv)?, gpu.zeros::<A>(t * hv)?);
    linear(gpu, &u, t, h, &w.qkv, cd, &mut mixed)?;
    linear(gpu, &u, t, h, &w.z, vd, &mut z)?;
    linear(gpu, &u, t, h, &w.b, hv, &mut bb)?;
    linear(gpu, &u, t, h, &w.a, hv, &mut aa)?;
    // A fresh one-slot state: zero conv history, zero recurrent state.
    let mut pool = GdnPool::new(gpu, 1, cd, kk, hv, dk, dv)?;
    let mut conv_y = gpu.zeros::<A>(t * cd)?;
    ops::causal_conv(gpu, &mixed, &mut pool, &w.conv, &mut conv_y, &seq.cu, &seq.zeros, 1, t, cd, kk)?;
    let (mut beta, mut g) = (gpu.zeros::<f32>(t * hv)?, gpu.zeros::<f32>(t * hv)?);
    let (mut qn, mut kn, mut vv) = (gpu.zeros::<f32>(t * hk * dk)?, gpu.zeros::<f32>(t * hk * dk)?, gpu.zeros::<f32>(t * hv * dv)?);
    let gates = GdnGates { bproj: &bb, aproj: &aa, a_log: &w.a_log, dt_bias: &w.dt_bias, beta: &mut beta, g: &mut g };
    ops::gdn_qkv_prep_gates(gpu, &conv_y, gates, &mut qn, &mut kn, &mut vv, t, hk, hv, dk, dv)?;
    let mut o = gpu.zeros::<A>(t * vd)?;
    let mut scratch = gpu.zeros::<f32>(hv * 64 * (dk + dv))?;
    {
        let x = DeltaBufs { qn: &qn, kn: &kn, v: &vv, beta: &beta, g: &g, hk, hv, dk, dv };
        ops::gdn_chunked(gpu, &x, &mut pool, &mut scratch, &seq.cu, &seq.zeros, 1, t, &mut o)?;
    }
    let mut on = gpu.zeros::<A>(t * vd)?;
    ops::gated_rms_norm(gpu, &o, &z, &w.norm, &mut on, t, hv, dv, eps)?;
    let mut y = gpu.zeros::<A>(t * h)?;
    linear(gpu, &on, t, vd, &w.out, h, &mut y)?;
    Ok((y, GdnSaved { u, mixed, conv_y, z, bb, aa, qn, kn, vv, beta, g, o, on }))
}

/// From `dy [t, hidden]`: accumulates the weight gradients into `g` (fp32; with `lora`, layer
/// `li`'s adapter gradients instead of the projections') and returns the
/// gradient w.r.t. the normed input rows.
pub(super) fn backward<A: Act>(
    gpu: &Gpu,
    c: &ModelConfig,
    w: &GdnW<A>,
    seq: &SeqIndex,
    s: &GdnSaved<A>,
    dy: &DeviceBuffer<A>,
    g: &mut GdnW<f32>,
    (li, mut lora): (usize, Option<&mut DeviceLora<A>>),
) -> crate::train::error::Result<DeviceBuffer<A>> {
    let n = GdnParams::new(&format!("layers.{li}.linear_attn."), c);
    let (t, h, eps) = (seq.t, c.hidden_size, c.rms_norm_eps);
    let GdnDims { hk, hv, dk, dv, conv: cd, value: vd, kernel: kk } = c.gdn_dims();
    let mut d_on = gpu.zeros::<A>(t * vd)?;
    linear_backward(gpu, lora.as_deref_mut(), &n.out_proj.name, dy, &s.on, (t, vd, h), &w.out, &mut d_on, false, &mut g.out)?;
    let (mut d_o, mut dz) = (gpu.zeros::<A>(t * vd)?, gpu.zeros::<A>(t * vd)?);
    bw::gated_rms_norm_backward(gpu, &s.o, &s.z, &w.norm, &d_on, &mut d_o, &mut dz, &mut g.norm, t * hv, dv, eps)?;
    let (mut dq, mut dkk) = (gpu.zeros::<f32>(t * hk * dk)?, gpu.zeros::<f32>(t * hk * dk)?);
    let (mut dvv, mut dbeta, mut dg) = (gpu.zeros::<f32>(t * hv * dv)?, gpu.zeros::<f32>(t * hv)?, gpu.zeros::<f32>(t * hv)?);
    let cu = seq.cu_host();
    bw::delta_rule_backward(gpu, &s.delta(c), &cu, &d_o, &mut dq, &mut dkk, &mut dvv, &mut dbeta, &mut dg)?;
    let mut dconv_y = gpu.zeros::<A>(t * cd)?;
    bw::gdn_qkv_prep_backward(gpu, &s.conv_y, &dq, &dkk, &dvv, &mut dconv_y, t, hk, hv, dk, dv)?;
    let mut dmixed = gpu.zeros::<A>(t * cd)?;
    bw::causal_conv_backward(gpu, &s.mixed, None, &w.conv, &dconv_y, &mut dmixed, None, &mut g.conv, &cu, &[0], cd, kk)?;
    let (mut db, mut da) = (gpu.zeros::<A>(t * hv)?, gpu.zeros::<A>(t * hv)?);
    bw::gdn_gates_backward(
        gpu, &s.bb, &s.aa, &w.a_log, &w.dt_bias, &dbeta, &dg, &mut db, &mut da, &mut g.a_log, &mut g.dt_bias, t, hv,
    )?;
    let mut dx = gpu.zeros::<A>(t * h)?;
    let projs: [super::proj::Proj<'_, A>; 4] = [
        (&dmixed, &w.qkv, cd, &mut g.qkv, &n.in_proj_qkv.name),
        (&dz, &w.z, vd, &mut g.z, &n.in_proj_z.name),
        (&db, &w.b, hv, &mut g.b, &n.in_proj_b.name),
        (&da, &w.a, hv, &mut g.a, &n.in_proj_a.name),
    ];
    super::proj::backward(gpu, lora, &s.u, t, h, &mut dx, false, projs)?;
    Ok(dx)
}

