//! `demo train --device`: the run's SFT, evaluations, GRPO rollouts and updates and checkpoints
//! on the emulated CUDA device — the device trainer holding one copy of the weights, lent to an
//! engine on the same device for every rollout and evaluation — on a cut-down suite (two trained
//! tasks, one held back) so that it fits CI. Checks against the CPU trainer and the run itself:
//!
//! - the device SFT (fp32) follows the CPU SFT of the same trajectories and settings step by
//!   step (`run_sft` on the CPU, same `sft.toml`);
//! - every GRPO iteration drew real episodes, and the weights saved after it moved exactly when
//!   that iteration updated (`grpo/step-N` against the previous checkpoint);
//! - the run directory holds what the command promises;
//! - an unknown device is refused before anything is written, and so is a device this build
//!   cannot open (the CLI's `--device cuda` without the `cuda` feature).
//!
//! The whole run on the emulator is `#[ignore]`d: the emulated device executes the attention
//! backward's per-(query, key) warp reductions as fiber switches, and one SFT step on the
//! teacher's ≈ 1k-token conversations takes minutes there (seconds on a GPU:
//! `scripts/gpu-check.sh` runs it with `--device cuda`). In CI the GRPO phase's use of the
//! trainers (`DemoTrainer`: rollouts, update, an engine on the updated weights, checkpoint) is
//! checked on the toy task instead, device against CPU.

#[path = "common/stores.rs"]
mod stores;

use execcritic::agent::trajectory::sft_conversations;
use execcritic::engine::{EngineConfig, Request, SamplingParams};
use execcritic::model::backend::cuda::CudaModel;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::pipeline::demo::{run_demo, DemoConfig};
use execcritic::pipeline::demo_trainer::DemoTrainer;
use execcritic::tensor::cuda::Gpu;
use execcritic::train::device::DeviceTrainer;
use execcritic::train::dynamic::DynamicSamplingConfig;
use execcritic::train::iteration::EngineSetup;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::toy::{MultipleOf8Task, ToyTaskConfig};
use execcritic::train::trainer::Trainer;
use execcritic::task::{easy_suite, load_tasks};
use execcritic::train::sft_run::{run_sft, SftConfig};
use execcritic::train::TrainModel;
use std::path::{Path, PathBuf};
use stores::max_diff;

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models")
}

