//! `train grpo` runs: a TOML config mirroring the paper's App. A (groups × group size with DAPO
//! dynamic sampling, clip 0.2/0.28, KL 0, AdamW β 0.9/0.98, lr, weight decay, constant
//! schedule, save interval, tokens per micro-batch), the built-in verifiable task, the loop of
//! [`grpo_iteration_at`]s (one JSON line of metrics each), and HF checkpoints with optimizer
//! state (`<out>/step-<n>` every `save_every` updates and `<out>/final`).

use super::checkpoint::{save, SHARD_BYTES};
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
use crate::engine::{DecoderModel, DeviceChoice, EngineConfig};
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
        for p in [Some(&mut c.model), Some(&mut c.out), c.tokenizer.as_mut()]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        if c.steps == 0 || c.max_tokens_per_micro_batch == 0 {
            return Err(TrainError::BadInput(format!(
                "{}: steps and max_tokens_per_micro_batch must be > 0",
                path.display()
            )));
        }
        Ok(c)
    }
}

/// The sampler of a task built in here (`None` for tasks of the layers above).
pub fn builtin_sampler(c: &GrpoRunConfig) -> Option<Box<dyn GroupSampler>> {
    (c.task == TOY_TASK).then(|| Box::new(MultipleOf8Task::new(c.toy.clone(), c.seed)) as Box<dyn GroupSampler>)
}

/// Run the configured GRPO with `sampler`; `on_step` sees each iteration's report. Returns the
/// final checkpoint path.
pub fn run_grpo(
    c: &GrpoRunConfig,
    sampler: &mut dyn GroupSampler,
    mut on_step: impl FnMut(&IterationReport),
) -> Result<PathBuf> {
    let placement = run_placement(c.device.as_deref())?;
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
            ActType::Bf16 => run_on_device::<u16>(c, kind, &setup, sampler, on_step),
            ActType::F32 => run_on_device::<f32>(c, kind, &setup, sampler, on_step),
        };
    }
    if c.lora.is_some() {
        return Err(TrainError::BadInput("[lora] in train grpo needs device = \"cuda\" or \"emulator\" (the device trainer)".into()));
    }
    let model = TrainModel::load(&c.model)?;
    let opt = AdamW::new(c.optimizer, &model.store);
    let mut tr = Trainer {
        model,
        opt,
        schedule: c.schedule,
        tape: TapeOptions { recompute: c.recompute },
        grpo: c.grpo,
        lora: None,
    };
    for i in 0..c.steps {
        let rep = grpo_iteration_at(
            &mut tr,
            &setup,
            placement,
            sampler,
            &c.sampling,
            c.max_tokens_per_micro_batch,
        )?;
        on_step(&rep);
        if c.save_every > 0 && (i + 1) % c.save_every == 0 {
            save(
                &c.out.join(format!("step-{}", i + 1)),
                &c.model,
                &tr.model.store,
                Some(&tr.opt),
                SHARD_BYTES,
            )?;
        }
    }
    let fin = c.out.join("final");
    save(&fin, &c.model, &tr.model.store, Some(&tr.opt), SHARD_BYTES)?;
    Ok(fin)
}

/// [`run_grpo`] with rollouts AND updates on a CUDA device (a GPU or the emulator): a
/// [`DeviceTrainer`] over one copy of the weights; each sequence is its own micro-batch;
/// checkpoints hold the fp32 masters and the AdamW state in the CPU trainer's format.
fn run_on_device<A: Act>(
    c: &GrpoRunConfig,
    kind: DeviceKind,
    setup: &EngineSetup,
    sampler: &mut dyn GroupSampler,
    mut on_step: impl FnMut(&IterationReport),
) -> Result<PathBuf>
where
    CudaDecoder<A>: DecoderModel,
{
    let gpu = Gpu::open(kind)?;
    let model = CudaModel::<A>::load(&gpu, &c.model)?;
    let mut tr = match &c.lora {
        Some(l) => {
            let prefix = crate::model::checkpoint::Checkpoint::open(&c.model)?.full_name("");
            DeviceTrainer::new_lora(gpu, model, c.optimizer, l.clone(), &prefix)?
        }
        None => DeviceTrainer::new(gpu, model, c.optimizer)?,
    };
    tr.schedule = c.schedule;
    tr.grpo = c.grpo;
    tr.tape = TapeOptions { recompute: c.recompute };
    for i in 0..c.steps {
        on_step(&tr.iteration(setup, sampler, &c.sampling)?);
        if c.save_every > 0 && (i + 1) % c.save_every == 0 {
            tr.save(&c.out.join(format!("step-{}", i + 1)), &c.model)?;
        }
    }
    let fin = c.out.join("final");
    tr.save(&fin, &c.model)?;
    Ok(fin)
}
