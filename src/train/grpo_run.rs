//! `train grpo` runs: a TOML config mirroring the paper's App. A (groups × group size with DAPO
//! dynamic sampling, clip 0.2/0.28, KL 0, AdamW β 0.9/0.98, lr, weight decay, constant
//! schedule, save interval, tokens per micro-batch), the built-in verifiable task, the loop of
//! [`grpo_iteration_at`]s (one JSON line of metrics each), and HF checkpoints with optimizer
//! state (`<out>/step-<n>` after every `save_every`-th iteration and `<out>/final`, each
//! recording the iterations completed). `resume` continues from such a checkpoint, on the CPU
//! trainer or the device trainer (`device = …`).

use super::checkpoint::{load_optimizer, read_progress, save_at, RunProgress, SHARD_BYTES};
use super::dynamic::DynamicSamplingConfig;
use super::error::{Result, TrainError};
use super::grpo::GrpoConfig;
use super::iteration::{grpo_iteration_at, EngineSetup, IterationReport};
use super::network::{TapeOptions, TrainModel};
use super::optim::{AdamW, AdamWConfig, Schedule};
use super::rollout::GroupSampler;
use super::run_device::run_placement;
use super::toy::{MultipleOf8Task, ToyTaskConfig};
use super::trainer::Trainer;
use super::device::DeviceTrainer;
use super::lora::LoraConfig;
use crate::engine::cuda_backend::CudaDecoder;
use crate::engine::{DecoderModel, DeviceChoice, EngineConfig, Placement};
use crate::model::backend::cuda::CudaModel;
use crate::tensor::cuda::{Act, ActType, DeviceKind, Gpu};
use crate::model::tokenizer::Tokenizer;
use serde::Deserialize;
use std::path::{Path, PathBuf};

fn default_schedule() -> Schedule {
    Schedule::Constant
}

fn default_cap() -> usize {
    // App. A: maximum tokens per GPU.
    32_768
}

/// The task `train grpo` runs built in here; other names are tasks of the layers above (agent
/// episodes), which supply their own [`GroupSampler`].
pub const TOY_TASK: &str = "toy-multiple-of-8";

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpoRunConfig {
    /// Hugging Face model folder to start from.
    pub model: PathBuf,
    /// Folder with `tokenizer.json` (default: the model folder).
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// Output folder for checkpoints.
    pub out: PathBuf,
    /// [`TOY_TASK`], or a task defined above this layer (`test`, `repair`: agent episodes).
    pub task: String,
    pub steps: u64,
    #[serde(default)]
    pub seed: u64,
    /// Save every this many iterations (0: only the final checkpoint).
    #[serde(default)]
    pub save_every: u64,
    #[serde(default = "default_cap")]
    pub max_tokens_per_micro_batch: usize,
    #[serde(default)]
    pub recompute: bool,
    #[serde(default)]
    pub sampling: DynamicSamplingConfig,
    #[serde(default)]
    pub grpo: GrpoConfig,
    #[serde(default)]
    pub optimizer: AdamWConfig,
    #[serde(default = "default_schedule")]
    pub schedule: Schedule,
    #[serde(default)]
    pub toy: ToyTaskConfig,
    /// Settings of a task defined above this layer (`[agent]`), passed through unread.
    #[serde(default)]
    pub agent: Option<toml::Table>,
    /// Where rollouts are sampled: `cpu` (default: the trainer's weights are lent to the CPU
    /// engine), `cuda`, `cuda:N` or `emulator`, optionally `:bf16`/`:f32`: rollouts AND
    /// updates on that device (`train::device::DeviceTrainer`, one copy of the weights).
    #[serde(default)]
    pub device: Option<String>,
    /// `[lora]`: train LoRA adapters only (the device trainer, `device = …`), the served weights
    /// the merged `W₀ + s·B·A` after each update; checkpoints hold the merged model.
    #[serde(default)]
    pub lora: Option<LoraConfig>,
    /// Continue the run saved at this checkpoint (`<out>/step-<n>` or `final` of an earlier
    /// run, relative to the config file): its weights, AdamW moments, settings and step, and its
    /// iteration count — the run goes on from there to `steps` iterations in all, numbering
    /// iterations and `step-<n>` checkpoints as the uninterrupted run would. Each iteration's
    /// draws are seeded from `seed` and the iteration ([`GroupSampler::begin_iteration`]), so
    /// the resumed run does not replay the first run's draws. Not with `[lora]`.
    #[serde(default)]
    pub resume: Option<PathBuf>,
}

