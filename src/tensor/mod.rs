//! Tensor layer: the `Tensor` type and its backends (CPU reference; CUDA behind the `cuda`
//! feature). Owns storage dtypes (f32, bf16, f16) and the numeric kernels the model uses.
