//! LoRA adapter gradients on the device (a GPU, or the emulated one), from a projection's input
//! and output gradient without the dense `[out, in]` gradient — the device form of
//! `lora::AdapterGrads` (same formulas): `dB += dYᵀ·(s·X·Aᵀ)`, `dA += (s·dY·B)ᵀ·X`, four fp32
//! GEMMs through the device GEMM (`tensor::cuda::gemm::matmul_f32`) and an `[m, r]` scratch.
//! Routed experts call it per expert over the rows routed to it. All operands fp32 (the
//! adapters' masters and fp32 activations; bf16 activations need a conversion first).

use super::error::{Result, TrainError};
use crate::tensor::cuda::gemm::matmul_f32;
use crate::tensor::cuda::{DeviceBuffer, Gpu};

/// One adapted projection `y[m, out] = x[m, in] · (W₀ + s·B·A)ᵀ`: its adapter shapes and scale.
#[derive(Clone, Copy, Debug)]
pub struct AdapterShape {
    pub inp: usize,
    pub out: usize,
    pub rank: usize,
    /// `α / r`.
    pub scale: f32,
}

/// The device buffers of one adapter and its gradients: `a [r, in]`, `b [out, r]`,
/// `ga`, `gb` of the same shapes.
pub struct AdapterBufs<'a> {
    pub a: &'a DeviceBuffer<f32>,
    pub b: &'a DeviceBuffer<f32>,
    pub ga: &'a mut DeviceBuffer<f32>,
    pub gb: &'a mut DeviceBuffer<f32>,
}

/// Adds the adapter gradients of one call on `m` rows (`x [m, in]`, `dy [m, out]`) to
/// `bufs.ga`, `bufs.gb`; `scratch` holds at least `m · r` floats.
pub fn accumulate_adapter_grads(
    gpu: &Gpu,
    sh: AdapterShape,
    x: &DeviceBuffer<f32>,
    dy: &DeviceBuffer<f32>,
    m: usize,
    bufs: AdapterBufs<'_>,
    scratch: &mut DeviceBuffer<f32>,
) -> Result<()> {
    let AdapterShape { inp, out, rank: r, scale: s } = sh;
    let sizes = [(bufs.a.len(), r * inp), (bufs.b.len(), out * r), (bufs.ga.len(), r * inp), (bufs.gb.len(), out * r)];
    if sizes.iter().any(|(have, want)| have != want) || x.len() < m * inp || dy.len() < m * out || scratch.len() < m * r {
        return Err(TrainError::BadInput(format!(
            "device LoRA gradients: adapter buffers {sizes:?} (have, want), x {}, dy {}, scratch {} for m={m}",
            x.len(),
            dy.len(),
            scratch.len()
        )));
    }
    // scratch = s·X·Aᵀ [m, r]; dB += dYᵀ·scratch.
    matmul_f32(gpu, (false, true), (m, r, inp), s, x, bufs.a, 0.0, scratch)?;
    matmul_f32(gpu, (true, false), (out, r, m), 1.0, dy, scratch, 1.0, bufs.gb)?;
    // scratch = s·dY·B [m, r]; dA += scratchᵀ·X.
    matmul_f32(gpu, (false, false), (m, r, out), s, dy, bufs.b, 0.0, scratch)?;
    matmul_f32(gpu, (true, false), (r, inp, m), 1.0, scratch, x, 1.0, bufs.ga)?;
    Ok(())
}
