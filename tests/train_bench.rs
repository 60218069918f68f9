//! The GRPO step benchmark of the device trainer (issue #14, item 7): LoRA GRPO iterations on a
//! CUDA model with random weights — rollouts through the engine on the device over the ONE copy
//! of the weights, then the update on that copy — measuring per iteration the rollout and update
//! seconds, sampled tokens/s, trained tokens/s, the peak device memory of each phase, the loss,
//! and how far the served target weights moved. The workload is the toy task with agent-sized
//! prompts (`ToyTaskConfig::prompt_tokens`): random weights earn the toy's reward by chance, so
//! groups have reward variance and every iteration updates.
//!
//! In CI it runs on the emulated device at the tiny fixture's shape (a smoke test of the
//! benchmark and of two LoRA GRPO steps: positive numbers, a finite loss, the adapted weights
//! move and nothing else does; no timing threshold). Ignored here and run by
//! `scripts/gpu-check.sh` on an H200: the same at the Qwen3.5-35B-A3B shape with the LoRA
//! targets of `docs/train-plan-1xh200-lora.toml`, writing `$OUT/h200-train.json`.

use execcritic::engine::EngineConfig;
use execcritic::model::backend::cuda::CudaModel;
use execcritic::model::config::ModelConfig;
use execcritic::model::layout::qwen35_35b_a3b_config;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::engine::Engine;
use execcritic::tensor::cuda::{Act, Gpu};
use execcritic::tensor::emu::EmuDevice;
use execcritic::train::device::{DeviceTrainer, NamedGrad};
use execcritic::train::dynamic::{DynamicSamplingConfig, Scored};
use execcritic::train::iteration::EngineSetup;
use execcritic::train::lora::LoraConfig;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::rollout::{GroupSampler, Rollout};
use execcritic::train::toy::{MultipleOf8Task, ToyTaskConfig};
use execcritic::engine::cuda_backend::CudaDecoder;
use execcritic::engine::DecoderModel;
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The decoder prefix the random model's parameters are named under (as a Qwen3.5 checkpoint).
const PREFIX: &str = "model.language_model.";

fn models() -> std::path::PathBuf {
    std::env::var_os("EXECCRITIC_MODELS").map(Into::into).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

/// Peak device memory of a phase: exact on the emulator (its allocation high-water mark), and
/// on a GPU the largest `total − free` seen by a thread polling the driver every 10 ms.
enum Meter {
    Emu(Arc<EmuDevice>),
    Driver(Gpu),
}

impl Meter {
    /// Device bytes in use now.
    fn used(&self) -> u64 {
        match self {
            Meter::Emu(dev) => dev.live_bytes() as u64,
            Meter::Driver(gpu) => gpu.device().memory_info().map_or(0, |(free, total)| (total - free) as u64),
        }
    }

    fn phase<R>(&self, f: impl FnOnce() -> R) -> (R, u64) {
        match self {
            Meter::Emu(dev) => {
                dev.reset_peak();
                let r = f();
                (r, dev.peak_bytes() as u64)
            }
            Meter::Driver(gpu) => {
                let (stop, peak) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
                let dev = gpu.device().clone();
                let poll = {
                    let (stop, peak) = (stop.clone(), peak.clone());
                    std::thread::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            if let Some((free, total)) = dev.memory_info() {
                                peak.fetch_max((total - free) as u64, Ordering::Relaxed);
                            }
                            std::thread::sleep(std::time::Duration::from_millis(10));
                        }
                    })
                };
                let r = f();
                stop.store(true, Ordering::Relaxed);
                let _ = poll.join();
                (r, peak.load(Ordering::Relaxed))
            }
        }
    }
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
/// `toy`'s prompts, `sampling` groups per iteration.
fn bench<A: Act>(
    gpu: &Gpu,
    meter: &Meter,
    model: CudaModel<A>,
    lora: LoraConfig,
    toy: ToyTaskConfig,
    sampling: DynamicSamplingConfig,
    iterations: usize,
) -> TrainBench
where
    CudaDecoder<A>: DecoderModel,
{
    let weights_bytes = meter.used();
    let targets = lora.targets.clone();
    let opt = AdamWConfig { lr: 1e-3, ..Default::default() };
    let mut tr = DeviceTrainer::new_lora(gpu.clone(), model, opt, lora, PREFIX).unwrap();
    let served = |tr: &DeviceTrainer<A>| -> Vec<NamedGrad> { tr.model().unwrap().masters(gpu, &tr.opt, PREFIX).unwrap() };
    let before = served(&tr);
    let tokenizer = Tokenizer::from_dir(&models().join("tokenizer")).unwrap();
    let setup = EngineSetup { tokenizer, template_dir: None, config: EngineConfig::default() };
    let mut sampler = Counting { task: MultipleOf8Task::new(toy, 11), sampled: 0 };
    let mut out = vec![];
    for i in 0..iterations {
        let t = Instant::now();
        let (collected, rollout_peak) = meter.phase(|| tr.rollout_phase(&setup, &mut sampler, &sampling));
        let rollout_s = t.elapsed().as_secs_f64();
        let collected = collected.unwrap_or_else(|e| panic!("iteration {i}: rollouts: {e}"));
        let t = Instant::now();
        let (report, update_peak) = meter.phase(|| tr.update_phase(&collected));
        let update_s = t.elapsed().as_secs_f64();
        let report = report.unwrap();
        let trained = report.update.as_ref().map_or(0, |u| u.tokens);
        let it = IterationBench {
            rollout_s,
            update_s,
            sampled_tokens: std::mem::take(&mut sampler.sampled),
            rollout_tok_s: 0.0,
            trained_tokens: trained,
            update_tok_s: trained as f64 / update_s,
            mean_reward: report.mean_reward,
            kept_groups: report.kept_groups,
            loss: report.update.as_ref().map(|u| u.loss),
            grad_norm: report.update.as_ref().map(|u| u.stats.grad_norm),
            rollout_peak_bytes: rollout_peak,
            update_peak_bytes: update_peak,
        };
        let it = IterationBench { rollout_tok_s: it.sampled_tokens as f64 / rollout_s, ..it };
        eprintln!("iteration {i}: {}", serde_json::to_string(&it).unwrap());
        out.push(it);
    }
    let after = served(&tr);
    let (mut target, mut other) = (0.0f32, 0.0f32);
    for (b, a) in before.iter().zip(&after) {
        let d = b.data.iter().zip(&a.data).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        if targets.iter().any(|t| b.name.contains(t.as_str())) {
            target = target.max(d);
        } else {
            other = other.max(d);
        }
    }
    let (roll, upd): (f64, f64) = out.iter().fold((0.0, 0.0), |(r, u), it| (r + it.rollout_s, u + it.update_s));
    TrainBench { iterations: out, rollout_share: roll / (roll + upd), max_target_change: target, max_other_change: other, weights_bytes }
}

