//! CLI commands of training: `grads`, `train sft`, `train grpo`.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct GradsArgs {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long)]
    pub ids: String,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum TrainCommand {
    /// Supervised fine-tuning on trajectories.
    Sft {
        #[arg(long)]
        config: PathBuf,
    },
    /// GRPO with the paper's settings.
    Grpo {
        #[arg(long)]
        config: PathBuf,
    },
}

pub fn grads(_a: GradsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`grads` is not built yet")
}
pub fn train(_c: TrainCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`train` is not built yet")
}
