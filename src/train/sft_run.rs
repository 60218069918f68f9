//! `train sft` runs: a TOML config (model, data — JSONL of token ids + assistant masks, or agent
//! trajectory files rendered with the model's chat template — optimizer, schedule, steps, batch
//! size, checkpointing), the update loop over the data in order
//! (wrapping around), one JSON line of metrics per step, and HF checkpoints with optimizer state
//! (`<out>/step-<n>` every `save_every` steps and `<out>/final`). `resume` continues from a
//! checkpoint written by a previous run. `device = "…"` runs the updates on a CUDA device (a GPU
//! or the emulator) with the device trainer: same data, batches, schedule and checkpoints.

use super::checkpoint::{load_optimizer, save, SHARD_BYTES};
use super::device::DeviceTrainer;
use super::error::{Result, TrainError};
use super::grpo::GrpoConfig;
use super::lora::{Lora, LoraConfig};
use super::network::{TapeOptions, TrainModel};
use super::optim::{AdamW, AdamWConfig, Schedule};
use super::sft_data::{conversation_examples, Conversation};
use super::trainer::{SftExample, StepReport, Trainer};
use super::run_device::run_placement;
use crate::engine::cuda_backend::CudaDecoder;
use crate::engine::{DecoderModel, DeviceChoice};
use crate::model::backend::cuda::CudaModel;
use crate::model::chat::ChatTemplate;
use crate::tensor::cuda::{Act, ActType, DeviceKind, Gpu};
use crate::model::tokenizer::Tokenizer;
use serde::Deserialize;
use std::path::{Path, PathBuf};

fn default_schedule() -> Schedule {
    Schedule::Constant
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftConfig {
    /// Hugging Face model folder to start from.
    pub model: PathBuf,
    /// JSONL, one `{"ids": [...], "mask": [...]}` per line (mask true on assistant tokens).
    #[serde(default)]
    pub data: Option<PathBuf>,
    /// Instead of `data`: agent trajectory files (one path or a list), rendered with the model
    /// folder's chat template and tokenizer (see `train::sft_data`).
    #[serde(default)]
    pub trajectories: Option<Paths>,
    /// Output folder for checkpoints.
    pub out: PathBuf,
    pub steps: u64,
    pub batch_size: usize,
    #[serde(default)]
    pub save_every: u64,
    #[serde(default)]
    pub recompute: bool,
    /// Continue from this checkpoint (weights and optimizer state).
    #[serde(default)]
    pub resume: Option<PathBuf>,
    #[serde(default)]
    pub optimizer: AdamWConfig,
    #[serde(default = "default_schedule")]
    pub schedule: Schedule,
    #[serde(default)]
    pub shard_bytes: Option<usize>,
    /// Train LoRA adapters only (checkpoints hold the merged weights, no optimizer state).
    #[serde(default)]
    pub lora: Option<LoraConfig>,
    /// Where the updates run: `cpu` (default: the CPU trainer), `cuda`, `cuda:N` or `emulator`,
    /// optionally `:bf16`/`:f32`: the device trainer (`train::device::DeviceTrainer`; one
    /// sequence's forward and backward at a time; `recompute` and `lora` as on the CPU).
    #[serde(default)]
    pub device: Option<String>,
}

/// One path or a list of paths.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Paths {
    One(PathBuf),
    Many(Vec<PathBuf>),
}

impl Paths {
    pub fn paths(&self) -> &[PathBuf] {
        match self {
            Paths::One(p) => std::slice::from_ref(p),
            Paths::Many(v) => v,
        }
    }
    fn paths_mut(&mut self) -> &mut [PathBuf] {
        match self {
            Paths::One(p) => std::slice::from_mut(p),
            Paths::Many(v) => v,
        }
    }
}

/// Reads the conversations of one `trajectories` file. `train` knows nothing of agents: the caller
/// passes the agent layer's reader (`agent::trajectory::sft_conversations`).
pub type ConversationReader<'a> = &'a dyn Fn(&Path) -> std::result::Result<Vec<Conversation>, String>;

