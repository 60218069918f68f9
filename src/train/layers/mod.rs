//! Per-layer forward/backward pairs of the training path: each `forward` returns its output and
//! the activations its `backward` needs (a per-layer tape); each `backward` accumulates its
//! weight gradients into a [`crate::train::grad_sink::GradSink`] (dense `Grads`, or LoRA
//! adapter gradients formed from each projection's input and output gradient) and returns the input gradient.

pub mod attention;
pub mod attention_rows;
pub mod delta_rule;
pub mod expert_gemm;
pub mod ffn;
pub mod gdn;
pub mod moe;
pub mod moe_ep;
