//! LoRA on the device (a GPU, or the emulated one): the adapter gradients of a projection from
//! its input and output gradient without the dense `[out, in]` gradient — the device form of
//! `lora::AdapterGrads` (same formulas): `dB += dYᵀ·(s·X·Aᵀ)`, `dA += (s·dY·B)ᵀ·X`, four GEMMs
//! through the device GEMM (`tensor::cuda::gemm::matmul`, fp32 compute, the gradients fp32) and
//! an `[m, r]` scratch — and the merge `W = W₀ + s·B·A` written into a served weight (one GEMM,
//! fp32 compute rounded to the storage type). Operands are in the storage type `A` of the
//! activations (the adapters' serving copies too: bf16 in a bf16 build, exact in f32).
//! Routed experts would call it per expert over the rows routed to it.

use super::error::{Result, TrainError};
use crate::tensor::cuda::gemm::matmul;
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};

/// One adapted projection `y[m, out] = x[m, in] · (W₀ + s·B·A)ᵀ`: its adapter shapes and scale.
#[derive(Clone, Copy, Debug)]
pub struct AdapterShape {
    pub inp: usize,
    pub out: usize,
    pub rank: usize,
    /// `α / r`.
    pub scale: f32,
}

/// The device buffers of one adapter and its gradients: `a [r, in]`, `b [out, r]` (storage
/// type), `ga`, `gb` of the same shapes (fp32).
pub struct AdapterBufs<'a, A: Act> {
    pub a: &'a DeviceBuffer<A>,
    pub b: &'a DeviceBuffer<A>,
    pub ga: &'a mut DeviceBuffer<f32>,
    pub gb: &'a mut DeviceBuffer<f32>,
}

/// Adds the adapter gradients of one call on `m` rows (`x [m, in]`, `dy [m, out]`) to
/// `bufs.ga`, `bufs.gb`; `scratch` holds at least `m · r` values.
pub fn accumulate_adapter_grads<A: Act>(
    gpu: &Gpu,
    sh: AdapterShape,
    x: &DeviceBuffer<A>,
    dy: &DeviceBuffer<A>,
    m: usize,
    bufs: AdapterBufs<'_, A>,
    scratch: &mut DeviceBuffer<A>,
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
    matmul(gpu, (false, true), (m, r, inp), s, x, bufs.a, 0.0, scratch)?;
    matmul(gpu, (true, false), (out, r, m), 1.0, dy, scratch, 1.0, bufs.gb)?;
    // scratch = s·dY·B [m, r]; dA += scratchᵀ·X.
    matmul(gpu, (false, false), (m, r, out), s, dy, bufs.b, 0.0, scratch)?;
    matmul(gpu, (true, false), (r, inp, m), 1.0, scratch, x, 1.0, bufs.ga)?;
    Ok(())
}

/// The merge: `w = base + s·B·A` (`base`, `w` `[out, in]`), computed in fp32 by one GEMM over
/// a copy of the frozen base and rounded to the storage type — the served weight after a step.
pub fn merge_adapter<A: Act>(
    gpu: &Gpu,
    sh: AdapterShape,
    base: &DeviceBuffer<A>,
    a: &DeviceBuffer<A>,
    b: &DeviceBuffer<A>,
    w: &mut DeviceBuffer<A>,
) -> Result<()> {
    let AdapterShape { inp, out, rank: r, scale: s } = sh;
    if base.len() != out * inp || w.len() != out * inp {
        return Err(TrainError::BadInput(format!(
            "LoRA merge: base {} and weight {} for [{out}, {inp}]",
            base.len(),
            w.len()
        )));
    }
    gpu.copy_into(base, 0, w, 0, out * inp)?;
    matmul(gpu, (false, false), (out, inp, r), s, b, a, 1.0, w)?;
    Ok(())
}
