//! CUDA backend (feature `cuda`): one [`Gpu`] per device holds the driver context, a stream,
//! cuBLAS, and every kernel of `kernels/*.cu` compiled by NVRTC for the present GPU's
//! architecture (PTX cached per process and architecture). [`ops`] has one launch wrapper per
//! kernel, mirroring the CPU op list; dense GEMMs go through cuBLAS ([`gemm`]).
//!
//! Buffers are `CudaSlice<u16>` for bf16 (raw bits; converted on the host with `half`),
//! `CudaSlice<f32>` for fp32 states and accumulators, `CudaSlice<i32>` for ids and indices.
//! Everything builds without a CUDA toolkit; at run time the driver (libcuda) is probed before
//! cudarc touches it, so a machine without a GPU gets [`CudaError::NoDevice`], not a panic.

pub mod device;
pub mod forward;
pub mod gemm;
pub mod ops;

pub use device::{CudaError, Gpu};

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
