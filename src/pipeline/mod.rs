//! Pipeline layer: evaluation and training orchestration over many tasks (run directories,
//! resumable records).
