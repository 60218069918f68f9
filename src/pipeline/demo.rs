//! `execcritic demo train`: the smallest real training run that learns, end to end — teacher
//! trajectories of both agent roles (scripted policies with correct and incorrect solution
//! paths, real Repair and Test episodes in real sandboxes, [`super::teacher`],
//! [`super::test_teacher`]) → SFT of a small random-initialised Qwen3.5-MoE on them, mixed, each
//! conversation with its role's own prompts (assistant tokens only) → GRPO from the SFT
//! checkpoint on the same suite with Repair groups and, every `test_every` draws, a Test group
//! ([`super::role_mix`]; rollouts through the engine on the trainer's lent weights, eq. 6 / eq. 5
//! rewards from the harness, DAPO dynamic sampling, routing replay, checkpoints), with held-back
//! tasks of the suite evaluated (Repair) before SFT, after SFT, during and after GRPO.
//!
//! The run directory holds `config.toml`, `teacher.jsonl` + `trajectories.jsonl`, `sft.toml`,
//! checkpoints (`sft/final`, `grpo/step-<n>`, `grpo/final`), `rollouts.jsonl` / `eval.jsonl`
//! (one line per episode), `metrics.jsonl` (one line per SFT step, GRPO iteration and
//! evaluation), `reward_curve.svg` and `report.md` ([`super::demo_report`]).

use super::demo_report::{EvalMetrics, GrpoMetrics, RunSummary, SftMetrics, SplitScore};
use super::demo_trainer::DemoTrainer;
use super::grpo::{AgentSampler, AgentTaskConfig, Role};
use super::role_mix::RoleMix;
use super::teacher::{teacher_episodes, TeacherRecord};
use super::test_teacher::test_teacher_episodes;
use crate::agent::trajectory::{sft_conversations, Trajectory};
use crate::engine::cuda_backend::CudaDecoder;
use crate::engine::{DecoderModel, DeviceChoice, Engine, EngineConfig, Placement};
use crate::episode::oracle::selected_oracle_bundle;
use crate::harness::SandboxKind;
use crate::model::backend::cuda::CudaModel;
use crate::model::tokenizer::Tokenizer;
use crate::policy::EnginePolicy;
use crate::task::{easy_suite, load_tasks, TaskError, TaskInstance};
use crate::tensor::cuda::{Act, ActType, DeviceKind, Gpu};
use crate::train::device::DeviceTrainer;
use crate::train::dynamic::{DynamicSamplingConfig, DynamicSamplingError};
use crate::train::error::TrainError;
use crate::train::grpo::GrpoConfig;
use crate::train::iteration::EngineSetup;
use crate::train::network::{TapeOptions, TrainModel};
use crate::train::optim::{AdamW, AdamWConfig, Schedule};
use crate::train::rollout::GroupSampler;
use crate::train::sft_run::{run_sft, SftConfig};
use crate::train::trainer::Trainer;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error("task suite: {0}")]
    Task(#[from] TaskError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, DemoError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Io { path: path.to_path_buf(), source }
}

