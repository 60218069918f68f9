//! CLI commands of the embedded engine: `logits`, `generate`, on the CPU engine or the CUDA
//! backend (`--device cuda[:N]` on a GPU, `--device emulator` on the emulated device) in bf16 or
//! f32 storage (`--dtype`); same output format on every device.

pub use crate::engine::DeviceChoice;
use crate::engine::Placement;
use crate::tensor::cuda::ActType;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The device options shared by `logits` and `generate`.
#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// cpu, cuda, cuda:N (GPU N) or emulator (the CUDA kernels emulated on CPU threads).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceChoice,
    /// Storage type of activations and weights on cuda/emulator: bf16 (default there) or f32.
    /// The CPU engine computes in f32 (bf16 checkpoints stay bf16 in memory).
    #[arg(long)]
    pub dtype: Option<ActType>,
}

/// A resolved device choice.
enum Target {
    Cpu,
    Gpu(crate::tensor::cuda::Gpu, ActType),
}

impl DeviceArgs {
    fn open(&self) -> anyhow::Result<Target> {
        use anyhow::Context;
        let placement = self.placement()?;
        match placement.device {
            DeviceChoice::Cpu => Ok(Target::Cpu),
            DeviceChoice::Gpu(kind) => {
                let gpu = crate::tensor::cuda::Gpu::open(kind)
                    .with_context(|| format!("opening device {kind:?}"))?;
                Ok(Target::Gpu(gpu, placement.act_type()))
            }
        }
    }

    /// The placement these options name (`--dtype bf16` on the CPU is an error).
    pub fn placement(&self) -> anyhow::Result<Placement> {
        Placement::new(self.device, self.dtype).map_err(|_| {
            anyhow::anyhow!(
                "--dtype bf16 needs --device cuda or emulator (the CPU engine computes in f32)"
            )
        })
    }
}

/// Load a model folder onto a device (an unsupported shape is an error here, before any run).
fn load_cuda<A: crate::tensor::cuda::Act>(
    gpu: &crate::tensor::cuda::Gpu,
    dir: &Path,
) -> anyhow::Result<crate::model::backend::cuda::CudaModel<A>> {
    use anyhow::Context;
    crate::model::backend::cuda::CudaModel::<A>::load(gpu, dir)
        .with_context(|| format!("loading {} onto {}", dir.display(), gpu.name()))
}

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
    #[command(flatten)]
    pub device: DeviceArgs,
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
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// `execcritic logits`: print `{"logits": [[...], ...]}`, one row per input position.
pub fn logits(a: LogitsArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use crate::model::Model;
    let ids: Vec<u32> = a
        .ids
        .split(',')
        .map(|s| s.trim().parse::<u32>().with_context(|| format!("--ids: {s:?} is not a token id")))
        .collect::<anyhow::Result<_>>()?;
    if ids.is_empty() {
        anyhow::bail!("--ids is empty");
    }
    // Prefill the first K tokens in one step, then one token per step through the caches.
    let k = a.decode_after.unwrap_or(ids.len()).clamp(1, ids.len());
    let mut chunks = vec![&ids[..k]];
    chunks.extend(ids[k..].chunks(1));
    let rows = match a.device.open()? {
        Target::Cpu => {
            let model = Model::load(&a.model)
                .with_context(|| format!("loading model from {}", a.model.display()))?;
            cpu_logits(&model, &chunks)?
        }
        Target::Gpu(gpu, ActType::Bf16) => cuda_logits(&load_cuda::<u16>(&gpu, &a.model)?, &gpu, &chunks)?,
        Target::Gpu(gpu, ActType::F32) => cuda_logits(&load_cuda::<f32>(&gpu, &a.model)?, &gpu, &chunks)?,
    };
    println!("{}", serde_json::json!({ "logits": rows }));
    Ok(ExitCode::SUCCESS)
}

/// Logits of every position on the CPU engine, fed chunk by chunk.
fn cpu_logits(model: &crate::model::Model, chunks: &[&[u32]]) -> anyhow::Result<Vec<Vec<f32>>> {
    use crate::model::{ForwardOptions, LogitsMode, SeqInput};
    let mut state = model.new_state();
    let opts = ForwardOptions { logits: LogitsMode::All, ..Default::default() };
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let v = model.config().vocab_size;
    for chunk in chunks {
        let out = model.forward(&mut [SeqInput::new(chunk, &mut state)], &opts)?;
        rows.extend(out[0].logits.data().chunks_exact(v).map(<[f32]>::to_vec));
    }
    Ok(rows)
}

/// The same on the CUDA backend (one cache slot).
fn cuda_logits<A: crate::tensor::cuda::Act>(
    model: &crate::model::backend::cuda::CudaModel<A>,
    gpu: &crate::tensor::cuda::Gpu,
    chunks: &[&[u32]],
) -> anyhow::Result<Vec<Vec<f32>>> {
    use crate::model::backend::cuda::CudaState;
    let n: usize = chunks.iter().map(|c| c.len()).sum();
    let longest = chunks.iter().map(|c| c.len()).max().unwrap_or(1);
    let mut st = CudaState::new(gpu, &model.cfg, 1, n, longest)?;
    let v = model.cfg.vocab_size;
    let mut rows = Vec::with_capacity(n);
    for chunk in chunks {
        let out = model.forward(gpu, &mut st, &[(0, chunk)])?;
        rows.extend(out.chunks_exact(v).map(<[f32]>::to_vec));
    }
    Ok(rows)
}
/// Load the model folder into the engine, generate one completion, print it (stdout) and the
/// token counts and speeds (stderr).
pub fn generate(a: GenerateArgs) -> anyhow::Result<ExitCode> {
    use crate::engine::{open_engine, EngineConfig, Request, SamplingParams, SchedulerConfig};
    use crate::model::chat::{ChatOptions, Message};
    use anyhow::Context;

    let t0 = std::time::Instant::now();
    let placement = a.device.placement()?;
    // On the CUDA backend: two cache slots long enough for the prompt budget plus
    // --max-tokens, prefill in chunks of 256 tokens, no conversations kept.
    let config = match placement.device {
        DeviceChoice::Cpu => EngineConfig::default(),
        DeviceChoice::Gpu(_) => EngineConfig {
            scheduler: SchedulerConfig {
                max_running: 2,
                max_batch_tokens: 258,
                prefill_chunk: 256,
            },
            max_conversations: 0,
        },
    };
    const PROMPT_BUDGET: usize = 8192;
    let engine = open_engine(&a.model, placement, config, PROMPT_BUDGET + a.max_tokens)
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
/// An engine for a server: `max_running` sequences at once of up to `max_len` tokens, keeping
/// `max_conversations` conversation states, on the chosen device.
pub fn open_serving_engine(
    dir: &Path,
    device: &DeviceArgs,
    max_running: usize,
    max_len: usize,
    max_conversations: usize,
) -> anyhow::Result<crate::engine::Engine> {
    use crate::engine::{EngineConfig, SchedulerConfig};
    use anyhow::Context;
    let base = EngineConfig {
        max_conversations,
        ..EngineConfig::default()
    };
    let scheduler = SchedulerConfig {
        max_running,
        max_batch_tokens: base.scheduler.max_batch_tokens.max(max_running + 1),
        ..base.scheduler
    };
    crate::engine::open_engine(dir, device.placement()?, EngineConfig { scheduler, ..base }, max_len)
        .with_context(|| format!("loading {}", dir.display()))
}
