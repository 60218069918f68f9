//! `resume` in `train grpo` (the standard "long runs survive Ctrl-C and kill -9"): a run
//! resumed from its `step-k` checkpoint continues the uninterrupted run — weights, AdamW
//! moments and step, the iteration count, the iteration numbers of its reports, the names of
//! its `step-<n>` checkpoints and, because each iteration's draws are seeded from the run's
//! `seed` and the iteration (`GroupSampler::begin_iteration`), the very draws the uninterrupted
//! run made at iterations k.. — never the first iterations' draws again. On the CPU trainer
//! and on the device trainer (`device = "emulator:f32"`); bad `resume` paths are clear errors
//! before any work; the CLI says where it resumed.
//!
//! What is compared exactly and what up to rounding: the draws (sampled token ids per
//! iteration), the optimizer step and the iteration count are exact. The weights and moments
//! are compared up to f32 rounding noise (their distance ≤ 1e-3 of the distance the
//! iterations after k moved them): the engine batches a group's requests as they reach its
//! thread, and which requests share a decode step can change a summation order, so two runs
//! from the same state may differ in the last bits of a log-probability (see
//! `tests/train_grpo_device.rs`). The test prints whether they came out bit-equal.

use execcritic::engine::Engine;
use execcritic::train::checkpoint::{load_optimizer, read_progress, RunProgress};
use execcritic::train::dynamic::Scored;
use execcritic::train::error::Result;
use execcritic::train::grpo_run::{builtin_sampler, run_grpo, GrpoRunConfig};
use execcritic::train::rollout::{GroupSampler, Rollout};
use execcritic::train::TrainModel;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The example toy config, CI-sized (2 groups × 8 per iteration), writing to `out` (relative
/// to the config file) on `device`, `steps` iterations, a checkpoint every `save_every`, and
/// `resume` when given (written as given: relative to the config file).
fn config(out: &str, device: &str, steps: u64, save_every: u64, resume: Option<&str>) -> String {
    let base = std::fs::read_to_string(root().join("docs/train-grpo-toy.toml")).unwrap();
    let resume = resume.map(|r| format!("\nresume = {r:?}")).unwrap_or_default();
    let cfg = base
        .replace("\"../models/", &format!("\"{}/models/", root().display()))
        .replace("out = \"../target/grpo-toy\"", &format!("out = {out:?}"))
        .replace("steps = 100", &format!("steps = {steps}"))
        .replace("save_every = 10 ", &format!("save_every = {save_every} "))
        .replace("groups = 16 ", "groups = 2 ")
        .replace("max_attempts = 200", "max_attempts = 50")
        .replace("device = \"cpu\"", &format!("device = {device:?}{resume}"));
    assert!(cfg.contains(&format!("steps = {steps}\n")) && cfg.contains("groups = 2 "), "{cfg}");
    cfg
}

/// The toy sampler, recording the token ids of every group it draws under the iteration it
/// drew them in.
struct Recording {
    inner: Box<dyn GroupSampler>,
    iteration: Option<u64>,
    draws: BTreeMap<u64, Vec<Vec<u32>>>,
}

impl GroupSampler for Recording {
    fn sample_group(&mut self, engine: &Engine, attempt: usize, size: usize) -> Result<Vec<Scored<Vec<Rollout>>>> {
        let group = self.inner.sample_group(engine, attempt, size)?;
        let it = self.iteration.expect("train grpo begins every iteration");
        let ids = group.iter().flat_map(|s| s.sample.iter().map(|r| r.ids.clone()));
        self.draws.entry(it).or_default().extend(ids);
        Ok(group)
    }

    fn begin_iteration(&mut self, iteration: u64, groups: usize) {
        self.iteration = Some(iteration);
        self.inner.begin_iteration(iteration, groups);
    }
}

/// What a run did: the iteration numbers of its reports and its draws per iteration.
struct Run {
    iterations: Vec<u64>,
    draws: BTreeMap<u64, Vec<Vec<u32>>>,
}

/// Write `cfg` to `<dir>/<name>.toml` and run it in-process.
fn run(dir: &Path, name: &str, cfg: &str) -> Run {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, cfg).unwrap();
    let c = GrpoRunConfig::from_file(&path).unwrap();
    let mut sampler = Recording { inner: builtin_sampler(&c).unwrap(), iteration: None, draws: BTreeMap::new() };
    let mut iterations = Vec::new();
    run_grpo(&c, &mut sampler, |r| iterations.push(r.iteration)).unwrap();
    Run { iterations, draws: sampler.draws }
}

