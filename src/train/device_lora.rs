//! LoRA on the device (a GPU, or the emulated one): the adapter gradients of a projection from
//! its input and output gradient without the dense `[out, in]` gradient — the device form of
//! `lora::AdapterGrads` (same formulas): `dB += dYᵀ·(s·X·Aᵀ)`, `dA += (s·dY·B)ᵀ·X`, four GEMMs
//! through the device GEMM (`tensor::cuda::gemm::matmul`, fp32 compute, the gradients fp32) and
//! an `[m, r]` scratch — and the merge `W = W₀ + s·B·A` written into a served weight (one GEMM,
//! fp32 compute rounded to the storage type). Operands are in the storage type `A` of the
//! activations (the adapters' serving copies too: bf16 in a bf16 build, exact in f32).
//! Operands are views (`tensor::cuda::gemm::View`: an offset and a row stride), so a routed
//! expert's adapters take its block of grouped rows, and its gate or up half of the fused
//! `gate|up` rows, in place.

use super::error::{Result, TrainError};
use crate::tensor::cuda::gemm::{matmul_views, View, ViewMut};
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

/// Adds the adapter gradients of one call on `m` rows (`x [m, in]`, `dy [m, out]`, each a view
/// into a larger buffer) to `bufs.ga`, `bufs.gb`; `scratch` holds at least `m · r` values.
pub fn accumulate_adapter_grads<A: Act>(
    gpu: &Gpu,
    sh: AdapterShape,
    x: View<'_, A>,
    dy: View<'_, A>,
    m: usize,
    bufs: AdapterBufs<'_, A>,
    scratch: &mut DeviceBuffer<A>,
) -> Result<()> {
    let AdapterShape { inp, out, rank: r, scale: s } = sh;
    let sizes = [(bufs.a.len(), r * inp), (bufs.b.len(), out * r), (bufs.ga.len(), r * inp), (bufs.gb.len(), out * r)];
    if sizes.iter().any(|(have, want)| have != want) || scratch.len() < m * r {
        return Err(TrainError::BadInput(format!(
            "device LoRA gradients: adapter buffers {sizes:?} (have, want), scratch {} for m={m}",
            scratch.len()
        )));
    }
    let (a, b) = (View::dense(bufs.a, inp), View::dense(bufs.b, r));
    // scratch = s·X·Aᵀ [m, r]; dB += dYᵀ·scratch.
    matmul_views(gpu, (false, true), (m, r, inp), s, x, a, 0.0, ViewMut::dense(scratch, r))?;
    matmul_views(gpu, (true, false), (out, r, m), 1.0, dy, View::dense(scratch, r), 1.0, ViewMut::dense(bufs.gb, r))?;
    // scratch = s·dY·B [m, r]; dA += scratchᵀ·X.
    matmul_views(gpu, (false, false), (m, r, out), s, dy, b, 0.0, ViewMut::dense(scratch, r))?;
    matmul_views(gpu, (true, false), (r, inp, m), 1.0, View::dense(scratch, r), x, 1.0, ViewMut::dense(bufs.ga, inp))?;
    Ok(())
}

/// The merge: adds `s·B·A` (fp32 compute, rounded to the storage type) to the `[out, in]` block
/// of `w` at element `at`, which the caller has just reset to the frozen base `W₀` — the served
/// weight after a step is `W₀ + s·B·A`.
pub fn merge_adapter<A: Act>(
    gpu: &Gpu,
    sh: AdapterShape,
    a: &DeviceBuffer<A>,
    b: &DeviceBuffer<A>,
    w: &mut DeviceBuffer<A>,
    at: usize,
) -> Result<()> {
    let AdapterShape { inp, out, rank: r, scale: s } = sh;
    if at + out * inp > w.len() {
        return Err(TrainError::BadInput(format!("LoRA merge: [{out}, {inp}] at {at} of a weight of {}", w.len())));
    }
    let (b, a) = (View::dense(b, r), View::dense(a, inp));
    matmul_views(gpu, (false, false), (out, inp, r), s, b, a, 1.0, ViewMut { buf: w, at, ld: inp })?;
    Ok(())
}
