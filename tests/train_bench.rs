//! The GRPO step benchmark of the device trainer (issue #14, item 7): LoRA GRPO iterations on a
//! CUDA model with random weights — rollouts through the engine on the device over the ONE copy
//! of the weights, then the update on that copy — measuring per iteration the rollout and update
//! seconds, sampled tokens/s, trained tokens/s, the peak device memory of each phase, the loss,
//! and how far the served target weights moved. The workload is the toy task with agent-sized
//! prompts (`ToyTaskConfig::prompt_tokens`): random weights earn the toy's reward by chance, so
//! groups have reward variance and every iteration updates.
//!
//! Loading the weights, building the trainer, each iteration's rollouts and update and the
//! weights' movement are phases of a `PhaseLog` (`engine::bench`): the record is rewritten after
//! every phase, a failed phase is recorded and the next one runs; each phase's peak is the
//! device allocator's own high-water mark.
//!
//! In CI it runs on the emulated device at the tiny fixture's shape (a smoke test of the
//! benchmark and of two LoRA GRPO steps: positive numbers, a finite loss, the adapted weights
//! move and nothing else does; no timing threshold). Ignored here and run by
//! `scripts/gpu-check.sh` on an H200: the same at the Qwen3.5-35B-A3B shape with the LoRA
//! targets of `docs/train-plan-1xh200-lora.toml`, writing `$OUT/h200-train.json`
//! (`EXECCRITIC_BENCH_SHAPE=tiny`: the tiny workload on the emulator, for `--rehearse`).

use execcritic::engine::bench::{self as record, DeviceProbe, PhaseLog, PhaseResult};
use execcritic::engine::EngineConfig;
use execcritic::model::backend::cuda::CudaModel;
use execcritic::model::config::ModelConfig;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::engine::Engine;
use execcritic::tensor::cuda::{Act, Gpu};
use execcritic::train::device::{DeviceTrainer, NamedGrad};
use execcritic::train::dynamic::{DynamicSamplingConfig, Scored};
use execcritic::train::iteration::EngineSetup;
use execcritic::train::lora::LoraConfig;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::rollout::{GroupSampler, Rollout};
use execcritic::train::toy::{MultipleOf8Task, ToyTaskConfig};
use serde::Serialize;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// The decoder prefix the random model's parameters are named under (as a Qwen3.5 checkpoint).
const PREFIX: &str = "model.language_model.";

