//! Train layer: backward passes of every Qwen3.5-MoE layer over f32 master parameters, the SFT
//! and GRPO losses, and the `grads` computation.
//!
//! - [`params`]: `ParamStore` (HF-named f32 parameters) and `Grads`.
//! - [`grad_sink`]: `GradSink`, where the backward puts weight gradients (dense or LoRA).
//! - [`ops`]: backward kernels (strided GEMM, norms, activations).
//! - [`layers`]: per-layer forward/backward pairs (attention, Gated DeltaNet, delta rule, MoE).
//! - [`network`]: `TrainModel` — whole-model training forward with a tape, backward, optional
//!   per-layer activation recomputation, routing replay.
//! - [`loss`] (cross-entropy / SFT) and [`grpo`] (clipped policy loss): pure functions of logits.
//! - [`trainer`]: one update (SFT or GRPO) in micro-batches under a token cap; [`optim`], [`lora`].
//! - [`device`]: `DeviceTrainModel`, the training forward/backward on a device (GPU or emulator)
//!   over the serving weights, fp32 gradients of the same shapes.
//! - [`device_optim`]: `DeviceAdamW`, the same AdamW on a device (GPU or emulator) with the
//!   serving weights rewritten in place; [`device_lora`]: LoRA adapter gradients on a device.
//! - [`lease`] and [`policy`]: the trainer's weights lent to an engine without a copy and taken back.
//! - [`advantage`], [`dynamic`]: group-mean advantages and DAPO dynamic sampling.
//! - [`rollout`], [`iteration`], [`toy`], [`grpo_run`]: GRPO through the engine — rollouts,
//!   one iteration (lend → sample → give back → update), the built-in toy task, `train grpo`.
//! - [`plan`]: the per-GPU memory plan (`execcritic train plan`).
//! - [`sft_data`]: conversations rendered with the chat template into ids + assistant masks.

pub mod advantage;
pub mod checkpoint;
pub mod device;
pub mod device_lora;
pub mod device_optim;
pub mod dynamic;
pub mod error;
pub mod grad_sink;
pub mod grpo;
pub mod grpo_run;
pub mod iteration;
pub mod launch_table;
pub mod layers;
pub mod lease;
pub mod lora;
pub mod loss;
pub mod network;
pub mod ops;
pub mod optim;
pub mod params;
pub mod plan;
pub mod policy;
pub mod rollout;
pub mod run_device;
pub mod sft_data;
pub mod sft_run;
pub mod toy;
pub mod trainer;

pub use error::TrainError;
pub use network::{Tape, TapeOptions, TrainModel};
pub use params::{Grads, ParamStore, Pid};