/// The run's settings (written to `config.toml`): the paper's GRPO settings scaled down.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DemoConfig {
    /// Random-initialised model: `config.json`, weights, `generation_config.json`.
    pub init_model: PathBuf,
    /// `tokenizer.json`, `tokenizer_config.json`, `chat_template.jinja`.
    pub tokenizer: PathBuf,
    /// Task file (default: the easy suite); the last `held_back` tasks are never trained on.
    pub tasks: Option<PathBuf>,
    pub held_back: usize,
    pub seed: u64,
    /// Where SFT, evaluations, rollouts and GRPO updates run: `cpu` (the CPU trainer lending
    /// its weights to a CPU engine) or a CUDA device — `cuda`, `cuda:N`, `emulator`, optionally
    /// `:bf16`/`:f32` (the device trainer: one copy of the weights on the device, lent to an
    /// engine on the same device for rollouts and evaluations).
    pub device: String,
    pub sft_steps: u64,
    pub sft_batch_size: usize,
    pub sft_lr: f32,
    pub grpo_iterations: u64,
    /// DAPO: groups with reward variance per update, samples per group, draw cap.
    pub groups: usize,
    pub group_size: usize,
    pub max_attempts: usize,
    pub grpo_lr: f32,
    pub save_every: u64,
    /// Tokens per assistant turn and Round-0 turns of an episode (no revision rounds).
    pub max_tokens: u32,
    pub round0_turns: usize,
    pub temperature: f32,
    /// Episodes per held-back task per evaluation, and evaluation interval (iterations).
    pub eval_samples: usize,
    pub eval_every: u64,
    /// Episodes per *trained* task per evaluation (absent: `eval_samples`): the trained split
    /// has four times the held-back tasks, and its score is a report, not what the run is
    /// judged by.
    #[serde(default)]
    pub eval_trained_samples: Option<usize>,
    /// Test teacher trajectories on the first `test_teacher_tasks` trained tasks (0: none).
    #[serde(default)]
    pub test_teacher_tasks: usize,
    /// Every `test_every`-th GRPO group drawn is a Test group (0: Repair groups only).
    #[serde(default)]
    pub test_every: usize,
    /// Tokens per assistant turn of a Test episode (absent: `max_tokens`): the Test agent's
    /// preparation call (contract JSON, command, patch export) is ≈ 360 tokens.
    #[serde(default)]
    pub test_max_tokens: Option<u32>,
}

impl DemoConfig {
    /// Episodes per trained task per evaluation.
    pub fn trained_samples(&self) -> usize {
        self.eval_trained_samples.unwrap_or(self.eval_samples)
    }

    /// The full run, Repair only (`benches/results/demo-train-*`). The Test role is opt-in
    /// (`--test-teacher-tasks N --test-every K`): at this model size, mixing Test trajectories
    /// into SFT cost the Repair role what it learned, and Test groups never reached reward
    /// variance (measured: docs/train.md, "demo train").
    pub fn full(models: &Path) -> Self {
        DemoConfig {
            init_model: models.join("tiny-qwen35"),
            tokenizer: models.join("tokenizer"),
            tasks: None,
            held_back: 2,
            seed: 1,
            device: "cpu".into(),
            sft_steps: 120,
            sft_batch_size: 4,
            sft_lr: 3e-3,
            grpo_iterations: 16,
            groups: 2,
            group_size: 6,
            max_attempts: 8,
            grpo_lr: 1e-3,
            save_every: 8,
            max_tokens: 224,
            round0_turns: 4,
            temperature: 1.0,
            eval_samples: 6,
            eval_every: 4,
            eval_trained_samples: None,
            test_teacher_tasks: 0,
            test_every: 0,
            test_max_tokens: Some(384),
        }
    }

    /// The CI-sized run (a few minutes on two cores), with both roles: Test teachers on 2 tasks
    /// and every fifth GRPO group a Test group, so CI exercises the Test role end to end.
    pub fn ci(models: &Path) -> Self {
        DemoConfig {
            sft_steps: 100,
            grpo_iterations: 8,
            group_size: 4,
            eval_samples: 4,
            eval_every: 8,
            // 8 trained-split episodes per evaluation instead of 32 (≈ 2 minutes of a CI run).
            eval_trained_samples: Some(1),
            save_every: 4,
            test_teacher_tasks: 2,
            test_every: 5,
            ..DemoConfig::full(models)
        }
    }
}

/// What the run produced (also written to `report.md`).
pub use super::demo_report::RunSummary as DemoSummary;

/// The run's `metrics.jsonl` and the evaluations recorded so far.
struct Recorder {
    file: std::fs::File,
    path: PathBuf,
    evals: Vec<EvalMetrics>,
}

impl Recorder {
    fn log<T: Serialize>(&mut self, m: &T) -> Result<()> {
        let line = serde_json::to_string(m).map_err(|e| DemoError::Invalid(e.to_string()))?;
        writeln!(self.file, "{line}").map_err(io(&self.path))
    }