fn models() -> std::path::PathBuf {
    std::env::var_os("EXECCRITIC_MODELS").map(Into::into).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

/// The toy sampler, counting the tokens it sampled (kept groups and skipped ones).
struct Counting {
    task: MultipleOf8Task,
    sampled: usize,
}

impl GroupSampler for Counting {
    fn sample_group(&mut self, engine: &Engine, attempt: usize, size: usize) -> execcritic::train::error::Result<Vec<Scored<Vec<Rollout>>>> {
        let group = self.task.sample_group(engine, attempt, size)?;
        self.sampled += group.iter().flat_map(|s| &s.sample).map(|r| r.train_mask.iter().filter(|&&m| m).count()).sum::<usize>();
        Ok(group)
    }
}

/// One measured iteration.
#[derive(Clone, Debug, Serialize)]
struct IterationBench {
    rollout_s: f64,
    update_s: f64,
    sampled_tokens: usize,
    rollout_tok_s: f64,
    trained_tokens: usize,
    update_tok_s: f64,
    mean_reward: f64,
    kept_groups: usize,
    loss: Option<f64>,
    grad_norm: Option<f64>,
    rollout_peak_bytes: u64,
    update_peak_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
struct TrainBench {
    iterations: Vec<IterationBench>,
    /// The step time split: the share of rollouts in rollout + update, over all iterations.
    rollout_share: f64,
    /// Largest |Δ| of the served adapted weights after the run (the policy moved).
    max_target_change: f32,
    /// Largest |Δ| of any other served weight (0: only the adapters' projections moved).
    max_other_change: f32,
    /// Device bytes in use after loading the weights, before the trainer's state.
    weights_bytes: u64,
}

/// `iterations` LoRA GRPO iterations of `model` (already on `gpu`) on the toy task with
/// `toy`'s prompts, `sampling` groups per iteration: building the trainer, each iteration's
/// rollouts and update, and the weights' movement are phases of `log` (a failed phase is
/// recorded; an update whose rollouts failed is skipped). `None` when the trainer could not be
/// built.
fn bench<A: Act>(
    gpu: &Gpu,
    model: CudaModel<A>,
    lora: LoraConfig,
    toy: ToyTaskConfig,
    sampling: DynamicSamplingConfig,
    iterations: usize,
    log: &mut PhaseLog,
) -> Option<TrainBench> {
    let probe = DeviceProbe::new(gpu);
    let weights_bytes = probe.memory().map_or(0, |m| m.in_use);
    let targets = lora.targets.clone();
    let served = |tr: &DeviceTrainer<A>| -> PhaseResult<Vec<NamedGrad>> { Ok(tr.model()?.masters(gpu, &tr.opt, PREFIX)?) };
    let mut trainer = None;
    log.phase("trainer", &probe, || {
        let opt = AdamWConfig { lr: 1e-3, ..Default::default() };
        let tr = DeviceTrainer::new_lora(gpu.clone(), model, opt, lora, PREFIX)?;
        trainer = Some((served(&tr)?, tr));
        Ok(json!({"weights_bytes": weights_bytes}))
    });
    let (before, mut tr) = trainer?;
    let tokenizer = Tokenizer::from_dir(&models().join("tokenizer")).ok()?;
    let setup = EngineSetup { tokenizer, template_dir: None, config: EngineConfig::default() };
    let mut sampler = Counting { task: MultipleOf8Task::new(toy, 11), sampled: 0 };
    let mut out = vec![];
    for i in 0..iterations {
        let t = Instant::now();
        let collected = log.phase(&format!("rollout_{i}"), &probe, || Ok(Rollouts(tr.rollout_phase(&setup, &mut sampler, &sampling)?)));
        let rollout_s = t.elapsed().as_secs_f64();
        let sampled_tokens = std::mem::take(&mut sampler.sampled);
        let Some(Rollouts(collected)) = collected else {
            log.skip(&format!("update_{i}"), "its rollouts failed");
            continue;
        };
        let t = Instant::now();
        let report = log.phase(&format!("update_{i}"), &probe, || Ok(tr.update_phase(&collected)?));
        let update_s = t.elapsed().as_secs_f64();
        let Some(report) = report else { continue };
        let trained = report.update.as_ref().map_or(0, |u| u.tokens);
        let peak = |phase: &str| log.record(phase).and_then(|r| r["device"]["memory"]["peak"].as_u64()).unwrap_or(0);
        let it = IterationBench {
            rollout_s,
            update_s,
            sampled_tokens,
            rollout_tok_s: sampled_tokens as f64 / rollout_s,
            trained_tokens: trained,
            update_tok_s: trained as f64 / update_s,
            mean_reward: report.mean_reward,
            kept_groups: report.kept_groups,
            loss: report.update.as_ref().map(|u| u.loss),
            grad_norm: report.update.as_ref().map(|u| u.stats.grad_norm),
            rollout_peak_bytes: peak(&format!("rollout_{i}")),
            update_peak_bytes: peak(&format!("update_{i}")),
        };
        eprintln!("iteration {i}: {}", serde_json::to_string(&it).unwrap_or_default());
        out.push(it);
    }
    let moved = log.phase("weights_moved", &probe, || {
        let after = served(&tr)?;
        let (mut target, mut other) = (0.0f32, 0.0f32);
        for (b, a) in before.iter().zip(&after) {
            let d = b.data.iter().zip(&a.data).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
            if targets.iter().any(|t| b.name.contains(t.as_str())) {
                target = target.max(d);
            } else {
                other = other.max(d);
            }
        }
        Ok((target, other))
    });
    let (max_target_change, max_other_change) = moved.unwrap_or((f32::NAN, f32::NAN));
    let (roll, upd): (f64, f64) = out.iter().fold((0.0, 0.0), |(r, u), it| (r + it.rollout_s, u + it.update_s));
    let b = TrainBench { iterations: out, rollout_share: roll / (roll + upd), max_target_change, max_other_change, weights_bytes };
    log.set("result", &b);
    Some(b)
}

/// Collected rollouts, recorded by their counts.
struct Rollouts(execcritic::train::dynamic::Collected<Vec<Rollout>>);

impl Serialize for Rollouts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = &self.0;
        json!({"kept_groups": c.kept.len(), "attempts": c.attempts, "skipped": c.skipped,
               "mean_reward": c.mean_reward, "aborted_samples": c.aborted_samples})
        .serialize(s)
    }
}

