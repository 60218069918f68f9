//! [`DeviceTrainer`]: GRPO (and SFT) entirely on one device, over ONE copy of the weights. For
//! a rollout phase the trainer lends its `CudaModel` to an engine on the same `Gpu` (moved into
//! a `CudaDecoder`, no upload, no copy) and takes it back when the engine stops; the update
//! then runs per sequence the device training forward (the rollout's routing replayed), the
//! loss on the device (`LossRows` + `token_loss`: the clipped GRPO ratio with clip-higher
//! against the engine's sampled log-probabilities, token-level aggregation over the batch),
//! the device backward accumulating into the fp32 gradients, and one `DeviceAdamW` step per
//! iteration that rewrites the serving weights in place — what the next rollouts sample from.

use super::DeviceTrainModel;
use crate::engine::cuda_backend::CudaDecoder;
use crate::engine::placement::device_config;
use crate::engine::{Engine, EngineConfig};
use crate::model::chat::ChatTemplate;
use crate::model::tokenizer::Tokenizer;
use crate::model::backend::cuda::CudaModel;
use crate::tensor::cuda::backward::{token_loss, LossRows, TokenObjective};
use crate::tensor::cuda::{Act, Gpu};
use crate::train::checkpoint::{save_at, SHARD_BYTES};
use crate::train::device_optim::DeviceAdamW;
use crate::train::dynamic::{Collected, DynamicSamplingConfig};
use crate::train::error::{Result, TrainError};
use crate::train::grpo::{grpo_denominator, is_active, GrpoConfig, GrpoSample};
use crate::train::iteration::{capped_report, collect_through, engine_template, EngineSetup, IterationReport};
use crate::train::loss::sft_denominator;
use crate::train::network::TapeOptions;
use crate::train::optim::{AdamWConfig, Schedule};
use crate::train::policy::device_decoder;
use crate::train::rollout::{grpo_batch, GroupSampler, Rollout};
use crate::train::trainer::{SftExample, StepReport};
use std::path::Path;

/// The device trainer: the weights (absent while lent to an engine, or lost when an engine
/// failed), their device AdamW, the schedule and the GRPO settings.
pub struct DeviceTrainer<A: Act> {
    gpu: Gpu,
    model: Option<DeviceTrainModel<A>>,
    pub opt: DeviceAdamW,
    pub schedule: Schedule,
    pub grpo: GrpoConfig,
    /// Activation recomputation in the update's forwards (the CPU trainer's `tape` option).
    pub tape: TapeOptions,
}

/// One sequence of an update: its ids, replayed routing and loss rows' inputs.
struct Seq<'a> {
    ids: &'a [u32],
    routing: Option<&'a [Vec<u32>]>,
    mask: &'a [bool],
    /// GRPO: rollout log-probabilities and advantage; SFT: none.
    grpo: Option<(&'a [f32], f32)>,
}