    fn eval(&mut self, progress: &mut dyn FnMut(String), stage: &str, iteration: u64, split: &str, s: SplitScore) -> Result<()> {
        progress(format!(
            "[eval] {stage:>9} {split:>9}: mean reward {:.3}, resolved {:.0}% ({} episodes)",
            s.mean_reward,
            100.0 * s.resolve_rate,
            s.rollouts
        ));
        let m = EvalMetrics { phase: "eval", stage: stage.into(), iteration, split: split.into(), score: s };
        self.log(&m)?;
        self.evals.push(m);
        Ok(())
    }
}

/// The GRPO phase: everything it works with besides the trainer.
struct GrpoPhase<'a> {
    c: &'a DemoConfig,
    setup: EngineSetup,
    sampling: DynamicSamplingConfig,
    sft_final: &'a Path,
    grpo_dir: PathBuf,
    train_sampler: RoleMix,
    eval_held: AgentSampler,
    eval_train: AgentSampler,
    rec: &'a mut Recorder,
    progress: &'a mut dyn FnMut(String),
}

impl GrpoPhase<'_> {
    /// Evaluate after SFT, then `grpo_iterations` iterations (rollouts, update, a checkpoint
    /// every `save_every`, held-back evaluations every `eval_every`), evaluate both splits and
    /// save `grpo/final`. Returns each iteration's metrics and the final checkpoint.
    fn run(&mut self, tr: &mut impl DemoTrainer) -> Result<(Vec<GrpoMetrics>, PathBuf)> {
        let c = self.c;
        self.eval(tr, "sft", 0)?;
        let mut iterations: Vec<GrpoMetrics> = Vec::new();
        for i in 0..c.grpo_iterations {
            let t = Instant::now();
            let collected = match tr.rollouts(&self.setup, &mut self.train_sampler, &self.sampling) {
                Ok(col) => Some(col),
                Err(TrainError::Sampling(e)) if matches!(*e, DynamicSamplingError::CapReached { .. }) => {
                    (self.progress)(format!("[grpo] iteration {i}: {e} — no update this iteration"));
                    None
                }
                Err(e) => return Err(e.into()),
            };
            let rollout_s = t.elapsed().as_secs_f64();
            let drawn = self.train_sampler.take_drawn();
            let t = Instant::now();
            let (update, kept, skipped, nonzero) = match &collected {
                Some(col) => {
                    let update = tr.update(col)?;
                    let nonzero = col.kept.iter().flat_map(|g| g.advantages.iter()).filter(|a| **a != 0.0).count();
                    (update, col.kept.len(), col.skipped, nonzero)
                }
                None => (None, 0, 0, 0),
            };
            let update_s = t.elapsed().as_secs_f64();
            let m = GrpoMetrics::new(i, &drawn, kept, skipped, nonzero, update, rollout_s, update_s);
            (self.progress)(m.progress_line(c.grpo_iterations));
            self.rec.log(&m)?;
            iterations.push(m);
            if c.save_every > 0 && (i + 1) % c.save_every == 0 {
                tr.save(&self.grpo_dir.join(format!("step-{}", i + 1)), self.sft_final)?;
            }
            if (i + 1) % c.eval_every == 0 && i + 1 < c.grpo_iterations {
                let s = evaluate_trainer(tr, &self.setup, &mut self.eval_held, c.eval_samples)?;
                self.rec.eval(self.progress, "grpo", i + 1, "held_back", s)?;
            }
        }
        self.eval(tr, "grpo", c.grpo_iterations)?;
        let final_dir = self.grpo_dir.join("final");
        tr.save(&final_dir, self.sft_final)?;
        Ok((iterations, final_dir))
    }

    /// Evaluate both splits on the trainer's current weights (stage `stage`, after `iteration`).
    fn eval(&mut self, tr: &mut impl DemoTrainer, stage: &str, iteration: u64) -> Result<()> {
        let s = evaluate_trainer(tr, &self.setup, &mut self.eval_held, self.c.eval_samples)?;
        self.rec.eval(self.progress, stage, iteration, "held_back", s)?;
        let s = evaluate_trainer(tr, &self.setup, &mut self.eval_train, self.c.trained_samples())?;
        self.rec.eval(self.progress, stage, iteration, "trained", s)
    }
}