/// The checkpoint at `dir`: every weight and moment (in parameter order) and its progress.
fn state(dir: &Path) -> (Vec<f32>, Vec<f32>, Vec<f32>, RunProgress) {
    let model = TrainModel::load(dir).unwrap();
    let opt = load_optimizer(dir, &model.store).unwrap();
    let w = model.store.params.iter().flat_map(|p| p.data.iter().copied()).collect();
    (w, opt.m.concat(), opt.v.concat(), read_progress(dir).unwrap())
}

fn dist(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>().sqrt()
}

/// The resumed run's checkpoint `resumed` equals the uninterrupted run's `straight` (exact
/// progress; weights and moments up to rounding noise, well below how far the iterations
/// after the checkpoint `from` moved them).
fn assert_continues(from: &Path, straight: &Path, resumed: &Path) {
    let (w0, m0, _, _) = state(from);
    let (wa, ma, va, pa) = state(straight);
    let (wb, mb, vb, pb) = state(resumed);
    assert_eq!(pa, pb, "optimizer step and iteration count");
    let bit_equal = wa == wb && ma == mb && va == vb;
    let (dw, moved) = (dist(&wa, &wb), dist(&wa, &w0));
    let (dm, dv) = (dist(&ma, &mb), dist(&va, &vb));
    eprintln!(
        "{}: bit-equal {bit_equal}; |Δw| {dw:e} of {moved:e} moved, |Δm| {dm:e} of {:e}, |Δv| {dv:e} of {:e}",
        resumed.display(),
        dist(&ma, &m0),
        dist(&va, &vec![0.0; va.len()])
    );
    assert!(moved > 0.0, "the iterations after the checkpoint updated the weights");
    assert!(dw <= 1e-3 * moved, "weights: {dw} apart, the run moved them {moved}");
    assert!(dm <= 1e-3 * dist(&ma, &m0), "first moments: {dm} apart");
    assert!(dv <= 1e-3 * dist(&va, &vec![0.0; va.len()]), "second moments: {dv} apart");
}

/// CPU trainer: 4 iterations straight (checkpoints `step-2`, `step-4`) vs resuming the
/// `step-2` checkpoint (given relative to the config file) for the last 2. Then the CLI on the
/// same checkpoint with `steps = 3`: it says where it resumed and runs iteration 2 only.
#[test]
fn a_resumed_cpu_run_continues_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let a = run(dir.path(), "a", &config("a", "cpu", 4, 2, None));
    assert_eq!(a.iterations, [0, 1, 2, 3]);
    let b = run(dir.path(), "b", &config("b", "cpu", 4, 2, Some("a/step-2")));
    assert_eq!(b.iterations, [2, 3], "iteration numbers continue from the checkpoint's");
    assert_eq!(b.draws.keys().copied().collect::<Vec<_>>(), [2, 3]);
    for it in [2, 3] {
        assert_eq!(a.draws[&it], b.draws[&it], "iteration {it}: the resumed run draws what the straight run drew");
    }
    assert_ne!(b.draws[&2], a.draws[&0], "the resumed run does not replay the first run's draws");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    assert!(!b.join("step-2").exists(), "nothing saved for iterations the resumed run did not run");
    assert_eq!(read_progress(&b.join("step-4")).unwrap(), read_progress(&b.join("final")).unwrap());
    assert_eq!(read_progress(&a.join("step-2")).unwrap().iteration, 2);
    assert_continues(&a.join("step-2"), &a.join("step-4"), &b.join("step-4"));
    assert_continues(&a.join("step-2"), &a.join("final"), &b.join("final"));

    let path = dir.path().join("c.toml");
    std::fs::write(&path, config("c", "cpu", 3, 0, Some("a/step-2"))).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_execcritic")).args(["train", "grpo", "--config"]).arg(&path).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let resumed_at = format!("resuming from {} after iteration 2 (optimizer step ", dir.path().join("a/step-2").display());
    assert!(stderr.contains(&resumed_at) && stderr.contains("1 of 3 iterations left"), "{stderr}");
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert_eq!(lines[0]["iteration"], 2);
    assert_eq!(read_progress(&dir.path().join("c/final")).unwrap().iteration, 3);
}

