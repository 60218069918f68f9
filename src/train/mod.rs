//! Train layer: backward passes of every Qwen3.5-MoE layer over f32 master parameters, the SFT
//! and GRPO losses, and the `grads` computation.
//!
//! - [`params`]: `ParamStore` (HF-named f32 parameters) and `Grads`.
//! - [`ops`]: backward kernels (strided GEMM, norms, activations).
//! - [`layers`]: per-layer forward/backward pairs (attention, Gated DeltaNet, delta rule, MoE).
//! - [`network`]: `TrainModel` — whole-model training forward with a tape, backward, optional
//!   per-layer activation recomputation, routing replay.
//! - [`loss`] (cross-entropy / SFT) and [`grpo`] (clipped policy loss): pure functions of logits.
//! - [`sft_data`]: conversations rendered with the chat template into ids + assistant masks.

pub mod checkpoint;
pub mod error;
pub mod grpo;
pub mod layers;
pub mod lora;
pub mod loss;
pub mod network;
pub mod ops;
pub mod optim;
pub mod params;
pub mod sft_data;
pub mod sft_run;
pub mod trainer;

pub use error::TrainError;
pub use network::{Tape, TapeOptions, TrainModel};
pub use params::{Grads, ParamStore, Pid};