impl GrpoRunConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| TrainError::Io {
            path: path.into(),
            source,
        })?;
        let mut c: GrpoRunConfig =
            toml::from_str(&text).map_err(|e| TrainError::BadInput(format!("{}: {e}", path.display())))?;
        // Relative paths are relative to the config file's folder.
        let base = path.parent().unwrap_or(Path::new("."));
        for p in [Some(&mut c.model), Some(&mut c.out), c.tokenizer.as_mut(), c.resume.as_mut()]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        if c.lora.is_some() && c.resume.is_some() {
            return Err(TrainError::BadInput(format!("{}: resume is not supported with lora", path.display())));
        }
        if c.steps == 0 || c.max_tokens_per_micro_batch == 0 {
            return Err(TrainError::BadInput(format!(
                "{}: steps and max_tokens_per_micro_batch must be > 0",
                path.display()
            )));
        }
        Ok(c)
    }

    /// Where a run with `resume` continues (`None` without): the checkpoint's optimizer step
    /// and completed iterations. A missing folder or one without (or with a malformed)
    /// `trainer_state.json` is a `BadInput` naming it.
    pub fn resume_point(&self) -> Result<Option<RunProgress>> {
        self.resume.as_deref().map(read_progress).transpose()
    }
}

/// The sampler of a task built in here (`None` for tasks of the layers above).
pub fn builtin_sampler(c: &GrpoRunConfig) -> Option<Box<dyn GroupSampler>> {
    (c.task == TOY_TASK).then(|| Box::new(MultipleOf8Task::new(c.toy.clone(), c.seed)) as Box<dyn GroupSampler>)
}

/// Run the configured GRPO with `sampler`; `on_step` sees each iteration's report. Returns the
/// final checkpoint path. With `resume`, the run continues the checkpoint's: its weights and
/// optimizer state, from its iteration up to `steps` in all (see [`GrpoRunConfig::resume`]).
pub fn run_grpo(
    c: &GrpoRunConfig,
    sampler: &mut dyn GroupSampler,
    on_step: impl FnMut(&IterationReport),
) -> Result<PathBuf> {
    let placement = run_placement(c.device.as_deref())?;
    let start = c.resume_point()?.map_or(0, |p| p.iteration);
    let tokenizer_dir = c.tokenizer.as_deref().unwrap_or(&c.model);
    let tokenizer =
        Tokenizer::from_dir(tokenizer_dir).map_err(|e| TrainError::BadInput(format!("tokenizer: {e}")))?;
    let setup = EngineSetup {
        tokenizer,
        template_dir: sampler.needs_chat_template().then(|| tokenizer_dir.to_path_buf()),
        config: EngineConfig::default(),
    };
    if let DeviceChoice::Gpu(kind) = placement.device {
        return match placement.act_type() {
            ActType::Bf16 => grpo_loop(c, &mut device_trainer::<u16>(c, kind)?, start, &setup, sampler, on_step),
            ActType::F32 => grpo_loop(c, &mut device_trainer::<f32>(c, kind)?, start, &setup, sampler, on_step),
        };
    }
    if c.lora.is_some() {
        return Err(TrainError::BadInput("[lora] in train grpo needs device = \"cuda\" or \"emulator\" (the device trainer)".into()));
    }
    let (model, opt) = match &c.resume {
        Some(r) => {
            let model = TrainModel::load(r)?;
            let opt = load_optimizer(r, &model.store)?;
            (model, opt)
        }
        None => {
            let model = TrainModel::load(&c.model)?;
            let opt = AdamW::new(c.optimizer, &model.store);
            (model, opt)
        }
    };
    let tr = Trainer {
        model,
        opt,
        schedule: c.schedule,
        tape: TapeOptions { recompute: c.recompute },
        grpo: c.grpo,
        lora: None,
    };
    grpo_loop(c, &mut CpuRun { tr, placement }, start, &setup, sampler, on_step)
}

