//! Dense GEMMs through cuBLAS: the linear layer `out[m, n] = x[m, k] · W[n, k]ᵀ` (PyTorch
//! `nn.Linear` layout) with bf16 inputs and fp32 accumulation, writing bf16 (projections) or
//! fp32 (router logits, LM head, where the consumer wants full precision).

use super::device::{CudaError, Gpu, Result};
use cudarc::cublas::{result::gemm_ex, sys};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use std::ffi::c_void;

/// Output element type of a linear layer.
pub trait GemmOut {
    const TYPE: sys::cudaDataType;
}
impl GemmOut for u16 {
    const TYPE: sys::cudaDataType = sys::cudaDataType::CUDA_R_16BF;
}
impl GemmOut for f32 {
    const TYPE: sys::cudaDataType = sys::cudaDataType::CUDA_R_32F;
}

/// `out[m, n] = x[m, k] · w[n, k]ᵀ` (bf16 x and w; fp32 compute). Row-major C = X·Wᵀ is the
/// column-major product Cᵀ = W·Xᵀ, i.e. `gemm(T, N, n, m, k, W, k, X, k, C, n)`.
pub fn linear<O: GemmOut>(
    gpu: &Gpu,
    x: &CudaSlice<u16>,
    m: usize,
    k: usize,
    w: &CudaSlice<u16>,
    n: usize,
    out: &mut CudaSlice<O>,
) -> Result<()> {
    let bad = |msg: String| Err(CudaError::Shape { op: "linear", msg });
    if x.len() < m * k || w.len() < n * k || out.len() < m * n {
        return bad(format!(
            "x {} w {} out {} too small for m={m} k={k} n={n}",
            x.len(),
            w.len(),
            out.len()
        ));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (alpha, beta) = (1.0f32, 0.0f32);
    let st = &gpu.stream;
    let (xp, _gx) = x.device_ptr(st);
    let (wp, _gw) = w.device_ptr(st);
    let (op, _go) = out.device_ptr_mut(st);
    // SAFETY: pointers from live device buffers whose sizes were checked above; the handle is
    // bound to `gpu.stream`.
    unsafe {
        gemm_ex(
            *gpu.blas.handle(),
            sys::cublasOperation_t::CUBLAS_OP_T,
            sys::cublasOperation_t::CUBLAS_OP_N,
            n as i32,
            m as i32,
            k as i32,
            &alpha as *const f32 as *const c_void,
            wp as *const c_void,
            sys::cudaDataType::CUDA_R_16BF,
            k as i32,
            xp as *const c_void,
            sys::cudaDataType::CUDA_R_16BF,
            k as i32,
            &beta as *const f32 as *const c_void,
            op as *mut c_void,
            O::TYPE,
            n as i32,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )?;
    }
    Ok(())
}
