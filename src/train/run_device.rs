//! The `device = "…"` setting of the `train sft` and `train grpo` configs: where a run trains —
//! `cpu` (the default: the CPU trainer) or a CUDA device (`cuda`, `cuda:N`, `emulator`,
//! optionally `:bf16`/`:f32`: the device trainer, `train::device::DeviceTrainer`).

use super::error::{Result, TrainError};
use crate::engine::Placement;

/// The placement named by a run config's `device` (the default placement when absent); an
/// unknown device is a `BadInput` naming the setting.
pub fn run_placement(device: Option<&str>) -> Result<Placement> {
    match device {
        Some(d) => d.parse().map_err(|e| TrainError::BadInput(format!("device = {d:?}: {e}"))),
        None => Ok(Placement::default()),
    }
}
