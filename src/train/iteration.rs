//! One GRPO iteration through the real engine: lend the trainer's weights to an engine, collect
//! groups with DAPO dynamic sampling from a [`GroupSampler`], give the weights back, then one
//! clipped-policy update with routing replay in micro-batches ([`rollout_phase`] and
//! [`update_phase`]; [`grpo_iteration`] runs both). Knows nothing of what a task is.
//!
//! A collection that reaches the dynamic-sampling cap (every group drawn was all right or all
//! wrong: a policy that has saturated the task, or not yet reached it) is an iteration without
//! an update ([`capped_report`], `capped: true` in the metrics), not the end of the run.

use super::dynamic::{collect_groups, Collected, DynamicSamplingConfig, DynamicSamplingError};
use super::error::{Result, TrainError};
use super::rollout::{grpo_batch, GroupSampler, Rollout};
use super::trainer::{StepReport, Trainer};
use crate::engine::{DeviceChoice, EngineConfig, Placement};
use crate::model::chat::ChatTemplate;
use crate::model::tokenizer::Tokenizer;
use serde::Serialize;
use std::path::PathBuf;

/// What the rollout engine is started with each iteration.
#[derive(Clone, Debug)]
pub struct EngineSetup {
    pub tokenizer: Tokenizer,
    /// Folder holding the chat template, when the sampler renders chats.
    pub template_dir: Option<PathBuf>,
    pub config: EngineConfig,
}

/// One iteration's metrics (one JSON line per step of `train grpo`).
#[derive(Clone, Debug, Serialize)]
pub struct IterationReport {
    /// 0-based iteration index (the update's optimizer step is `step`, when there is one).
    pub iteration: u64,
    /// Mean reward over every unaborted sample drawn this iteration, kept or not.
    pub mean_reward: f64,
    pub kept_groups: usize,
    pub skipped_groups: usize,
    pub aborted_samples: usize,
    /// The collection reached the dynamic-sampling cap with fewer groups with reward variance
    /// than wanted: no update this iteration.
    pub capped: bool,
    /// The update (loss, tokens, micro-batches, lr, grad norm); absent when every kept sample
    /// had zero advantage or the collection was capped.
    #[serde(flatten)]
    pub update: Option<StepReport>,
}

/// Lend the weights, collect groups, take the weights back (also when collecting fails).
pub fn rollout_phase(
    trainer: &mut Trainer,
    setup: &EngineSetup,
    sampler: &mut dyn GroupSampler,
    sampling: &DynamicSamplingConfig,
) -> Result<Collected<Vec<Rollout>>> {
    rollout_phase_at(trainer, setup, Placement::default(), sampler, sampling)
}

/// [`rollout_phase`] with the rollout engine at `placement`: on the CPU the weights are lent
/// (no copy); on a CUDA device they are uploaded once ([`Trainer::device_engine`]), so the
/// device model has the weights of the latest update.
pub fn rollout_phase_at(
    trainer: &mut Trainer,
    setup: &EngineSetup,
    placement: Placement,
    sampler: &mut dyn GroupSampler,
    sampling: &DynamicSamplingConfig,
) -> Result<Collected<Vec<Rollout>>> {
    let template = engine_template(setup, sampler)?;
    if let DeviceChoice::Gpu(_) = placement.device {
        let engine = trainer.device_engine(placement, setup.tokenizer.clone(), template, setup.config)?;
        return collect_through(&engine, sampler, sampling);
    }
    trainer.with_engine(setup.tokenizer.clone(), template, setup.config, |engine| collect_through(engine, sampler, sampling))?
}

/// The chat template the rollout engine is started with: the setup's, required when the
/// sampler renders chats.
pub(crate) fn engine_template(setup: &EngineSetup, sampler: &dyn GroupSampler) -> Result<Option<ChatTemplate>> {
    match (setup.template()?, sampler.needs_chat_template()) {
        (None, true) => Err(TrainError::BadInput("this task renders chats: the engine needs the model's chat template".into())),
        (template, _) => Ok(template),
    }
}

impl EngineSetup {
    /// The chat template of `template_dir`, when there is one.
    pub fn template(&self) -> Result<Option<ChatTemplate>> {
        self.template_dir
            .as_deref()
            .map(|dir| ChatTemplate::from_dir(dir).map_err(|e| TrainError::BadInput(format!("chat template: {e}"))))
            .transpose()
    }
}

/// Collect groups through `engine` (sampling errors wrapped).
pub(crate) fn collect_through(
    engine: &crate::engine::Engine,
    sampler: &mut dyn GroupSampler,
    sampling: &DynamicSamplingConfig,
) -> Result<Collected<Vec<Rollout>>> {
    collect_groups(sampling, |i| sampler.sample_group(engine, i, sampling.group_size))
        .map_err(|e| TrainError::Sampling(Box::new(e)))
}

impl IterationReport {
    /// The report of iteration `iteration`: `collected`'s counts and the update, if any.
    pub fn new(iteration: u64, collected: &Collected<Vec<Rollout>>, update: Option<StepReport>) -> Self {
        IterationReport {
            iteration,
            mean_reward: collected.mean_reward,
            kept_groups: collected.kept.len(),
            skipped_groups: collected.skipped,
            aborted_samples: collected.aborted_samples,
            capped: false,
            update,
        }
    }
}

/// The report of iteration `iteration` when collecting failed with `e`: `Some` (no update,
/// `capped: true`) when `e` is the dynamic-sampling cap, `None` for any other error.
pub fn capped_report(iteration: u64, e: &TrainError) -> Option<IterationReport> {
    let TrainError::Sampling(s) = e else { return None };
    let DynamicSamplingError::CapReached { kept, attempts, mean_reward, .. } = **s else { return None };
    Some(IterationReport {
        iteration,
        mean_reward,
        kept_groups: kept,
        skipped_groups: attempts - kept,
        aborted_samples: 0,
        capped: true,
        update: None,
    })
}

/// One GRPO update on the collected groups (routing replay where recorded).
pub fn update_phase(
    trainer: &mut Trainer,
    collected: &Collected<Vec<Rollout>>,
    max_tokens_per_micro_batch: usize,
) -> Result<IterationReport> {
    let iteration = trainer.opt.step;
    let batch = grpo_batch(&collected.kept);
    let update = trainer.grpo_step_capped(&batch, max_tokens_per_micro_batch)?;
    Ok(IterationReport::new(iteration, collected, update))
}

/// [`rollout_phase`] then [`update_phase`] (a capped collection: [`capped_report`]).
pub fn grpo_iteration(
    trainer: &mut Trainer,
    setup: &EngineSetup,
    sampler: &mut dyn GroupSampler,
    sampling: &DynamicSamplingConfig,
    max_tokens_per_micro_batch: usize,
) -> Result<IterationReport> {
    grpo_iteration_at(trainer, setup, Placement::default(), sampler, sampling, max_tokens_per_micro_batch)
}

/// [`grpo_iteration`] with the rollouts at `placement` (the update stays with the trainer).
pub fn grpo_iteration_at(
    trainer: &mut Trainer,
    setup: &EngineSetup,
    placement: Placement,
    sampler: &mut dyn GroupSampler,
    sampling: &DynamicSamplingConfig,
    max_tokens_per_micro_batch: usize,
) -> Result<IterationReport> {
    let iteration = trainer.opt.step;
    match rollout_phase_at(trainer, setup, placement, sampler, sampling) {
        Ok(collected) => update_phase(trainer, &collected, max_tokens_per_micro_batch),
        Err(e) => capped_report(iteration, &e).ok_or(e),
    }
}