/// Device trainer on the emulator (f32): 2 iterations straight (checkpoints `step-1`,
/// `step-2`) vs resuming `step-1` (`DeviceTrainer::resume`) for the last one.
#[test]
fn a_resumed_device_run_continues_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let a = run(dir.path(), "a", &config("a", "emulator:f32", 2, 1, None));
    assert_eq!(a.iterations, [0, 1]);
    let b = run(dir.path(), "b", &config("b", "emulator:f32", 2, 1, Some("a/step-1")));
    assert_eq!(b.iterations, [1]);
    assert_eq!(a.draws[&1], b.draws[&1], "the resumed run draws what the straight run drew");
    assert_ne!(b.draws[&1], a.draws[&0], "the resumed run does not replay the first run's draws");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    assert!(!b.join("step-1").exists());
    assert_continues(&a.join("step-1"), &a.join("step-2"), &b.join("step-2"));
    assert_continues(&a.join("step-1"), &a.join("final"), &b.join("final"));
}

/// A missing folder, a folder without optimizer state (the model folder), a malformed
/// `trainer_state.json`, missing moments, and `[lora]` with `resume`: clear errors, raised
/// before any iteration and before anything is written.
#[test]
fn bad_resume_paths_are_clear_errors_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let model = root().join("models/tiny-qwen35");
    // A checkpoint folder whose optimizer moments are missing.
    let no_moments = dir.path().join("no-moments");
    std::fs::create_dir(&no_moments).unwrap();
    for f in std::fs::read_dir(&model).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, no_moments.join(f.file_name().unwrap())).unwrap();
    }
    let adamw = r#"{"lr": 0.003, "beta1": 0.9, "beta2": 0.98, "eps": 1e-8, "weight_decay": 0.1, "max_grad_norm": 1.0}"#;
    std::fs::write(no_moments.join("trainer_state.json"), format!(r#"{{"step": 2, "iteration": 2, "adamw": {adamw}}}"#)).unwrap();
    let malformed = dir.path().join("malformed");
    std::fs::create_dir(&malformed).unwrap();
    std::fs::write(malformed.join("trainer_state.json"), r#"{"step": "two"}"#).unwrap();
    let cases = [
        ("missing", dir.path().join("missing"), "no such checkpoint folder"),
        ("model", model.clone(), "no trainer_state.json"),
        ("malformed", malformed.clone(), "no step"),
        ("no-moments", no_moments.clone(), "optimizer.safetensors"),
    ];
    for device in ["cpu", "emulator:f32"] {
        for (name, resume, expected) in &cases {
            let path = dir.path().join(format!("{name}.toml"));
            std::fs::write(&path, config(&format!("out-{name}"), device, 2, 1, Some(resume.to_str().unwrap()))).unwrap();
            let c = GrpoRunConfig::from_file(&path).unwrap();
            let mut iterations = 0;
            let err = run_grpo(&c, builtin_sampler(&c).unwrap().as_mut(), |_| iterations += 1).unwrap_err().to_string();
            assert!(err.contains(expected), "{device}, {name}: {err}");
            assert!(name == &"no-moments" || err.contains(resume.to_str().unwrap()), "{device}, {name}: names the folder: {err}");
            assert_eq!(iterations, 0, "{device}, {name}: no iteration ran");
            assert!(!dir.path().join(format!("out-{name}")).exists(), "{device}, {name}: nothing written");
        }
    }
    // The CLI: the same error, before it starts.
    let out = Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["train", "grpo", "--config"])
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("no such checkpoint folder"), "{stderr}");

    let lora = config("out-lora", "emulator:f32", 2, 1, Some("a/step-1")) + "\n[lora]\nrank = 2\nalpha = 4.0\ntargets = [\"q_proj\"]\n";
    let path = dir.path().join("lora.toml");
    std::fs::write(&path, lora).unwrap();
    let err = GrpoRunConfig::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("resume is not supported with lora"), "{err}");
}