#[test]
fn two_lora_grpo_steps_on_the_emulator_are_measured() {
    let dev = Arc::new(EmuDevice::new());
    let gpu = Gpu::from_device(dev.clone());
    let cfg = ModelConfig::from_dir(&models().join("tiny-qwen35")).unwrap();
    let model = CudaModel::<f32>::random(&gpu, cfg, 5).unwrap();
    let lora = LoraConfig { rank: 4, alpha: 8.0, targets: vec!["self_attn.".into(), "linear_attn.".into(), "mlp.experts.".into()], seed: 1 };
    let toy = ToyTaskConfig { prompts: vec![11, 222, 333, 444], completion_tokens: 3, bos: 1, prompt_tokens: 24 };
    let sampling = DynamicSamplingConfig { groups: 2, group_size: 4, max_attempts: 16 };
    let b = bench(&gpu, &Meter::Emu(dev), model, lora, toy, sampling, 2);
    eprintln!("{}", serde_json::to_string_pretty(&b).unwrap());
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
    let gpu = Gpu::cuda(0).expect("the benchmark needs a GPU");
    let cfg = ModelConfig::from_json_str(&qwen35_35b_a3b_config().to_string(), Path::new("qwen3.5-35b-a3b")).unwrap();
    let model = CudaModel::<u16>::random(&gpu, cfg, 1).unwrap();
    // `docs/train-plan-1xh200-lora.toml`'s targets, rank 16.
    let targets = ["self_attn.", "linear_attn.", "shared_expert."];
    let lora = LoraConfig { rank: 16, alpha: 32.0, targets: targets.map(String::from).to_vec(), seed: 1 };
    // 4 groups × 8 rollouts of 2,048-token prompts and 256 sampled tokens.
    let toy = ToyTaskConfig { prompts: vec![11, 222, 333, 444], completion_tokens: 256, bos: 1, prompt_tokens: 2048 };
    let sampling = DynamicSamplingConfig { groups: 4, group_size: 8, max_attempts: 16 };
    let b = bench(&gpu, &Meter::Driver(gpu.clone()), model, lora, toy.clone(), sampling, 2);
    let commit = std::env::var("EXECCRITIC_COMMIT").unwrap_or_else(|_| "unknown".into());
    let date = std::env::var("EXECCRITIC_DATE").unwrap_or_else(|_| "unknown".into());
    let json = serde_json::json!({
        "gpu": gpu.name(), "commit": commit, "date": date, "source": "tests/train_bench.rs",
        "workload": {"lora_targets": targets, "rank": 16, "groups": sampling.groups, "group_size": sampling.group_size,
                     "prompt_tokens": toy.prompt_tokens, "completion_tokens": toy.completion_tokens},
        "result": b,
    });
    println!("TRAIN_BENCH {json}");
    if let Ok(out) = std::env::var("OUT") {
        std::fs::write(Path::new(&out).join("h200-train.json"), serde_json::to_string_pretty(&json).unwrap()).unwrap();
    }
}