/// The workload: at the tiny fixture's shape (the emulator) every projection adapted, 2 groups
/// × 4 rollouts of 24-token prompts and 3 sampled tokens; at full size
/// `docs/train-plan-1xh200-lora.toml`'s targets at rank 16, 4 groups × 8 rollouts of 2,048-token
/// prompts and 256 sampled tokens.
fn workload(tiny: bool) -> (LoraConfig, ToyTaskConfig, DynamicSamplingConfig) {
    let prompts = vec![11, 222, 333, 444];
    if tiny {
        let targets = vec!["self_attn.".into(), "linear_attn.".into(), "mlp.experts.".into()];
        (
            LoraConfig { rank: 4, alpha: 8.0, targets, seed: 1 },
            ToyTaskConfig { prompts, completion_tokens: 3, bos: 1, prompt_tokens: 24 },
            DynamicSamplingConfig { groups: 2, group_size: 4, max_attempts: 16 },
        )
    } else {
        let targets = ["self_attn.", "linear_attn.", "shared_expert."].map(String::from).to_vec();
        (
            LoraConfig { rank: 16, alpha: 32.0, targets, seed: 1 },
            ToyTaskConfig { prompts, completion_tokens: 256, bos: 1, prompt_tokens: 2048 },
            DynamicSamplingConfig { groups: 4, group_size: 8, max_attempts: 16 },
        )
    }
}

/// The benchmark of [`workload`] into `log` (random weights loaded as a phase, 2 iterations).
fn run<A: Act>(gpu: &Gpu, cfg: &ModelConfig, tiny: bool, log: &mut PhaseLog) -> Option<TrainBench> {
    let (lora, toy, sampling) = workload(tiny);
    log.set("workload", json!({"lora_targets": lora.targets, "rank": lora.rank, "groups": sampling.groups,
        "group_size": sampling.group_size, "prompt_tokens": toy.prompt_tokens, "completion_tokens": toy.completion_tokens}));
    let model = record::load_random::<A>(gpu, cfg, log)?;
    bench(gpu, model, lora, toy, sampling, 2, log)
}

#[test]
fn two_lora_grpo_steps_on_the_emulator_are_measured() {
    let gpu = Gpu::emulator().unwrap();
    let cfg = ModelConfig::from_dir(&models().join("tiny-qwen35")).unwrap();
    let mut log = PhaseLog::new(None);
    let b = run::<f32>(&gpu, &cfg, true, &mut log).expect("the benchmark ran");
    eprintln!("{:#}", log.document());
    let phases: Vec<String> = log.document()["phases"].as_array().unwrap().iter()
        .map(|p| format!("{} {}", p["name"].as_str().unwrap(), p["status"].as_str().unwrap()))
        .collect();
    let want = ["load_random_weights", "trainer", "rollout_0", "update_0", "rollout_1", "update_1", "weights_moved"];
    assert_eq!(phases, want.map(|n| format!("{n} ok")));
    assert_eq!(b.iterations.len(), 2);
    for it in &b.iterations {
        assert!(it.sampled_tokens >= 2 * 4 * 3, "{it:?}");
        for v in [it.rollout_s, it.update_s, it.rollout_tok_s, it.update_tok_s] {
            assert!(v > 0.0 && v.is_finite(), "{it:?}");
        }
        assert_eq!(it.kept_groups, 2, "random weights give the toy reward variance: {it:?}");
        assert!(it.loss.is_some_and(f64::is_finite), "{it:?}");
        assert_eq!(it.trained_tokens, 2 * 4 * 3, "every sampled token of the kept groups is trained");
        // Rollouts hold the weights + the engine's caches; the update the weights + one tape.
        assert!(it.rollout_peak_bytes > b.weights_bytes && it.update_peak_bytes > b.weights_bytes, "{it:?}");
    }
    assert!(b.max_target_change > 0.0, "the adapted projections moved");
    assert_eq!(b.max_other_change, 0.0, "nothing but the adapted projections moved");
    assert!(b.rollout_share > 0.0 && b.rollout_share < 1.0);
}

#[test]
#[ignore = "full-size GRPO step benchmark: needs an H200-class GPU (run by scripts/gpu-check.sh)"]
fn full_size_lora_grpo_step_benchmark() {
    let mut log = PhaseLog::from_env("h200-train.json", "tests/train_bench.rs");
    let Some((gpu, cfg, tiny)) = record::open_bench_device(&mut log, &models()) else {
        panic!("no device: {:#}", log.document())
    };
    let b = if tiny { run::<f32>(&gpu, &cfg, true, &mut log) } else { run::<u16>(&gpu, &cfg, false, &mut log) };
    println!("TRAIN_BENCH {}", serde_json::to_string(&b).unwrap_or_default());
    assert!(b.is_some() && log.failed().is_empty(), "failed phases: {:?}", log.failed());
}
