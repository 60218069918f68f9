//! The memory plan (`train::plan`, `execcritic train plan`):
//! * checked against what the code allocates for a scaled-down Qwen3.5 layout: the CPU trainer's
//!   f32 parameters, AdamW states and gradients, LoRA adapters, the engine's per-sequence
//!   KV + GDN state after a prefill, and the CUDA model's weights on the emulated device;
//! * the two documented cases for Qwen3.5-35B-A3B (one H200 LoRA, eight H200s full-parameter
//!   with expert parallel) — their exact rows and that both fit;
//! * the CLI prints the table and the JSON.

#[path = "common/layout.rs"]
mod layout;

use execcritic::model::layout::{decoder_tensors, ExpertLayout, TensorSpec};
use execcritic::model::{ForwardOptions, LogitsMode, Model, SeqInput};
use execcritic::train::lora::{Lora, LoraConfig};
use execcritic::train::optim::{AdamW, AdamWConfig};
use execcritic::train::plan::{plan, MemoryPlan, PlanConfig, RolloutSpec, TrainMode, TrainSpec};
use execcritic::train::TrainModel;
use layout::{scaled_config, write_layout};
use std::path::{Path, PathBuf};

fn spec(mode: TrainMode, rank: usize, targets: &[&str], tokens: usize) -> TrainSpec {
    TrainSpec {
        mode,
        lora_rank: rank,
        lora_targets: targets.iter().map(|t| t.to_string()).collect(),
        micro_batch_tokens: tokens,
        recompute: true,
        loss_chunk_tokens: None,
    }
}

fn config(
    model: &Path,
    gpus: usize,
    train: TrainSpec,
    slots: usize,
    context: usize,
    cache_bytes: usize,
) -> PlanConfig {
    PlanConfig {
        model: model.to_string_lossy().into_owned(),
        gpus,
        gpu_memory_gib: 140.0,
        shard_optimizer: true,
        workspace_gib: 0.0,
        train,
        rollout: RolloutSpec {
            slots,
            context,
            kv_tokens: None,
            cache_bytes,
        },
    }
}

fn row(p: &MemoryPlan, category: &str) -> u64 {
    p.rows
        .iter()
        .find(|r| r.category == category)
        .unwrap_or_else(|| panic!("no row {category}"))
        .bytes
}

#[test]
fn plan_matches_the_cpu_trainer_allocations_on_a_scaled_layout() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, specs) = write_layout(dir.path(), &scaled_config(), ExpertLayout::Fused, &[]);
    let tm = TrainModel::load(dir.path()).unwrap();
    let numel = tm.store.numel() as u64;

    // Full-parameter, one rank: master = the trainer's f32 parameters, AdamW = its m + v,
    // gradients = its gradient buffers, weights = the same parameters in bf16.
    let full = plan(
        &config(dir.path(), 1, spec(TrainMode::Full, 0, &[], 64), 1, 64, 4),
        &cfg,
    )
    .unwrap();
    assert_eq!(full.params.total, numel);
    assert_eq!(row(&full, "master (fp32)"), 4 * numel);
    let opt = AdamW::new(AdamWConfig::default(), &tm.store);
    let adam: usize = opt.m.iter().chain(&opt.v).map(Vec::len).sum();
    assert_eq!(row(&full, "AdamW m, v (fp32)"), 4 * adam as u64);
    let grads: usize = tm.store.zero_grads().0.iter().map(Vec::len).sum();
    assert_eq!(row(&full, "gradients (fp32)"), 4 * grads as u64);
    assert_eq!(row(&full, "weights (bf16)"), 2 * numel);

    // LoRA: the trainable count is the adapters the trainer creates for those targets.
    let targets = ["self_attn.", "linear_attn.", "shared_expert.", "experts."];
    let lora = plan(
        &config(dir.path(), 1, spec(TrainMode::Lora, 4, &targets, 64), 1, 64, 4),
        &cfg,
    )
    .unwrap();
    let adapters = Lora::new(
        LoraConfig {
            rank: 4,
            alpha: 8.0,
            targets: targets.iter().map(|t| t.to_string()).collect(),
            seed: 0,
        },
        &tm.store,
    )
    .unwrap()
    .adapters
    .numel() as u64;
    assert_eq!(lora.params.trainable, adapters);
    assert_eq!(row(&lora, "master (fp32)"), 4 * adapters);
    assert_eq!(row(&lora, "gradients (fp32)"), 4 * adapters);
    // The routed experts' frozen bases are host memory (the device LoRA trainer keeps them
    // there); the device's base row holds the other adapted weights' and the adapter copies.
    let routed: u64 = tm.store.params.iter().filter(|p| p.name.contains(".mlp.experts.")).map(|p| p.data.len() as u64).sum();
    assert!(routed > 0);
    assert_eq!(lora.params.adapted_routed, routed);
    assert_eq!(lora.host_bytes, 2 * routed);
    assert_eq!(row(&lora, "LoRA bases (bf16)"), 2 * (lora.params.adapted - routed + adapters));

    // Caches: one slot of `n` tokens in f32 = what the CPU engine's state holds after a prefill
    // (`n` a whole number of the paged pool's 16-token blocks, which the plan rounds up to).
    let model = Model::load(dir.path()).unwrap();
    let n = 48;
    let mut state = model.new_state();
    let ids: Vec<u32> = (0..n as u32).collect();
    model
        .forward(
            &mut [SeqInput::new(&ids, &mut state)],
            &ForwardOptions {
                logits: LogitsMode::None,
                hidden_states: false,
                routing: false,
            },
        )
        .unwrap();
    let one = plan(
        &config(dir.path(), 1, spec(TrainMode::Full, 0, &[], 64), 1, n, 4),
        &cfg,
    )
    .unwrap();
    assert_eq!(
        row(&one, "KV cache") + row(&one, "GDN state"),
        state.cache_bytes() as u64
    );

    // The CUDA model on the emulated device: the weights row, plus 2 bytes per element of
    // `A_log`/`dt_bias` (kept in f32).
    let dev = std::sync::Arc::new(execcritic::tensor::emu::EmuDevice::new());
    let gpu = execcritic::tensor::cuda::Gpu::from_device(dev.clone());
    let before = dev.live_bytes();
    let cuda = execcritic::model::backend::cuda::CudaModel::<u16>::load(&gpu, dir.path()).unwrap();
    let gates: u64 = specs
        .iter()
        .filter(|t| t.name.ends_with("A_log") || t.name.ends_with("dt_bias"))
        .map(|t| 2 * t.numel() as u64)
        .sum();
    assert_eq!(
        (dev.live_bytes() - before) as u64,
        row(&full, "weights (bf16)") + gates
    );
    drop(cuda);

    // Expert parallel over 2 ranks: half the experts, every replicated parameter; ZeRO-1 shards
    // the replicated parameters' master/AdamW.
    let ep = plan(
        &config(dir.path(), 2, spec(TrainMode::Full, 0, &[], 64), 1, 64, 4),
        &cfg,
    )
    .unwrap();
    let experts: u64 = specs
        .iter()
        .filter(|t| t.name.contains(".experts."))
        .map(|t| t.numel() as u64)
        .sum();
    let replicated = numel - experts;
    assert_eq!(ep.params.local, replicated + experts / 2);
    assert_eq!(
        row(&ep, "master (fp32)"),
        4 * (experts / 2 + replicated.div_ceil(2))
    );
    assert_eq!(row(&ep, "gradients (fp32)"), 4 * (replicated + experts / 2));
    // 8 experts do not split over 3 ranks.
    assert!(plan(
        &config(dir.path(), 3, spec(TrainMode::Full, 0, &[], 64), 1, 64, 4),
        &cfg
    )
    .is_err());
}

