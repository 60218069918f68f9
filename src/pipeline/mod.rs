//! Pipeline layer: orchestration over many tasks for training and evaluation.
//!
//! - [`score`]: a finished Test or Repair rollout in the terms of the paper's rewards (offline
//!   audit of a Test bundle; selected-test and official outcome of a Repair terminal patch).
//! - [`grpo`]: `train grpo` on agent tasks — groups of Test or Repair episodes sampled through
//!   the engine the trainer lent its weights to, scored, turned into training sequences.
//! - [`teacher`], [`test_teacher`], [`role_mix`], [`demo`], [`demo_trainer`], [`demo_report`], [`curve`]: `demo
//!   train` — scripted teacher trajectories of both roles → SFT → GRPO with Repair and Test
//!   groups on a small model, its metrics, report and reward curve.
//!
//! - [`durable`]: append-and-fsync result logs keyed by input hashes, atomic writes, markers.
//! - [`jobs`]: the bounded batch runner whose items fail alone.
//! - [`eval`]: `execcritic eval`, the paper's generated-test evaluation protocol (Table 9, §A.3).
//!
//! The single-task commands (`gen-test`, `repair`, `demo`, `bench`) drive episodes directly from
//! `cli`.

pub mod durable;
pub mod eval;
pub mod grpo;
pub mod jobs;
pub mod score;
pub mod curve;
pub mod demo;
pub mod demo_report;
pub mod demo_trainer;
pub mod teacher;
pub mod test_teacher;
pub mod role_mix;