/// Evaluate `sampler`'s tasks (`samples` episodes each) with `engine`.
fn evaluate(sampler: &mut AgentSampler, engine: &Engine, samples: usize) -> Result<SplitScore> {
    for i in 0..sampler.task_count() {
        sampler.sample_group(engine, i, samples)?;
    }
    Ok(SplitScore::of(&sampler.take_drawn()))
}

/// [`evaluate`] on the trainer's current weights (lent to an engine, then taken back).
fn evaluate_trainer(tr: &mut impl DemoTrainer, setup: &EngineSetup, sampler: &mut AgentSampler, samples: usize) -> Result<SplitScore> {
    tr.with_engine(setup, |engine| evaluate(sampler, engine, samples))?
}

/// The device trainer GRPO starts with: the SFT checkpoint's weights on `kind` (the serving
/// copy the rollout engines borrow), fp32 masters and a fresh AdamW.
fn device_trainer<A: Act>(kind: DeviceKind, sft_final: &Path, opt: AdamWConfig) -> Result<DeviceTrainer<A>>
where
    CudaDecoder<A>: DecoderModel,
{
    let gpu = Gpu::open(kind).map_err(|e| DemoError::Invalid(format!("opening device {kind:?}: {e}")))?;
    let model = CudaModel::<A>::load(&gpu, sft_final).map_err(|e| DemoError::Invalid(format!("loading {} onto the device: {e}", sft_final.display())))?;
    Ok(DeviceTrainer::new(gpu, model, opt)?)
}

/// The model folder training starts from: the random weights with the tokenizer beside them.
fn init_folder(c: &DemoConfig, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (from, name) in [
        (&c.init_model, "config.json"),
        (&c.init_model, "model.safetensors"),
        (&c.init_model, "generation_config.json"),
        (&c.tokenizer, "tokenizer.json"),
        (&c.tokenizer, "tokenizer_config.json"),
        (&c.tokenizer, "chat_template.jinja"),
    ] {
        let src = from.join(name);
        std::fs::copy(&src, dir.join(name)).map_err(io(&src))?;
    }
    Ok(())
}