impl SftConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| TrainError::Io { path: path.into(), source })?;
        let mut c: SftConfig =
            toml::from_str(&text).map_err(|e| TrainError::BadInput(format!("{}: {e}", path.display())))?;
        // Relative paths are relative to the config file's folder.
        let base = path.parent().unwrap_or(Path::new("."));
        let data = c.data.iter_mut().chain(c.trajectories.iter_mut().flat_map(Paths::paths_mut));
        for p in [&mut c.model, &mut c.out].into_iter().chain(data) {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        match (&c.data, &c.trajectories) {
            (Some(_), None) => {}
            (None, Some(t)) if !t.paths().is_empty() => {}
            _ => {
                return Err(TrainError::BadInput(format!(
                    "{}: give exactly one of `data` (ids + mask JSONL) or `trajectories` (agent trajectory files)",
                    path.display()
                )))
            }
        }
        if let Some(r) = c.resume.as_mut().filter(|r| r.is_relative()) {
            *r = base.join(&*r);
        }
        if c.lora.is_some() && c.resume.is_some() {
            return Err(TrainError::BadInput(format!("{}: resume is not supported with lora", path.display())));
        }
        if c.batch_size == 0 || c.steps == 0 {
            return Err(TrainError::BadInput(format!("{}: steps and batch_size must be > 0", path.display())));
        }
        Ok(c)
    }
}

/// Read SFT examples from JSONL, checking lengths.
pub fn read_examples(path: &Path) -> Result<Vec<SftExample>> {
    let text = std::fs::read_to_string(path).map_err(|source| TrainError::Io { path: path.into(), source })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let e: SftExample = serde_json::from_str(line)
            .map_err(|e| TrainError::BadInput(format!("{}:{}: {e}", path.display(), i + 1)))?;
        if e.ids.len() != e.mask.len() || e.ids.len() < 2 {
            return Err(TrainError::BadInput(format!(
                "{}:{}: ids and mask must have the same length ≥ 2",
                path.display(),
                i + 1
            )));
        }
        out.push(e);
    }
    if out.is_empty() {
        return Err(TrainError::BadInput(format!("{}: no examples", path.display())));
    }
    Ok(out)
}

/// The configured training examples: `data` as is, or every conversation of the `trajectories`
/// files rendered with the chat template and tokenizer of the model folder.
pub fn load_examples(c: &SftConfig, read: ConversationReader<'_>) -> Result<Vec<SftExample>> {
    if let Some(d) = &c.data {
        return read_examples(d);
    }
    let files = c.trajectories.as_ref().map(Paths::paths).unwrap_or_default();
    let template =
        ChatTemplate::from_dir(&c.model).map_err(|e| TrainError::BadInput(format!("{}: {e}", c.model.display())))?;
    let tokenizer =
        Tokenizer::from_dir(&c.model).map_err(|e| TrainError::BadInput(format!("{}: {e}", c.model.display())))?;
    let mut out = Vec::new();
    for f in files {
        let convs = read(f).map_err(|e| TrainError::BadInput(format!("{}: {e}", f.display())))?;
        for (i, conv) in convs.iter().enumerate() {
            let ex = conversation_examples(&template, &tokenizer, conv)
                .map_err(|e| TrainError::BadInput(format!("{}, trajectory {}: {e}", f.display(), i + 1)))?;
            out.extend(ex);
        }
    }
    if out.is_empty() {
        return Err(TrainError::BadInput("the trajectories hold no conversation".into()));
    }
    Ok(out)
}

/// Run the configured SFT; `read` loads `trajectories` files (see [`ConversationReader`]);
/// `on_step` sees each step's report. Returns the final checkpoint path.
pub fn run_sft(c: &SftConfig, read: ConversationReader<'_>, on_step: impl FnMut(&StepReport)) -> Result<PathBuf> {
    let placement = run_placement(c.device.as_deref())?;
    let data = load_examples(c, read)?;
    if let DeviceChoice::Gpu(kind) = placement.device {
        return match placement.act_type() {
            ActType::Bf16 => sft_loop(c, &data, &mut device_trainer::<u16>(c, kind)?, on_step),
            ActType::F32 => sft_loop(c, &data, &mut device_trainer::<f32>(c, kind)?, on_step),
        };
    }
    let start = c.resume.as_deref().unwrap_or(&c.model);
    let model = TrainModel::load(start)?;
    let lora = c.lora.clone().map(|l| Lora::new(l, &model.store)).transpose()?;
    let opt = match (&c.resume, &lora) {
        (_, Some(l)) => AdamW::new(c.optimizer, &l.adapters),
        (Some(r), None) => load_optimizer(r, &model.store)?,
        (None, None) => AdamW::new(c.optimizer, &model.store),
    };
    let mut tr = Trainer {
        model,
        opt,
        schedule: c.schedule,
        tape: TapeOptions { recompute: c.recompute },
        grpo: GrpoConfig::default(),
        lora,
    };
    sft_loop(c, &data, &mut tr, on_step)
}