/// The device trainer of a run ([`DeviceTrainer`] over one copy of the weights on `kind`: each
/// sequence is its own micro-batch; checkpoints hold the fp32 masters and the AdamW state in the
/// CPU trainer's format): from the model folder or, with `resume`, from the checkpoint's
/// weights and optimizer state (`DeviceTrainer::resume`).
fn device_trainer<A: Act>(c: &GrpoRunConfig, kind: DeviceKind) -> Result<DeviceTrainer<A>>
where
    CudaDecoder<A>: DecoderModel,
{
    let gpu = Gpu::open(kind)?;
    let mut tr = match (&c.resume, &c.lora) {
        (Some(r), _) => DeviceTrainer::resume(gpu, r)?,
        (None, Some(l)) => {
            let model = CudaModel::<A>::load(&gpu, &c.model)?;
            let prefix = crate::model::checkpoint::Checkpoint::open(&c.model)?.full_name("");
            DeviceTrainer::new_lora(gpu, model, c.optimizer, l.clone(), &prefix)?
        }
        (None, None) => {
            let model = CudaModel::<A>::load(&gpu, &c.model)?;
            DeviceTrainer::new(gpu, model, c.optimizer)?
        }
    };
    tr.schedule = c.schedule;
    tr.grpo = c.grpo;
    tr.tape = TapeOptions { recompute: c.recompute };
    Ok(tr)
}

/// The CPU trainer with the placement of its rollouts.
struct CpuRun {
    tr: Trainer,
    placement: Placement,
}

/// What the GRPO loop drives: the CPU trainer or the device trainer.
trait GrpoTrainer {
    /// One iteration: rollouts, then an update unless the collection was capped.
    fn iteration(&mut self, c: &GrpoRunConfig, setup: &EngineSetup, sampler: &mut dyn GroupSampler) -> Result<IterationReport>;
    /// Write a checkpoint at `dir` after `iteration` completed iterations (config and tokenizer
    /// files from `c.model`).
    fn save(&self, c: &GrpoRunConfig, dir: &Path, iteration: u64) -> Result<()>;
}

impl GrpoTrainer for CpuRun {
    fn iteration(&mut self, c: &GrpoRunConfig, setup: &EngineSetup, sampler: &mut dyn GroupSampler) -> Result<IterationReport> {
        grpo_iteration_at(&mut self.tr, setup, self.placement, sampler, &c.sampling, c.max_tokens_per_micro_batch)
    }
    fn save(&self, c: &GrpoRunConfig, dir: &Path, iteration: u64) -> Result<()> {
        save_at(dir, &c.model, &self.tr.model.store, Some(&self.tr.opt), SHARD_BYTES, Some(iteration))
    }
}

impl<A: Act> GrpoTrainer for DeviceTrainer<A>
where
    CudaDecoder<A>: DecoderModel,
{
    fn iteration(&mut self, c: &GrpoRunConfig, setup: &EngineSetup, sampler: &mut dyn GroupSampler) -> Result<IterationReport> {
        DeviceTrainer::iteration(self, setup, sampler, &c.sampling)
    }
    fn save(&self, c: &GrpoRunConfig, dir: &Path, iteration: u64) -> Result<()> {
        self.save_at(dir, &c.model, SHARD_BYTES, Some(iteration))
    }
}

/// The iterations `start..steps` ([`GroupSampler::begin_iteration`] before each, the report's
/// `iteration` the 0-based index in the whole run), a checkpoint `step-<n>` after every
/// `save_every`-th iteration `n` and `final` at the end.
fn grpo_loop(
    c: &GrpoRunConfig,
    tr: &mut impl GrpoTrainer,
    start: u64,
    setup: &EngineSetup,
    sampler: &mut dyn GroupSampler,
    mut on_step: impl FnMut(&IterationReport),
) -> Result<PathBuf> {
    for i in start..c.steps {
        sampler.begin_iteration(i, c.sampling.groups);
        let mut rep = tr.iteration(c, setup, sampler)?;
        rep.iteration = i;
        on_step(&rep);
        if c.save_every > 0 && (i + 1) % c.save_every == 0 {
            tr.save(c, &c.out.join(format!("step-{}", i + 1)), i + 1)?;
        }
    }
    let fin = c.out.join("final");
    tr.save(c, &fin, start.max(c.steps))?;
    Ok(fin)
}
