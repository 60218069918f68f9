//! Pipeline layer: orchestration over many tasks for training (and, later, evaluation).
//!
//! - [`score`]: a finished Test or Repair rollout in the terms of the paper's rewards (offline
//!   audit of a Test bundle; selected-test and official outcome of a Repair terminal patch).
//!
//! The single-task commands (`gen-test`, `repair`, `demo`, `bench`) drive episodes directly from
//! `cli`.

pub mod score;
