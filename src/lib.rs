//! execcritic: the ExecCritic system (Test agent, fail-closed harness, Repair controller, rewards,
//! SFT/GRPO training) on an embedded Qwen3.5-MoE inference engine.
//!
//! Layers, bottom to top (a module may use only the layers below it; see `../shared/DESIGN.md`):
//! `tensor` → `model` → `engine` → `train`; `task` → `harness`; `policy` → `agent` → `episode` →
//! `pipeline`; `serve` (the OpenAI-compatible server) sits beside `policy`, above `engine`; the
//! binary's commands live in `cli`.
//!
//! Hard rules: `harness` and `task` know nothing of models; `model`, `engine`, `train` and `tensor`
//! know nothing of agents, episodes or sandboxes; `episode` reaches a model only through
//! [`policy::Policy`] and execution only through the harness API.

pub mod panics;
pub mod tensor;
pub mod model;
pub mod engine;
pub mod train;
pub mod task;
pub mod harness;
pub mod policy;
pub mod serve;
pub mod agent;
pub mod episode;
pub mod pipeline;
pub mod cli;
