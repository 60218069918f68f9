//! CLI commands of the agents: `gen-test`, `repair`, `demo`, `bench revision-loop`.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct GenTestArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub instance: String,
    /// scripted:FILE | http:URL | engine:MODEL_DIR
    #[arg(long)]
    pub policy: String,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct RepairArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub instance: String,
    #[arg(long)]
    pub policy: String,
    #[arg(long)]
    pub bundle: Option<PathBuf>,
    #[arg(long)]
    pub grade: bool,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Per-round time split into model, harness and controller overhead.
    RevisionLoop {
        #[arg(long)]
        tasks: PathBuf,
        #[arg(long)]
        policy: String,
    },
}

pub fn gen_test(_a: GenTestArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`gen-test` is not built yet")
}
pub fn repair(_a: RepairArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`repair` is not built yet")
}
pub fn demo(_a: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`demo` is not built yet")
}
pub fn bench(_c: BenchCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`bench` is not built yet")
}
