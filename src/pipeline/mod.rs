//! Pipeline layer: evaluation and training orchestration over many tasks (run directories,
//! resumable records, `execcritic eval`, the GRPO rollout loop of `execcritic train grpo`).
//!
//! Empty so far: the single-task commands (`gen-test`, `repair`, `demo`, `bench`) drive episodes
//! directly from `cli`, and GRPO updates exist only as the library call `train::Trainer`.