fn docs(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name)
}

#[test]
fn documented_h200_plans_fit() {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let one = PlanConfig::from_file(&docs("train-plan-1xh200-lora.toml")).unwrap();
    let cfg = one.model_config().unwrap();
    let all: u64 = decoder_tensors(&cfg, ExpertLayout::Fused, "")
        .iter()
        .map(|t: &TensorSpec| t.numel() as u64)
        .sum();
    let p1 = plan(&one, &cfg).unwrap();
    assert_eq!(p1.params.total, all);
    assert_eq!(row(&p1, "weights (bf16)"), 2 * all);
    // 10 attention layers x (k, v) x 2 kv-heads x 256 x bf16 per token; 30 GDN layers x
    // (f32 [32, 128, 128] state + bf16 3 x 8192 conv window) per slot.
    assert_eq!(row(&p1, "KV cache"), 32 * 32768 * 10 * 2 * 2 * 256 * 2);
    assert_eq!(
        row(&p1, "GDN state"),
        32 * 30 * (32 * 128 * 128 * 4 + 3 * 8192 * 2)
    );
    assert!(p1.params.trainable < all / 20, "LoRA trains a small fraction");
    assert!(p1.fits, "{}", p1.table());
    assert!(gib(p1.total_bytes) > 70.0);

    let eight = PlanConfig::from_file(&docs("train-plan-8xh200-full.toml")).unwrap();
    let p8 = plan(&eight, &cfg).unwrap();
    let experts: u64 = 40 * 256 * 3 * 512 * 2048;
    assert_eq!(p8.params.local, all - experts + experts / 8);
    assert_eq!(p8.params.trainable, p8.params.local);
    assert!(p8.fits, "{}", p8.table());
    // The same full-parameter run on one GPU does not fit.
    let mut single = eight.clone();
    single.gpus = 1;
    assert!(!plan(&single, &cfg).unwrap().fits);
}

#[test]
fn cli_prints_the_plan() {
    let exe = env!("CARGO_BIN_EXE_execcritic");
    let cfg = docs("train-plan-8xh200-full.toml");
    let out = std::process::Command::new(exe)
        .args(["train", "plan", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "weights (bf16)",
        "AdamW",
        "KV cache",
        "GDN state",
        "activations",
        "fits",
    ] {
        assert!(text.contains(needle), "{needle} missing from\n{text}");
    }
    let out = std::process::Command::new(exe)
        .args(["train", "plan", "--json", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gpus"], 8);
    assert_eq!(v["fits"], true);
    let sum: u64 = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(v["total_bytes"].as_u64().unwrap(), sum);
    // A bad config is an error, not a panic.
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "model = \"qwen3.5-35b-a3b\"\ngpus = 3\n[train]\nmode = \"full\"\nmicro_batch_tokens = 8\n[rollout]\nslots = 1\ncontext = 8\n").unwrap();
    let out = std::process::Command::new(exe)
        .args(["train", "plan", "--config"])
        .arg(bad.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("divide"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