/// The device trainer of a run: on `kind`, from the model folder or, with `resume`, from the
/// checkpoint's weights and optimizer state (its own or the CPU trainer's).
fn device_trainer<A: Act>(c: &SftConfig, kind: DeviceKind) -> Result<DeviceTrainer<A>>
where
    CudaDecoder<A>: DecoderModel,
{
    let gpu = Gpu::open(kind)?;
    let mut tr = match &c.resume {
        Some(r) => DeviceTrainer::resume(gpu, r)?,
        None => {
            let model = CudaModel::<A>::load(&gpu, &c.model)?;
            match &c.lora {
                Some(l) => {
                    let prefix = crate::model::checkpoint::Checkpoint::open(&c.model)?.full_name("");
                    DeviceTrainer::new_lora(gpu, model, c.optimizer, l.clone(), &prefix)?
                }
                None => DeviceTrainer::new(gpu, model, c.optimizer)?,
            }
        }
    };
    tr.schedule = c.schedule;
    tr.tape = TapeOptions { recompute: c.recompute };
    Ok(tr)
}

/// What the SFT loop drives: the CPU trainer or the device trainer.
trait SftTrainer {
    /// Updates taken so far (a resumed run's count included).
    fn steps_done(&self) -> u64;
    fn step(&mut self, batch: &[SftExample]) -> Result<StepReport>;
    /// Write a checkpoint at `dir` (config and tokenizer files from `c.model`).
    fn save(&self, c: &SftConfig, dir: &Path) -> Result<()>;
}

impl SftTrainer for Trainer {
    fn steps_done(&self) -> u64 {
        self.opt.step
    }
    fn step(&mut self, batch: &[SftExample]) -> Result<StepReport> {
        self.sft_step(batch)
    }
    fn save(&self, c: &SftConfig, dir: &Path) -> Result<()> {
        let opt = self.lora.is_none().then_some(&self.opt);
        save(dir, &c.model, &self.model.store, opt, c.shard_bytes.unwrap_or(SHARD_BYTES))
    }
}

impl<A: Act> SftTrainer for DeviceTrainer<A>
where
    CudaDecoder<A>: DecoderModel,
{
    fn steps_done(&self) -> u64 {
        self.opt.step
    }
    fn step(&mut self, batch: &[SftExample]) -> Result<StepReport> {
        self.sft_step(batch)
    }
    fn save(&self, c: &SftConfig, dir: &Path) -> Result<()> {
        self.save_sharded(dir, &c.model, c.shard_bytes.unwrap_or(SHARD_BYTES))
    }
}

/// The update loop: batches of `batch_size` examples over `data` in order (wrapping around,
/// continuing where a resumed run stopped) until `steps` updates, a checkpoint every
/// `save_every` steps and `final`.
fn sft_loop(
    c: &SftConfig,
    data: &[SftExample],
    tr: &mut impl SftTrainer,
    mut on_step: impl FnMut(&StepReport),
) -> Result<PathBuf> {
    let mut cursor = (tr.steps_done() as usize * c.batch_size) % data.len();
    while tr.steps_done() < c.steps {
        let batch: Vec<SftExample> = (0..c.batch_size).map(|i| data[(cursor + i) % data.len()].clone()).collect();
        cursor = (cursor + c.batch_size) % data.len();
        let rep = tr.step(&batch)?;
        on_step(&rep);
        if c.save_every > 0 && rep.step % c.save_every == 0 {
            tr.save(c, &c.out.join(format!("step-{}", rep.step)))?;
        }
    }
    let fin = c.out.join("final");
    tr.save(c, &fin)?;
    Ok(fin)
}
