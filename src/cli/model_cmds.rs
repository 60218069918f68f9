//! CLI commands of the embedded engine: `logits`, `generate`.

use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct LogitsArgs {
    /// Hugging Face model folder.
    #[arg(long)]
    pub model: PathBuf,
    /// Comma-separated token ids.
    #[arg(long)]
    pub ids: String,
    /// Prefill the first K tokens, then decode the rest one by one through the caches.
    #[arg(long)]
    pub decode_after: Option<usize>,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long)]
    pub prompt: String,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn logits(_a: LogitsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`logits` is not built yet")
}
pub fn generate(_a: GenerateArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`generate` is not built yet")
}
