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
    /// Hugging Face model folder (config.json, safetensors, tokenizer.json, chat template).
    #[arg(long)]
    pub model: PathBuf,
    /// The prompt: rendered as one user turn with the folder's chat template, if it has one.
    #[arg(long)]
    pub prompt: String,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// 0 = no top-k restriction.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Feed the prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Render the chat with enable_thinking=false (empty think block).
    #[arg(long)]
    pub no_thinking: bool,
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
/// Load the model folder into the engine, generate one completion, print it (stdout) and the
/// token counts and speeds (stderr).
pub fn generate(a: GenerateArgs) -> anyhow::Result<ExitCode> {
    use crate::engine::{Engine, EngineConfig, Request, SamplingParams};
    use crate::model::chat::{ChatOptions, Message};
    use anyhow::Context;

    let t0 = std::time::Instant::now();
    let engine = Engine::load(&a.model, EngineConfig::default())
        .with_context(|| format!("loading {}", a.model.display()))?;
    let load_secs = t0.elapsed().as_secs_f64();
    let prompt = match engine.template() {
        Some(_) if !a.raw => {
            let opts = ChatOptions {
                add_generation_prompt: true,
                enable_thinking: a.no_thinking.then_some(false),
            };
            engine.render_chat(&[Message::user(a.prompt.clone())], &[], opts)?.1
        }
        _ => engine.tokenizer().encode(&a.prompt)?,
    };
    let sampling = SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        seed: Some(a.seed),
        max_tokens: a.max_tokens,
        ..Default::default()
    };
    let c = engine.submit(Request::new(prompt, sampling)).wait()?;
    println!("{}", c.text);
    let (pre, dec) = (c.timing.prefill.as_secs_f64(), c.timing.decode.as_secs_f64());
    let n = c.token_ids.len();
    eprintln!(
        "[load {load_secs:.2} s | prompt {} tokens in {pre:.3} s ({:.1} tok/s) | completion {n} tokens, \
         decode {:.1} tok/s | finish {:?}]",
        c.prompt_tokens,
        c.prompt_tokens as f64 / pre.max(1e-9),
        n.saturating_sub(1) as f64 / dec.max(1e-9),
        c.finish
    );
    Ok(ExitCode::SUCCESS)
}
