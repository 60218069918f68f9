//! CLI commands of training: `grads`, `train sft`, `train grpo`.

use crate::pipeline::grpo::{AgentSampler, AgentTaskConfig, Role};
use crate::train::grpo_run::{builtin_sampler, run_grpo, GrpoRunConfig, TOY_TASK};
use crate::train::sft_run::{run_sft, SftConfig};
use crate::train::{TapeOptions, TrainModel};
use anyhow::Context;
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
    /// Recompute each layer's activations in the backward instead of keeping them.
    #[arg(long)]
    pub recompute: bool,
    /// Where the forward and backward run: cpu (the f32 trainer), or cuda[:N] / emulator (the
    /// device training backend over the serving weights, `--dtype` bf16 or f32).
    #[command(flatten)]
    pub device: super::model_cmds::DeviceArgs,
}

#[derive(Subcommand, Debug)]
pub enum TrainCommand {
    /// Supervised fine-tuning on trajectories.
    Sft {
        #[arg(long)]
        config: PathBuf,
    },
    /// GRPO with the paper's settings on a built-in verifiable task (engine rollouts on the
    /// trainer's own weights).
    Grpo {
        #[arg(long)]
        config: PathBuf,
    },
    /// The per-GPU memory plan of a training config (bytes per category, whether it fits).
    Plan {
        #[arg(long)]
        config: PathBuf,
        /// Print the plan as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `execcritic grads`: mean next-token NLL of `--ids` and the gradient of every parameter,
/// written under its Hugging Face name.
pub fn grads(a: GradsArgs) -> anyhow::Result<ExitCode> {
    let ids: Vec<u32> = a
        .ids
        .split(',')
        .map(|s| s.trim().parse::<u32>().with_context(|| format!("--ids: {s:?} is not a token id")))
        .collect::<anyhow::Result<_>>()?;
    if let crate::engine::DeviceChoice::Gpu(kind) = a.device.placement()?.device {
        let gpu = crate::tensor::cuda::Gpu::open(kind).with_context(|| format!("opening device {kind:?}"))?;
        return match a.device.placement()?.act_type() {
            crate::tensor::cuda::ActType::F32 => device_grads::<f32>(&gpu, &a, &ids),
            crate::tensor::cuda::ActType::Bf16 => device_grads::<u16>(&gpu, &a, &ids),
        };
    }
    let model = TrainModel::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    let t0 = std::time::Instant::now();
    let (loss, grads) = model.nll_gradients(&ids, TapeOptions { recompute: a.recompute })?;
    let secs = t0.elapsed().as_secs_f64();
    eprintln!("forward+backward: {secs:.3} s, {:.1} tokens/s", ids.len() as f64 / secs);
    grads.save(&model.store, &a.out).with_context(|| format!("writing {}", a.out.display()))?;
    println!("{}", serde_json::json!({ "loss": loss }));
    Ok(ExitCode::SUCCESS)
}

/// `grads` on a device: the device training backend (`train::device`) in storage type `A`;
/// the same file layout and names as the CPU trainer's.
fn device_grads<A: crate::tensor::cuda::Act>(
    gpu: &crate::tensor::cuda::Gpu,
    a: &GradsArgs,
    ids: &[u32],
) -> anyhow::Result<ExitCode> {
    use crate::train::device::DeviceTrainModel;
    let loading = || format!("loading {} onto {}", a.model.display(), gpu.name());
    let mut model = DeviceTrainModel::<A>::load(gpu, &a.model).with_context(loading)?;
    let prefix = crate::model::checkpoint::Checkpoint::open(&a.model).with_context(loading)?.full_name("");
    let t0 = std::time::Instant::now();
    let loss = model.nll_gradients(gpu, ids, TapeOptions { recompute: a.recompute })?;
    let grads = model.gradients(gpu, &prefix)?;
    let secs = t0.elapsed().as_secs_f64();
    eprintln!("forward+backward on {}: {secs:.3} s, {:.1} tokens/s", gpu.name(), ids.len() as f64 / secs);
    let map = grads.iter().map(|g| (g.name.clone(), (g.shape.clone(), &g.data[..]))).collect();
    crate::train::params::write_safetensors(&a.out, &map).with_context(|| format!("writing {}", a.out.display()))?;
    println!("{}", serde_json::json!({ "loss": loss }));
    Ok(ExitCode::SUCCESS)
}
/// `execcritic train sft|grpo --config FILE.toml`.
pub fn train(c: TrainCommand) -> anyhow::Result<ExitCode> {
    match c {
        TrainCommand::Sft { config } => {
            let cfg = SftConfig::from_file(&config)?;
            let read = |p: &std::path::Path| crate::agent::trajectory::sft_conversations(p).map_err(|e| e.to_string());
            let fin = run_sft(&cfg, &read, |r| println!("{}", serde_json::to_string(r).unwrap_or_default()))?;
            eprintln!("saved {}", fin.display());
            Ok(ExitCode::SUCCESS)
        }
        TrainCommand::Plan { config, json } => {
            let p = crate::train::plan::PlanConfig::from_file(&config)?;
            let plan = crate::train::plan::plan(&p, &p.model_config()?)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                print!("{}", plan.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        TrainCommand::Grpo { config } => {
            let cfg = GrpoRunConfig::from_file(&config)?;
            if let (Some(dir), Some(p)) = (&cfg.resume, cfg.resume_point()?) {
                eprintln!(
                    "resuming from {} after iteration {} (optimizer step {}); {} of {} iterations left",
                    dir.display(),
                    p.iteration,
                    p.step,
                    cfg.steps.saturating_sub(p.iteration),
                    cfg.steps
                );
            }
            let mut sampler = match (builtin_sampler(&cfg), Role::from_task(&cfg.task)) {
                (Some(s), _) => s,
                (None, Some(role)) => {
                    let base = config.parent().unwrap_or(std::path::Path::new("."));
                    let agent = AgentTaskConfig::from_table(cfg.agent.as_ref(), base)?;
                    let log = cfg.out.join("rollouts.jsonl");
                    Box::new(AgentSampler::new(role, agent, &cfg.model, cfg.seed, Some(&log))?)
                }
                (None, None) => anyhow::bail!(
                    "{}: unknown task {:?} (known: {TOY_TASK:?}, \"test\", \"repair\")",
                    config.display(),
                    cfg.task
                ),
            };
            let fin = run_grpo(&cfg, sampler.as_mut(), |r| println!("{}", serde_json::to_string(r).unwrap_or_default()))?;
            eprintln!("saved {}", fin.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