impl<A: Act> DeviceTrainer<A>
where
    CudaDecoder<A>: crate::engine::DecoderModel,
{
    /// Train `model` (already on `gpu`) with AdamW under `opt`, constant schedule, default GRPO
    /// settings, every activation kept.
    pub fn new(gpu: Gpu, model: CudaModel<A>, opt: AdamWConfig) -> Result<Self> {
        let mut model = DeviceTrainModel::new(&gpu, model)?;
        let opt = model.optimizer(&gpu, opt)?;
        let (schedule, grpo, tape) = (Schedule::Constant, GrpoConfig::default(), TapeOptions::default());
        Ok(DeviceTrainer { gpu, model: Some(model), opt, schedule, grpo, tape })
    }

    /// [`Self::new`] with LoRA: only the adapters of `lora` train (`DeviceTrainModel::with_lora`;
    /// `prefix`: the checkpoint's decoder prefix the targets are matched under).
    pub fn new_lora(gpu: Gpu, model: CudaModel<A>, opt: AdamWConfig, lora: crate::train::lora::LoraConfig, prefix: &str) -> Result<Self> {
        let mut model = DeviceTrainModel::with_lora(&gpu, model, lora, prefix)?;
        let opt = model.optimizer(&gpu, opt)?;
        Ok(DeviceTrainer { gpu, model: Some(model), opt, schedule: Schedule::Constant, grpo: GrpoConfig::default(), tape: TapeOptions::default() })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The weights and gradients (an error while they are lent or were lost).
    pub fn model(&self) -> Result<&DeviceTrainModel<A>> {
        self.model.as_ref().ok_or(TrainError::WeightsAway)
    }

    /// The weights and gradients, writable (e.g. to form gradients outside a step).
    pub fn model_mut(&mut self) -> Result<&mut DeviceTrainModel<A>> {
        self.model.as_mut().ok_or(TrainError::WeightsAway)
    }

    /// Collect groups from `sampler` through an engine on the trainer's weights
    /// ([`Self::with_engine`]).
    pub fn rollout_phase(
        &mut self,
        setup: &EngineSetup,
        sampler: &mut dyn GroupSampler,
        sampling: &DynamicSamplingConfig,
    ) -> Result<Collected<Vec<Rollout>>> {
        let template = engine_template(setup, sampler)?;
        self.with_engine(setup.tokenizer.clone(), template, setup.config, |engine| collect_through(engine, sampler, sampling))?
    }

    /// Run `f` on an engine on this device serving the trainer's weights (moved into the
    /// engine's decoder, no copy; limits capped by `device_config`), then stop the engine and
    /// take the weights back. Should the engine fail to start or stop, the weights are lost
    /// with it and later calls fail with `WeightsAway`.
    pub fn with_engine<R>(
        &mut self,
        tokenizer: Tokenizer,
        template: Option<ChatTemplate>,
        config: EngineConfig,
        f: impl FnOnce(&Engine) -> R,
    ) -> Result<R> {
        let dtm = self.model.take().ok_or(TrainError::WeightsAway)?;
        let (model, grads) = dtm.lend();
        let config = device_config(config);
        let decoder = device_decoder(self.gpu.clone(), model, &config)?;
        let engine = Engine::start(decoder, tokenizer, template, config)?;
        let r = f(&engine);
        let decoder: CudaDecoder<A> = engine.stop()?;
        self.model = Some(DeviceTrainModel::reassemble(decoder.into_model(), grads));
        Ok(r)
    }

    /// One GRPO iteration: [`Self::rollout_phase`] then [`Self::update_phase`]; a collection
    /// that reached the dynamic-sampling cap is an iteration without an update
    /// ([`capped_report`]).
    pub fn iteration(
        &mut self,
        setup: &EngineSetup,
        sampler: &mut dyn GroupSampler,
        sampling: &DynamicSamplingConfig,
    ) -> Result<IterationReport> {
        let iteration = self.opt.step;
        match self.rollout_phase(setup, sampler, sampling) {
            Ok(collected) => self.update_phase(&collected),
            Err(e) => capped_report(iteration, &e).ok_or(e),
        }
    }

    /// One GRPO update on the collected groups: [`Self::grpo_step`] and the iteration's report.
    pub fn update_phase(&mut self, collected: &Collected<Vec<Rollout>>) -> Result<IterationReport> {
        let iteration = self.opt.step;
        let update = self.grpo_step(&grpo_batch(&collected.kept))?;
        Ok(IterationReport::new(iteration, collected, update))
    }

    /// One GRPO update (`None` when no sample is active: every advantage zero).
    pub fn grpo_step(&mut self, batch: &[GrpoSample<'_>]) -> Result<Option<StepReport>> {
        let cfg = self.grpo;
        let denom = grpo_denominator(&cfg, batch);
        if denom == 0 {
            return Ok(None);
        }
        if batch.iter().any(|s| s.ref_logprobs.is_some() || cfg.kl_coef != 0.0) {
            return Err(TrainError::BadInput("the device trainer has no reference policy (kl_coef must be 0)".into()));
        }
        let seqs: Vec<Seq<'_>> = batch
            .iter()
            .filter(|s| is_active(&cfg, s))
            .map(|s| Seq { ids: s.ids, routing: s.routing, mask: s.train_mask, grpo: Some((s.old_logprobs, s.advantage)) })
            .collect();
        let objective = TokenObjective::Grpo { clip_low: cfg.clip_low, clip_high: cfg.clip_high, kl_coef: 0.0 };
        self.update(&seqs, objective, denom).map(Some)
    }

    /// One SFT update over `batch` (loss = mean over the batch's trained tokens).
    pub fn sft_step(&mut self, batch: &[SftExample]) -> Result<StepReport> {
        let masks: Vec<&[bool]> = batch.iter().map(|e| &e.mask[..]).collect();
        let denom = sft_denominator(&masks);
        if denom == 0 {
            return Err(TrainError::BadInput("the batch has no trained tokens".into()));
        }
        let seqs: Vec<Seq<'_>> =
            batch.iter().map(|e| Seq { ids: &e.ids, routing: None, mask: &e.mask, grpo: None }).collect();
        self.update(&seqs, TokenObjective::Sft, denom)
    }

    /// Zero the gradients, accumulate every sequence's loss gradient (one forward and backward
    /// at a time, each tape dropped after its backward), one AdamW step.
    fn update(&mut self, seqs: &[Seq<'_>], objective: TokenObjective, denom: usize) -> Result<StepReport> {
        let gpu = self.gpu.clone();
        let model = self.model.as_mut().ok_or(TrainError::WeightsAway)?;
        model.zero_grads(&gpu)?;
        let v = model.cfg().vocab_size;
        let (mut total, mut tokens) = (0.0f64, 0usize);
        for s in seqs {
            let tape = model.forward_with(&gpu, s.ids, s.routing, self.tape)?;
            let rows = match s.grpo {
                Some((old, adv)) => LossRows::grpo(&gpu, s.ids, s.mask, old, None, adv, v)?,
                None => LossRows::sft(&gpu, s.ids, s.mask, v)?,
            };
            let t = s.ids.len();
            let (mut loss, mut logp, mut dlogits) = (gpu.zeros::<f32>(t)?, gpu.zeros::<f32>(t)?, gpu.zeros::<A>(t * v)?);
            token_loss(&gpu, &tape.logits, v, &rows, objective, denom as f64, &mut loss, &mut logp, &mut dlogits)?;
            model.backward(&gpu, &tape, &dlogits)?;
            total += gpu.download(&loss)?.iter().map(|&x| x as f64).sum::<f64>();
            tokens += s.mask.iter().skip(1).filter(|&&b| b).count();
        }
        let stats = model.step(&gpu, &mut self.opt, &self.schedule)?;
        Ok(StepReport { step: self.opt.step, loss: total, tokens, micro_batches: seqs.len(), stats })
    }

    /// Per trained token of `ids`, the device training forward's log-probability of that token
    /// (0 elsewhere), `routing` replayed — what the engine's sampled log-probabilities are
    /// compared with.
    pub fn token_logprobs(&self, ids: &[u32], mask: &[bool], routing: Option<&[Vec<u32>]>) -> Result<Vec<f32>> {
        let gpu = &self.gpu;
        let model = self.model()?;
        let v = model.cfg().vocab_size;
        let tape = model.forward(gpu, ids, routing)?;
        let rows = LossRows::sft(gpu, ids, mask, v)?;
        let t = ids.len();
        let (mut loss, mut logp, mut dlogits) = (gpu.zeros::<f32>(t)?, gpu.zeros::<f32>(t)?, gpu.zeros::<A>(t * v)?);
        token_loss(gpu, &tape.logits, v, &rows, TokenObjective::Sft, 1.0, &mut loss, &mut logp, &mut dlogits)?;
        // Row `t` holds the log-probability of `ids[t + 1]`.
        let rowwise = gpu.download(&logp)?;
        let mut out = vec![0.0; t];
        for i in 1..t {
            if mask[i] {
                out[i] = rowwise[i - 1];
            }
        }
        Ok(out)
    }

    /// Write the fp32 masters and the AdamW state as a Hugging Face checkpoint at `dir` in the
    /// CPU trainer's format (`train::checkpoint::save`: the source model's dtype, config and
    /// tokenizer files copied from `source`, `optimizer.safetensors` and `trainer_state.json`), so
    /// that the run resumes ([`Self::resume`], or the CPU trainer's `load_optimizer`).
    pub fn save(&self, dir: &Path, source: &Path) -> Result<()> {
        self.save_sharded(dir, source, SHARD_BYTES)
    }

    /// [`Self::save`] with shards of at most `shard_bytes` of tensor data.
    pub fn save_sharded(&self, dir: &Path, source: &Path, shard_bytes: usize) -> Result<()> {
        self.save_at(dir, source, shard_bytes, None)
    }

    /// [`Self::save_sharded`] recording the run's completed `iteration` count
    /// (`train::checkpoint::save_at`).
    pub fn save_at(&self, dir: &Path, source: &Path, shard_bytes: usize, iteration: Option<u64>) -> Result<()> {
        let prefix = crate::model::checkpoint::Checkpoint::open(source)?.full_name("");
        let (store, opt) = self.model()?.host_state(&self.gpu, &self.opt, &prefix)?;
        save_at(dir, source, &store, opt.as_ref(), shard_bytes, iteration)
    }

    /// A trainer continuing the run saved at `dir` (by [`Self::save`] or by the CPU trainer,
    /// with optimizer state): the serving weights loaded from it, the fp32 masters, moments,
    /// step and AdamW settings of the checkpoint (as the CPU trainer's `load_optimizer`: the
    /// saved settings, not new ones). The schedule and GRPO settings are the defaults.
    pub fn resume(gpu: Gpu, dir: &Path) -> Result<Self> {
        let model = CudaModel::<A>::load(&gpu, dir)?;
        let mut tr = Self::new(gpu, model, AdamWConfig::default())?;
        tr.model.as_ref().ok_or(TrainError::WeightsAway)?.load_state(&tr.gpu, &mut tr.opt, dir)?;
        Ok(tr)
    }
}
