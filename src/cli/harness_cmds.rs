//! CLI commands of the harness (no model): `qualify`, `audit`, `grade`.

use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum SandboxKind {
    Local,
    Docker,
}

#[derive(Args, Debug)]
pub struct QualifyArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub instance: String,
    #[arg(long)]
    pub bundle: PathBuf,
    #[arg(long, value_enum, default_value_t = SandboxKind::Local)]
    pub sandbox: SandboxKind,
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub bundles: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, value_enum, default_value_t = SandboxKind::Local)]
    pub sandbox: SandboxKind,
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
}

#[derive(Args, Debug)]
pub struct GradeArgs {
    #[arg(long)]
    pub tasks: PathBuf,
    #[arg(long)]
    pub predictions: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, value_enum, default_value_t = SandboxKind::Local)]
    pub sandbox: SandboxKind,
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
}

pub fn qualify(_a: QualifyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`qualify` is not built yet")
}
pub fn audit(_a: AuditArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`audit` is not built yet")
}
pub fn grade(_a: GradeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`grade` is not built yet")
}