/// The easy suite's first two tasks and its last one (held back), as a task file in `dir`.
fn cut_suite(dir: &Path) -> PathBuf {
    let tasks = load_tasks(&easy_suite().unwrap()).unwrap();
    let keep = [&tasks[0], &tasks[1], &tasks[tasks.len() - 1]];
    let lines: Vec<String> = keep.iter().map(|t| t.to_json().unwrap().to_string()).collect();
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[test]
#[ignore = "minutes per SFT step on the emulated device; run on a GPU host (scripts/gpu-check.sh)"]
fn demo_train_on_the_emulated_device_follows_the_cpu_sft_and_updates_its_weights() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let cfg = DemoConfig {
        tasks: Some(cut_suite(work.path())),
        held_back: 1,
        device: "emulator:f32".into(),
        sft_steps: 24,
        grpo_iterations: 2,
        groups: 1,
        group_size: 4,
        max_attempts: 3,
        save_every: 1,
        eval_every: 2,
        eval_samples: 1,
        test_teacher_tasks: 0,
        test_every: 0,
        ..DemoConfig::ci(&models())
    };
    let t0 = std::time::Instant::now();
    let s = run_demo(&cfg, &out, &mut |line| eprintln!("{line}")).unwrap();
    eprintln!("demo train on the emulator took {:.0} s", t0.elapsed().as_secs_f64());

    // The device SFT against the CPU SFT of the same sft.toml (device line dropped).
    let toml = std::fs::read_to_string(out.join("sft.toml")).unwrap();
    assert!(toml.contains("device = \"emulator:f32\""), "{toml}");
    let cpu_toml = out.join("sft-cpu.toml");
    std::fs::write(&cpu_toml, toml.replace("device = \"emulator:f32\"\n", "").replace("out = \"sft\"", "out = \"sft-cpu\"")).unwrap();
    let mut cpu_losses = Vec::new();
    let read = |p: &Path| sft_conversations(p).map_err(|e| e.to_string());
    run_sft(&SftConfig::from_file(&cpu_toml).unwrap(), &read, |r| cpu_losses.push(r.loss)).unwrap();
    assert_eq!(s.sft_losses.len(), cpu_losses.len());
    for (step, (d, c)) in s.sft_losses.iter().zip(&cpu_losses).enumerate() {
        let rel = (d - c).abs() / c.abs().max(1.0);
        assert!(rel <= 1e-3, "SFT step {}: loss {d} (device) vs {c} (CPU)", step + 1);
    }
    assert!(s.sft_losses.last().unwrap() < &s.sft_losses[0], "SFT loss {:?}", s.sft_losses);
    let sft_device = TrainModel::load(&out.join("sft/final")).unwrap();
    let sft_cpu = TrainModel::load(&out.join("sft-cpu/final")).unwrap();
    let d = max_diff(&sft_device, &sft_cpu);
    assert!(d <= 1e-3, "SFT weights: device vs CPU differ by {d}");

    // GRPO on the device: real episodes each iteration; weights move exactly when updated.
    assert_eq!(s.iterations.len(), 2);
    let mut before = sft_device;
    for (i, m) in s.iterations.iter().enumerate() {
        assert!(m.score.rollouts > 0, "iteration {i}: no episode drawn");
        let after = TrainModel::load(&out.join(format!("grpo/step-{}", i + 1))).unwrap();
        let moved = max_diff(&after, &before);
        match &m.update {
            Some(u) => assert!(moved > 0.0 && u.tokens > 0, "iteration {i} updated ({u:?}) but the weights moved {moved}"),
            None => assert_eq!(moved, 0.0, "iteration {i} did not update but the weights moved"),
        }
        before = after;
    }
    let last = TrainModel::load(&out.join("grpo/final")).unwrap();
    assert_eq!(max_diff(&last, &before), 0.0, "grpo/final is the last iteration's weights");

    // Evaluations on the device and the run directory.
    for (stage, split) in [("untrained", "held_back"), ("sft", "held_back"), ("sft", "trained"), ("grpo", "held_back"), ("grpo", "trained")] {
        let e = s.eval(stage, split).unwrap_or_else(|| panic!("no {stage} {split} evaluation"));
        assert!(e.rollouts > 0, "{stage} {split}: {e:?}");
    }
    for f in ["config.toml", "teacher.jsonl", "trajectories.jsonl", "metrics.jsonl", "rollouts.jsonl", "eval.jsonl", "reward_curve.svg", "report.md"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let config = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(config.contains("device = \"emulator:f32\""), "{config}");
}

#[test]
fn demo_train_refuses_a_device_it_cannot_use_before_writing_anything() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let cfg = DemoConfig { device: "tpu".into(), ..DemoConfig::ci(&models()) };
    let e = run_demo(&cfg, &out, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("--device tpu") && e.contains("cpu, cuda, cuda:N or emulator"), "{e}");
    assert!(!out.exists(), "the run directory was created");

    // The CLI on a build without the `cuda` feature (or a machine without a GPU).
    if cfg!(feature = "cuda") {
        return;
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["demo", "train", "--size", "ci", "--device", "cuda", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--device cuda"), "{err}");
    assert!(!out.exists(), "the run directory was created");
}

/// What one GRPO iteration of the demo's phase sees through [`DemoTrainer`]: the kept samples'
/// ids, the update's loss, the greedy continuation of a prompt by an engine on the updated
/// weights; the checkpoint is written to `dir`.
fn demo_step(tr: &mut impl DemoTrainer, dir: &Path) -> (Vec<Vec<u32>>, f64, Vec<u32>) {
    let setup = EngineSetup {
        tokenizer: Tokenizer::from_dir(&models().join("tokenizer")).unwrap(),
        template_dir: None,
        config: EngineConfig::default(),
    };
    let mut task = MultipleOf8Task::new(ToyTaskConfig::default(), 7);
    let sampling = DynamicSamplingConfig { groups: 2, group_size: 8, max_attempts: 50 };
    let collected = tr.rollouts(&setup, &mut task, &sampling).unwrap();
    let ids = collected.kept.iter().flat_map(|g| g.samples.iter().flat_map(|s| s.sample.iter().map(|r| r.ids.clone()))).collect();
    let loss = tr.update(&collected).unwrap().expect("groups with reward variance: an update").loss;
    let greedy = tr
        .with_engine(&setup, |engine| {
            let mut r = Request::new(vec![1, 11, 222], SamplingParams { temperature: 0.0, max_tokens: 8, ..Default::default() });
            r.ignore_eos = true;
            engine.generate_blocking(vec![r]).remove(0).unwrap().token_ids
        })
        .unwrap();
    tr.save(dir, &models().join("tiny-qwen35")).unwrap();
    (ids, loss, greedy)
}

#[test]
fn the_demo_grpo_phase_drives_the_device_trainer_as_the_cpu_trainer() {
    let lr = 3e-3;
    let opt = AdamWConfig { lr, ..Default::default() };
    let work = tempfile::tempdir().unwrap();
    let mut cpu = Trainer::new(TrainModel::load(&models().join("tiny-qwen35")).unwrap(), opt);
    let (cpu_ids, cpu_loss, cpu_greedy) = demo_step(&mut cpu, &work.path().join("cpu"));
    let gpu = Gpu::emulator().unwrap();
    let model = CudaModel::<f32>::load(&gpu, &models().join("tiny-qwen35")).unwrap();
    let mut dev = DeviceTrainer::new(gpu, model, opt).unwrap();
    let (dev_ids, dev_loss, dev_greedy) = demo_step(&mut dev, &work.path().join("device"));

    assert!(!cpu_ids.is_empty());
    assert_eq!(cpu_ids, dev_ids, "the device engine sampled other tokens");
    assert!((cpu_loss - dev_loss).abs() <= 1e-4, "loss {cpu_loss} (CPU) vs {dev_loss} (device)");
    assert_eq!(cpu_greedy, dev_greedy, "greedy tokens on the updated weights");
    let (c, d) = (TrainModel::load(&work.path().join("cpu")).unwrap(), TrainModel::load(&work.path().join("device")).unwrap());
    let start = TrainModel::load(&models().join("tiny-qwen35")).unwrap();
    let (diff, moved) = (max_diff(&c, &d), max_diff(&d, &start));
    eprintln!("checkpoints: device vs CPU {diff:e}, device moved {moved:e}");
    // One AdamW step moves a weight by ≤ ~lr; a near-zero gradient's sign may differ.
    assert!(moved > 0.0 && diff <= 2.0 * lr, "device vs CPU {diff}, moved {moved}");
}
