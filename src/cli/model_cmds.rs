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

/// `execcritic logits`: print `{"logits": [[...], ...]}`, one row per input position.
pub fn logits(a: LogitsArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use crate::model::{ForwardOptions, LogitsMode, Model, SeqInput};
    let ids: Vec<u32> = a
        .ids
        .split(',')
        .map(|s| s.trim().parse::<u32>().with_context(|| format!("--ids: {s:?} is not a token id")))
        .collect::<anyhow::Result<_>>()?;
    if ids.is_empty() {
        anyhow::bail!("--ids is empty");
    }
    let model = Model::load(&a.model).with_context(|| format!("loading model from {}", a.model.display()))?;
    // Prefill the first K tokens in one step, then one token per step through the caches.
    let k = a.decode_after.unwrap_or(ids.len()).clamp(1, ids.len());
    let mut chunks = vec![&ids[..k]];
    chunks.extend(ids[k..].chunks(1));
    let mut state = model.new_state();
    let opts = ForwardOptions { logits: LogitsMode::All, ..Default::default() };
    let mut rows: Vec<Vec<f32>> = Vec::with_capacity(ids.len());
    for chunk in chunks {
        let out = model.forward(&mut [SeqInput::new(chunk, &mut state)], &opts)?;
        let v = model.config().vocab_size;
        rows.extend(out[0].logits.data().chunks_exact(v).map(<[f32]>::to_vec));
    }
    println!("{}", serde_json::json!({ "logits": rows }));
    Ok(ExitCode::SUCCESS)
}
pub fn generate(_a: GenerateArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`generate` is not built yet")
}