/// Teacher trajectories on the training tasks — Repair on every one, Test on the first
/// `test_tasks` — written (seeded shuffle) to `trajectories.jsonl`.
fn teacher_phase(
    train: &[TaskInstance],
    test_tasks: usize,
    out: &Path,
    seed: u64,
    rt: &tokio::runtime::Runtime,
) -> Result<Vec<TeacherRecord>> {
    let mut all: Vec<(TeacherRecord, Trajectory)> = Vec::new();
    for (i, task) in train.iter().enumerate() {
        let bundle = selected_oracle_bundle(task).map_err(|e| DemoError::Invalid(format!("{}: {e}", task.instance_id)))?;
        all.extend(rt.block_on(teacher_episodes(task, &bundle, SandboxKind::Local)));
        if i < test_tasks {
            all.extend(rt.block_on(test_teacher_episodes(task, SandboxKind::Local)));
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    all.shuffle(&mut rng);
    let records: Vec<TeacherRecord> = all.iter().map(|(r, _)| r.clone()).collect();
    let path = out.join("teacher.jsonl");
    let lines: Vec<String> = records.iter().filter_map(|r| serde_json::to_string(r).ok()).collect();
    std::fs::write(&path, lines.join("\n") + "\n").map_err(io(&path))?;
    let kept = Trajectory {
        entries: all.into_iter().filter(|(r, _)| r.reward.is_some()).flat_map(|(_, t)| t.entries).collect(),
    };
    if kept.entries.is_empty() {
        return Err(DemoError::Invalid("every teacher episode met an operational error (see teacher.jsonl)".into()));
    }
    let path = out.join("trajectories.jsonl");
    kept.write_jsonl(&path).map_err(|e| DemoError::Invalid(e.to_string()))?;
    Ok(records)
}

/// Run the whole demo into `out`; `progress` receives human-readable progress lines.
pub fn run_demo(c: &DemoConfig, out: &Path, progress: &mut dyn FnMut(String)) -> Result<RunSummary> {
    let placement: Placement = c.device.parse().map_err(|e| DemoError::Invalid(format!("--device {}: {e}", c.device)))?;
    if let DeviceChoice::Gpu(kind) = placement.device {
        // Open the device before anything is written or run: a machine without it fails here.
        Gpu::open(kind).map_err(|e| DemoError::Invalid(format!("--device {}: {e}", c.device)))?;
    }
    if c.grpo_iterations == 0 || c.sft_steps == 0 || c.groups == 0 || c.group_size < 2 {
        return Err(DemoError::Invalid("sft_steps, grpo_iterations, groups must be > 0 and group_size ≥ 2".into()));
    }
    let started = Instant::now();
    std::fs::create_dir_all(out).map_err(io(out))?;
    let cfg_path = out.join("config.toml");
    let text = toml::to_string(c).map_err(|e| DemoError::Invalid(e.to_string()))?;
    std::fs::write(&cfg_path, text).map_err(io(&cfg_path))?;
    let metrics_path = out.join("metrics.jsonl");
    let file = std::fs::File::create(&metrics_path).map_err(io(&metrics_path))?;
    let mut rec = Recorder { file, path: metrics_path, evals: Vec::new() };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| DemoError::Invalid(format!("async runtime: {e}")))?;

    // Tasks: trained and held-back.
    let tasks_file = match &c.tasks {
        Some(f) => f.clone(),
        None => easy_suite()?,
    };
    let tasks = load_tasks(&tasks_file)?;
    if tasks.len() <= c.held_back {
        return Err(DemoError::Invalid(format!("{} tasks, {} held back: nothing to train on", tasks.len(), c.held_back)));
    }
    let (train, held) = tasks.split_at(tasks.len() - c.held_back);
    let ids = |t: &[TaskInstance]| t.iter().map(|t| t.instance_id.clone()).collect::<Vec<_>>();
    progress(format!("tasks: {} trained {:?}, {} held back {:?}", train.len(), ids(train), held.len(), ids(held)));

    // 1. Teacher trajectories.
    let t = Instant::now();
    progress(format!(
        "[teacher] scripted solution paths: Repair on {} tasks, Test on {} (real sandboxes, harness-scored)…",
        train.len(),
        c.test_teacher_tasks.min(train.len())
    ));
    let teacher = teacher_phase(train, c.test_teacher_tasks, out, c.seed, &rt)?;
    let teacher_s = t.elapsed().as_secs_f64();
    for line in super::demo_report::teacher_lines(&teacher) {
        progress(format!("[teacher] {line}"));
    }

    // 2. SFT.
    let init = out.join("init");
    init_folder(c, &init)?;
    let sft_toml = out.join("sft.toml");
    std::fs::write(
        &sft_toml,
        format!(
            "model = \"init\"\ntrajectories = \"trajectories.jsonl\"\nout = \"sft\"\nsteps = {}\nbatch_size = {}\ndevice = \"{placement}\"\n[optimizer]\nlr = {}\n",
            c.sft_steps, c.sft_batch_size, c.sft_lr
        ),
    )
    .map_err(io(&sft_toml))?;
    let sft_cfg = SftConfig::from_file(&sft_toml)?;
    let read = |p: &Path| sft_conversations(p).map_err(|e| e.to_string());
    let t = Instant::now();
    let mut sft_curve = Vec::new();
    let mut sft_err = None;
    let sft_final = run_sft(&sft_cfg, &read, |r| {
        let m = SftMetrics { phase: "sft", step: r.step, loss: r.loss, tokens: r.tokens };
        if let Err(e) = rec.log(&m) {
            sft_err.get_or_insert(e);
        }
        if r.step % 20 == 0 || r.step == c.sft_steps {
            progress(format!("[sft] step {:4}/{}  loss {:.4}", r.step, c.sft_steps, r.loss));
        }
        sft_curve.push(r.loss);
    })?;
    if let Some(e) = sft_err {
        return Err(e);
    }
    let sft_s = t.elapsed().as_secs_f64();

    // Samplers: training rollouts (DAPO) and evaluations of each split.
    let agent = |instances: Vec<String>| AgentTaskConfig {
        tasks: Some(tasks_file.clone()),
        instances,
        sandbox: SandboxKind::Local,
        temperature: c.temperature,
        max_tokens: Some(c.max_tokens),
        round0_turns: c.round0_turns,
        revision_rounds: 0,
        revision_turns: 0,
        command_timeout_secs: 30,
        ..AgentTaskConfig::default()
    };
    let sampler = |instances, model: &Path, seed: u64, log: &str| {
        AgentSampler::new(Role::Repair, agent(instances), model, seed, Some(&out.join(log)))
    };
    // Test episodes: as many turns as a Repair Round 0 (the teacher's Test paths take 3–4).
    let test_agent = |instances| AgentTaskConfig {
        test_turns: c.round0_turns,
        max_tokens: Some(c.test_max_tokens.unwrap_or(c.max_tokens)),
        ..agent(instances)
    };
    let mut eval_train = sampler(ids(train), &init, c.seed ^ 0xE1, "eval.jsonl")?;
    let mut eval_held = sampler(ids(held), &init, c.seed ^ 0xE2, "eval.jsonl")?;

    // Before SFT: the random model.
    {
        let policy = EnginePolicy::open_on(&init, placement).map_err(|e| DemoError::Invalid(e.to_string()))?;
        let s = evaluate(&mut eval_held, policy.engine(), c.eval_samples)?;
        rec.eval(progress, "untrained", 0, "held_back", s)?;
        let s = evaluate(&mut eval_train, policy.engine(), c.trained_samples())?;
        rec.eval(progress, "untrained", 0, "trained", s)?;
    }

    // 3. GRPO from the SFT checkpoint, on the trainer of `placement`.
    let tokenizer = Tokenizer::from_dir(&sft_final).map_err(|e| DemoError::Invalid(format!("tokenizer: {e}")))?;
    let test_sampler = match c.test_every {
        0 => None,
        // The tasks the Test teacher ran on (all trained tasks when it ran on none).
        _ => {
            let n = match c.test_teacher_tasks.min(train.len()) {
                0 => train.len(),
                n => n,
            };
            Some(AgentSampler::new(Role::Test, test_agent(ids(&train[..n])), &sft_final, c.seed ^ 0x7E57, Some(&out.join("rollouts.jsonl")))?)
        }
    };
    let mut phase = GrpoPhase {
        c,
        setup: EngineSetup { tokenizer, template_dir: Some(sft_final.clone()), config: EngineConfig::default() },
        sampling: DynamicSamplingConfig { groups: c.groups, group_size: c.group_size, max_attempts: c.max_attempts },
        sft_final: &sft_final,
        grpo_dir: out.join("grpo"),
        train_sampler: RoleMix::new(sampler(ids(train), &sft_final, c.seed, "rollouts.jsonl")?, test_sampler, c.test_every),
        eval_held,
        eval_train,
        rec: &mut rec,
        progress: &mut *progress,
    };
    let adamw = AdamWConfig { lr: c.grpo_lr, ..AdamWConfig::default() };
    let (iterations, final_dir) = match placement.device {
        DeviceChoice::Cpu => {
            let model = TrainModel::load(&sft_final)?;
            let opt = AdamW::new(adamw, &model.store);
            let tape = TapeOptions { recompute: false };
            let mut tr = Trainer { model, opt, schedule: Schedule::Constant, tape, grpo: GrpoConfig::default(), lora: None };
            phase.run(&mut tr)?
        }
        DeviceChoice::Gpu(kind) => match placement.act_type() {
            ActType::Bf16 => phase.run(&mut device_trainer::<u16>(kind, &sft_final, adamw)?)?,
            ActType::F32 => phase.run(&mut device_trainer::<f32>(kind, &sft_final, adamw)?)?,
        },
    };
    let evals = std::mem::take(&mut rec.evals);

    let summary = RunSummary {
        config: c.clone(),
        trained: ids(train),
        held_back: ids(held),
        teacher,
        teacher_s,
        sft_losses: sft_curve,
        sft_s,
        iterations,
        evals,
        total_s: started.elapsed().as_secs_f64(),
        final_checkpoint: final_dir,
    };
    super::demo_report::write_outputs(&summary, out)?;
    progress(format!("wrote {}/report.md and {}/reward_curve.svg", out.display(), out.display()));
    Ok(summary)
}
