//! `execcritic demo train`: teacher trajectories → SFT → GRPO on a small model through real
//! sandboxes and the real harness, with progress output and a run directory
//! (`pipeline::demo`).

use crate::pipeline::demo::{run_demo, DemoConfig};
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum DemoCommand {
    /// Teacher trajectories → SFT → GRPO on a small random-initialised model; writes a run
    /// directory (config, trajectories, metrics.jsonl, reward_curve.svg, checkpoints, report.md).
    Train(DemoTrainArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DemoSize {
    /// The recorded run (benches/results/demo-train-*).
    Full,
    /// The CI-sized run (a few minutes on two cores).
    Ci,
}

#[derive(Args, Debug)]
pub struct DemoTrainArgs {
    /// Run directory (default: a new folder under the temp directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where the run trains and samples: `cpu`, or a CUDA device (`cuda`, `cuda:N`, `emulator`;
    /// optionally `:bf16` or `:f32`) holding one copy of the weights for SFT, evaluations,
    /// rollouts and GRPO updates.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[arg(long, value_enum, default_value = "full")]
    pub size: DemoSize,
    /// Folder with the random-initialised model and the tokenizer (default: the source tree's
    /// `models/`: `tiny-qwen35` weights, `tokenizer`).
    #[arg(long)]
    pub models: Option<PathBuf>,
    /// Task file (default: the easy suite); its last `--held-back` tasks are held back.
    #[arg(long)]
    pub tasks: Option<PathBuf>,
    #[arg(long)]
    pub held_back: Option<usize>,
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long)]
    pub sft_steps: Option<u64>,
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Test teacher trajectories on the first N trained tasks (0: Repair only).
    #[arg(long)]
    pub test_teacher_tasks: Option<usize>,
    /// Every N-th GRPO group drawn is a Test group (0: Repair groups only).
    #[arg(long)]
    pub test_every: Option<usize>,
}

pub fn run(c: DemoCommand) -> anyhow::Result<ExitCode> {
    let DemoCommand::Train(a) = c;
    let models = a.models.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"));
    let mut cfg = match a.size {
        DemoSize::Full => DemoConfig::full(&models),
        DemoSize::Ci => DemoConfig::ci(&models),
    };
    cfg.device = a.device;
    cfg.tasks = a.tasks;
    cfg.held_back = a.held_back.unwrap_or(cfg.held_back);
    cfg.seed = a.seed.unwrap_or(cfg.seed);
    cfg.sft_steps = a.sft_steps.unwrap_or(cfg.sft_steps);
    cfg.grpo_iterations = a.iterations.unwrap_or(cfg.grpo_iterations);
    cfg.test_teacher_tasks = a.test_teacher_tasks.unwrap_or(cfg.test_teacher_tasks);
    cfg.test_every = a.test_every.unwrap_or(cfg.test_every);
    let out = a
        .out
        .unwrap_or_else(|| std::env::temp_dir().join(format!("execcritic-demo-train-{}", std::process::id())));
    println!("ExecCritic demo train — teacher trajectories → SFT → GRPO on a small random-initialised model.");
    println!("Run directory: {}", out.display());
    let summary = run_demo(&cfg, &out, &mut |line| println!("{line}")).context("demo train")?;
    println!("done in {:.0} s; final checkpoint {}", summary.total_s, summary.final_checkpoint.display());
    Ok(ExitCode::SUCCESS)
}
