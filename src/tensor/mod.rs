//! Tensor layer: the `Tensor` type and its backends (CPU reference; CUDA behind the `cuda`
//! feature). Owns storage dtypes (f32, bf16, f16) and the numeric kernels the model uses.
//!
//! The CPU backend is deliberately small: a [`Tensor`] is a contiguous row-major f32 buffer (or,
//! for weight matrices of bf16 checkpoints, bf16) that is either owned or borrowed in place from
//! a memory-mapped checkpoint ([`Storage`]); the ops in [`cpu`] work on plain `&[f32]` slices
//! with explicit dimensions, and [`linear`] takes a weight in either format ([`Weight`]). A CUDA backend mirrors the
//! same op list (one function per op) on device buffers.

pub mod cpu;
pub mod cpu_avx512;
pub mod cpu_bf16;
pub mod cpu_path;
pub mod cubin;
pub mod cuda;
pub mod device;
pub mod dtype;
pub mod emu;
pub mod expert_parallel;
pub mod gemm_amx;
pub mod gemm_bf16;
pub mod host_heap;
pub mod kernel_audit;
pub mod kernel_store;
pub mod kernels;
pub mod launch_check;
pub mod linear;
pub mod nvrtc;
pub mod profile;
pub mod rows_avx2;
pub mod rows_bf16_avx512;
pub mod storage;
pub mod thread_exchange;

pub use dtype::DType;
pub use storage::{Storage, Tensor, Weight};
