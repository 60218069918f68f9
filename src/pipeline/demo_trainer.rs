//! The trainer a `demo train` run's GRPO phase drives ([`DemoTrainer`]): the CPU trainer (its
//! weights lent to a CPU engine for rollouts and evaluations) or the device trainer (ONE copy of
//! the weights on a CUDA device or the emulated one, lent to an engine on that device). The
//! demo times the rollout and the update of each iteration apart, evaluates held-back tasks on
//! the current weights between iterations and writes checkpoints; this is all it needs of a
//! trainer.

use crate::engine::Engine;
use crate::train::checkpoint::{save, SHARD_BYTES};
use crate::train::device::DeviceTrainer;
use crate::train::dynamic::{Collected, DynamicSamplingConfig};
use crate::train::error::Result;
use crate::train::iteration::{collect_through, update_phase, EngineSetup};
use crate::train::rollout::{GroupSampler, Rollout};
use crate::train::trainer::{StepReport, Trainer};
use crate::engine::cuda_backend::CudaDecoder;
use crate::engine::DecoderModel;
use crate::tensor::cuda::Act;
use std::path::Path;

/// Tokens per micro-batch of a CPU update (the device trainer runs one sequence at a time).
const MICRO_BATCH_TOKENS: usize = 32_768;

/// What the demo's GRPO phase asks of a trainer.
pub trait DemoTrainer {
    /// Run `f` on an engine serving the current weights (the setup's tokenizer, chat template
    /// and limits), then take the weights back.
    fn with_engine<R>(&mut self, setup: &EngineSetup, f: impl FnOnce(&Engine) -> R) -> Result<R>;
    /// Collect groups with DAPO dynamic sampling through an engine on the current weights.
    fn rollouts(
        &mut self,
        setup: &EngineSetup,
        sampler: &mut dyn GroupSampler,
        sampling: &DynamicSamplingConfig,
    ) -> Result<Collected<Vec<Rollout>>> {
        self.with_engine(setup, |engine| collect_through(engine, sampler, sampling))?
    }
    /// One GRPO update on the collected groups (`None`: every advantage was zero).
    fn update(&mut self, collected: &Collected<Vec<Rollout>>) -> Result<Option<StepReport>>;
    /// A checkpoint with optimizer state at `dir` (config and tokenizer files from `source`).
    fn save(&self, dir: &Path, source: &Path) -> Result<()>;
}

impl DemoTrainer for Trainer {
    fn with_engine<R>(&mut self, setup: &EngineSetup, f: impl FnOnce(&Engine) -> R) -> Result<R> {
        Trainer::with_engine(self, setup.tokenizer.clone(), setup.template()?, setup.config, f)
    }

    fn update(&mut self, collected: &Collected<Vec<Rollout>>) -> Result<Option<StepReport>> {
        Ok(update_phase(self, collected, MICRO_BATCH_TOKENS)?.update)
    }

    fn save(&self, dir: &Path, source: &Path) -> Result<()> {
        save(dir, source, &self.model.store, Some(&self.opt), SHARD_BYTES)
    }
}

impl<A: Act> DemoTrainer for DeviceTrainer<A>
where
    CudaDecoder<A>: DecoderModel,
{
    fn with_engine<R>(&mut self, setup: &EngineSetup, f: impl FnOnce(&Engine) -> R) -> Result<R> {
        DeviceTrainer::with_engine(self, setup.tokenizer.clone(), setup.template()?, setup.config, f)
    }

    fn update(&mut self, collected: &Collected<Vec<Rollout>>) -> Result<Option<StepReport>> {
        Ok(self.update_phase(collected)?.update)
    }

    fn save(&self, dir: &Path, source: &Path) -> Result<()> {
        DeviceTrainer::save(self, dir, source)
    }
}
