//! CUDA backend: the host code of the Qwen3.5-MoE forward on a GPU, written once over the device
//! seam ([`crate::tensor::device::Device`]) so it runs unchanged on the real GPU (feature `cuda`,
//! [`device::CudaDevice`]) and on the emulated device that executes the same `kernels/*.cu` on
//! CPU threads (CI). [`Gpu`] is the handle, [`DeviceBuffer`] a typed allocation; [`ops`] has
//! one launch wrapper per kernel, mirroring the CPU op list; dense GEMMs go through the device's
//! cuBLAS-style GEMM ([`gemm`]). The model over these ops lives in
//! `model::backend::cuda`; this layer knows no model.
//!
//! Activations and weights are stored as [`Act`]: `u16` (raw bf16 bits, converted on the host
//! with `half`) or `f32` (the fp32 mode); states and accumulators are `f32`, ids and indices
//! `i32`. Everything builds without a CUDA toolkit; at run time the driver (libcuda) is probed
//! before cudarc touches it, so a machine without a GPU gets a typed error, not a panic.

#[cfg(feature = "cuda")]
pub mod device;
pub mod backward;
pub mod gemm;
pub mod gpu;
#[cfg(feature = "cuda")]
pub mod nccl;
pub mod ops;
pub mod record;
pub mod switches;

pub use crate::tensor::device::{ActType, DeviceError as CudaError};
pub use gpu::{Act, DeviceBuffer, DeviceKind, Elem, Gpu, OpCounts};
pub use switches::Switches;

/// The emulated device (`--device emulator`).
pub(crate) fn emulator() -> crate::tensor::device::Result<Gpu> {
    Ok(Gpu::from_device(std::sync::Arc::new(
        crate::tensor::emu::EmuDevice::new(),
    )))
}

/// bf16 values on the host as the raw bits the kernels use.
pub fn to_bf16_bits(x: &[f32]) -> Vec<u16> {
    x.iter()
        .map(|v| half::bf16::from_f32(*v).to_bits())
        .collect()
}

/// A host weight in either storage format as raw bf16 bits (bf16 weights are copied as they are,
/// f32 ones rounded to nearest even).
pub fn weight_bf16_bits(w: crate::tensor::Weight<'_>) -> Vec<u16> {
    match w {
        crate::tensor::Weight::F32(v) => to_bf16_bits(v),
        crate::tensor::Weight::Bf16(v) => v.iter().map(|b| b.to_bits()).collect(),
    }
}

/// Raw bf16 bits back to f32.
pub fn from_bf16_bits(x: &[u16]) -> Vec<f32> {
    x.iter()
        .map(|v| half::bf16::from_bits(*v).to_f32())
        .collect()
}
