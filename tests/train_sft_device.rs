//! SFT on the emulated CUDA device (`train::device::DeviceTrainer`, f32 build) against the CPU
//! trainer, device checkpoints with optimizer state, and resuming.
//!
//! Measured (2-core machine, debug build, ~42 s for the three tests): device vs CPU losses
//! within 1e-6 relative, weights within 3.3e-4 after 3 steps at lr 1e-3 (bound 6e-3), moments
//! 2.4e-4 / 2.6e-4 relative; one device step from the CPU checkpoint within 1.4e-7 of the CPU's.
//!
//! `device_sft_equals_the_cpu_trainer`: three SFT steps on the device from the weights and
//! batches of three CPU trainer steps: the same loss per step (within 1e-4, relative to the
//! loss), a checkpoint in the CPU trainer's format whose weights are the CPU trainer's (bound
//! below) and whose optimizer state the CPU trainer loads (moments within 1e-3 of the CPU's,
//! relative to their norm; the same step).
//! `device_runs_resume_from_device_and_cpu_checkpoints`: 2 steps, save, resume in a fresh
//! trainer, 2 more steps = 4 continuous steps (losses, masters and moments within 1e-6;
//! measured bit-equal on the emulator); a CPU-written
//! checkpoint with optimizer state resumes on the device to the CPU trainer's next step; bad
//! optimizer state (no `trainer_state.json`, a missing or mis-shaped moment) is a clear error.
//! `train_sft_cli_on_the_emulated_device`: `execcritic train sft` with `device = "emulator:f32"`
//! writes loadable checkpoints with optimizer state, the loss decreases, a resumed run continues
//! with the continuous run's losses; the bf16 build's loss goes down; LoRA with a device is
//! refused.

#[path = "common/stores.rs"]
mod stores;

use execcritic::model::backend::cuda::CudaModel;
use execcritic::model::Model;
use execcritic::tensor::cuda::Gpu;
use execcritic::train::checkpoint::{load_optimizer, save, SHARD_BYTES};
use execcritic::train::device::DeviceTrainer;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::params::write_safetensors;
use execcritic::train::trainer::{SftExample, Trainer};
use execcritic::train::TrainModel;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use stores::max_diff;

const LR: f32 = 1e-3;

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-qwen35")
}

fn opt() -> AdamWConfig {
    AdamWConfig { lr: LR, ..Default::default() }
}

/// Batch `k`: two sequences of 20 tokens, the last 12 trained.
fn batch(k: u32) -> Vec<SftExample> {
    (0..2u32)
        .map(|s| {
            let ids: Vec<u32> = (0..20u32).map(|i| (i * 37 + s * 101 + k * 13 + 5) % 1024).collect();
            SftExample { ids, mask: (0..20).map(|i| i >= 8).collect() }
        })
        .collect()
}

fn device() -> DeviceTrainer<f32> {
    let gpu = Gpu::emulator().unwrap();
    let model = CudaModel::<f32>::load(&gpu, &tiny()).unwrap();
    DeviceTrainer::new(gpu, model, opt()).unwrap()
}

fn cpu() -> Trainer {
    Trainer::new(TrainModel::load(&tiny()).unwrap(), opt())
}

fn assert_loss(step: usize, device: f64, cpu: f64) {
    let rel = (device - cpu).abs() / cpu.abs().max(1.0);
    assert!(rel <= 1e-4, "step {step}: loss {device} (device) vs {cpu} (CPU)");
}

/// ‖a − b‖ / ‖b‖ over all the tensors.
fn rel_norm(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    let (mut d, mut n) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(y) {
            d += ((p - q) as f64).powi(2);
            n += (*q as f64).powi(2);
        }
    }
    (d / n.max(1e-30)).sqrt()
}

// AdamW moves a weight by at most ~lr per step (|m̂/(√v̂+ε)| ≲ 1), so two runs whose gradients
// agree to 1e-4 can differ by at most 2·lr per step where a near-zero gradient changes sign;
// what is measured is far below (printed).
fn weight_bound(steps: usize) -> f32 {
    2.0 * LR * steps as f32
}

#[test]
fn device_sft_equals_the_cpu_trainer() {
    let (mut dev, mut cpu) = (device(), cpu());
    for k in 0..3 {
        let (d, c) = (dev.sft_step(&batch(k)).unwrap(), cpu.sft_step(&batch(k)).unwrap());
        eprintln!("step {}: loss {:.6} (device) {:.6} (CPU), grad norm {:.4} / {:.4}", d.step, d.loss, c.loss, d.stats.grad_norm, c.stats.grad_norm);
        assert_eq!((d.step, d.tokens), (c.step, c.tokens));
        assert_loss(k as usize, d.loss, c.loss);
    }
    assert!(dev.sft_step(&[SftExample { ids: vec![1, 2], mask: vec![true, false] }]).is_err(), "no trained token");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("final");
    dev.save(&out, &tiny()).unwrap();
    Model::load(&out).unwrap();
    let saved = TrainModel::load(&out).unwrap();
    let worst = max_diff(&saved, &cpu.model);
    eprintln!("device checkpoint vs CPU trainer after 3 steps: max |Δw| = {worst:e}");
    assert!(worst <= weight_bound(3), "device checkpoint differs from the CPU trainer by {worst}");
    // The CPU trainer reads the device run's optimizer state.
    let o = load_optimizer(&out, &saved.store).unwrap();
    assert_eq!(o.step, 3);
    let (dm, dv) = (rel_norm(&o.m, &cpu.opt.m), rel_norm(&o.v, &cpu.opt.v));
    eprintln!("moments vs CPU: ‖Δm‖/‖m‖ = {dm:e}, ‖Δv‖/‖v‖ = {dv:e}");
    assert!(dm <= 1e-3 && dv <= 1e-3, "device moments differ from the CPU trainer's: {dm} {dv}");
}

/// A copy of the checkpoint folder `src` at `dst`.
fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}

/// Rewrite `dir`'s optimizer file through `edit` (name → (shape, values)).
fn edit_optimizer(dir: &Path, edit: impl FnOnce(&mut BTreeMap<String, (Vec<usize>, Vec<f32>)>)) {
    let path = dir.join("optimizer.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut map: BTreeMap<String, (Vec<usize>, Vec<f32>)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| {
            let v = t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            (n, (t.shape().to_vec(), v))
        })
        .collect();
    edit(&mut map);
    let refs = map.iter().map(|(n, (s, v))| (n.clone(), (s.clone(), &v[..]))).collect();
    write_safetensors(&path, &refs).unwrap();
}

fn resume_error(dir: &Path) -> String {
    match DeviceTrainer::<f32>::resume(Gpu::emulator().unwrap(), dir) {
        Ok(_) => panic!("{} resumed", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn device_runs_resume_from_device_and_cpu_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    // Four continuous steps.
    let mut cont = device();
    let losses: Vec<f64> = (0..4).map(|k| cont.sft_step(&batch(k)).unwrap().loss).collect();
    cont.save(&dir.path().join("cont-4"), &tiny()).unwrap();

    // Two steps, save, resume in a fresh trainer, two more.
    let mut first = device();
    for k in 0..2 {
        let l = first.sft_step(&batch(k)).unwrap().loss;
        assert!((l - losses[k as usize]).abs() <= 1e-6, "step {k}: {l} vs {}", losses[k as usize]);
    }
    let ck = dir.path().join("dev-2");
    first.save(&ck, &tiny()).unwrap();
    drop(first);
    let mut resumed = DeviceTrainer::<f32>::resume(Gpu::emulator().unwrap(), &ck).unwrap();
    assert_eq!((resumed.opt.step, resumed.opt.cfg), (2, opt()));
    for k in 2..4 {
        let r = resumed.sft_step(&batch(k)).unwrap();
        let err = (r.loss - losses[k as usize]).abs();
        eprintln!("resumed step {}: loss {:.9} vs continuous {:.9} (|Δ| = {err:e})", r.step, r.loss, losses[k as usize]);
        assert!(err <= 1e-6, "resumed step {}: loss {} vs {}", r.step, r.loss, losses[k as usize]);
    }
    resumed.save(&dir.path().join("res-4"), &tiny()).unwrap();
    let (a, b) = (TrainModel::load(&dir.path().join("res-4")).unwrap(), TrainModel::load(&dir.path().join("cont-4")).unwrap());
    let worst = max_diff(&a, &b);
    let (oa, ob) = (load_optimizer(&dir.path().join("res-4"), &a.store).unwrap(), load_optimizer(&dir.path().join("cont-4"), &b.store).unwrap());
    let moments = rel_norm(&oa.m, &ob.m).max(rel_norm(&oa.v, &ob.v));
    eprintln!("2 + resume + 2 vs 4 continuous: max |Δw| = {worst:e}, moments rel {moments:e}");
    assert!(worst <= 1e-6 && moments <= 1e-6, "resumed run differs: {worst} {moments}");
    assert_eq!(oa.step, 4);

    // A CPU checkpoint with optimizer state resumes on the device to the CPU trainer's next step.
    let mut c = cpu();
    for k in 0..2 {
        c.sft_step(&batch(k)).unwrap();
    }
    let cck = dir.path().join("cpu-2");
    save(&cck, &tiny(), &c.model.store, Some(&c.opt), SHARD_BYTES).unwrap();
    let next = c.sft_step(&batch(2)).unwrap();
    let mut d = DeviceTrainer::<f32>::resume(Gpu::emulator().unwrap(), &cck).unwrap();
    let dn = d.sft_step(&batch(2)).unwrap();
    eprintln!("from the CPU checkpoint, step 3: loss {:.6} (device) {:.6} (CPU)", dn.loss, next.loss);
    assert_eq!(dn.step, 3);
    assert_loss(3, dn.loss, next.loss);
    d.save(&dir.path().join("dev-3"), &tiny()).unwrap();
    let worst = max_diff(&TrainModel::load(&dir.path().join("dev-3")).unwrap(), &c.model);
    eprintln!("device step from the CPU checkpoint vs the CPU trainer's: max |Δw| = {worst:e}");
    assert!(worst <= weight_bound(1), "device step from the CPU checkpoint differs by {worst}");

    // Bad optimizer state: clear errors.
    let bad = dir.path().join("bad");
    copy_dir(&ck, &bad);
    std::fs::remove_file(bad.join("trainer_state.json")).unwrap();
    let e = resume_error(&bad);
    assert!(e.contains("trainer_state.json"), "{e}");
    copy_dir(&ck, &bad);
    let gone = "exp_avg.model.layers.0.mlp.experts.1.up_proj.weight";
    edit_optimizer(&bad, |m| assert!(m.remove(gone).is_some(), "{gone} in the file"));
    let e = resume_error(&bad);
    assert!(e.contains("missing") && e.contains(gone), "{e}");
    copy_dir(&ck, &bad);
    let reshaped = "exp_avg_sq.model.norm.weight";
    edit_optimizer(&bad, |m| {
        let (shape, v) = m.get_mut(reshaped).expect("final norm moment");
        shape.push(1);
        v.truncate(v.len() - 1);
        shape[0] -= 1;
    });
    let e = resume_error(&bad);
    assert!(e.contains(reshaped) && e.contains("expected"), "{e}");
    eprintln!("bad checkpoint: {e}");
}

/// `execcritic train sft --config` with `config`; its stdout lines (JSON) or the error.
fn train_sft(path: &Path, config: &str) -> std::result::Result<Vec<serde_json::Value>, String> {
    std::fs::write(path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_execcritic")).args(["train", "sft", "--config"]).arg(path).output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect())
}

#[test]
fn train_sft_cli_on_the_emulated_device() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.jsonl");
    let lines: Vec<String> = batch(0).iter().map(|e| serde_json::json!({ "ids": e.ids, "mask": e.mask }).to_string()).collect();
    std::fs::write(&data, lines.join("\n")).unwrap();
    let out = dir.path().join("out");
    let config = |extra: &str| {
        format!(
            "model = {:?}\ndata = {data:?}\nout = {out:?}\nsteps = 4\nbatch_size = 2\nsave_every = 2\ndevice = \"emulator:f32\"\n{extra}\n[optimizer]\nlr = 1e-3\n",
            tiny()
        )
    };
    let path = dir.path().join("sft.toml");
    let run = train_sft(&path, &config("")).unwrap();
    let losses: Vec<f64> = run.iter().map(|l| l["loss"].as_f64().unwrap()).collect();
    eprintln!("device SFT losses (CLI): {losses:?}");
    assert_eq!(run.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(losses[3] < losses[0] - 0.05, "the loss must go down: {losses:?}");
    for ck in ["step-2", "step-4", "final"] {
        let d = out.join(ck);
        Model::load(&d).unwrap();
        let m = TrainModel::load(&d).unwrap();
        assert!(load_optimizer(&d, &m.store).is_ok(), "{ck}: optimizer state");
    }

    // Resumed from step-2: steps 3 and 4 again, with the continuous run's losses.
    let resumed = train_sft(&path, &config(&format!("resume = {:?}", out.join("step-2")))).unwrap();
    assert_eq!(resumed.len(), 2);
    for (l, want) in resumed.iter().zip(&losses[2..]) {
        let got = l["loss"].as_f64().unwrap();
        assert!((got - want).abs() <= 1e-6, "resumed step {}: loss {got} vs {want}", l["step"]);
    }

    // The bf16 build (the default storage type on a device): the same run, two steps.
    let bf16 = train_sft(&path, &config("").replace("emulator:f32", "emulator").replace("steps = 4", "steps = 2")).unwrap();
    let l: Vec<f64> = bf16.iter().map(|l| l["loss"].as_f64().unwrap()).collect();
    eprintln!("device SFT losses (CLI, bf16): {l:?}");
    assert!(l.len() == 2 && l[1] < l[0], "bf16: {l:?}");
    Model::load(&out.join("final")).unwrap();

    // LoRA on the device, with per-layer recomputation: only the adapted projections move, and
    // the final checkpoint is the merged model.
    let lora = train_sft(&path, &config("recompute = true\n[lora]\nrank = 2\nalpha = 4.0\ntargets = [\"q_proj\"]")).unwrap();
    let l: Vec<f64> = lora.iter().map(|l| l["loss"].as_f64().unwrap()).collect();
    eprintln!("device LoRA SFT losses (CLI): {l:?}");
    assert!(l.len() == 4 && l[3] < l[0], "LoRA: {l:?}");
    let (merged, source) = (TrainModel::load(&out.join("final")).unwrap(), TrainModel::load(&tiny()).unwrap());
    let mut moved = 0;
    for (m, s) in merged.store.params.iter().zip(&source.store.params) {
        assert_eq!(m.name, s.name);
        if m.name.contains("q_proj") {
            moved += usize::from(m.data != s.data);
        } else {
            assert!(m.data == s.data, "{}: a frozen weight moved", m.name);
        }
    }
    assert!(moved > 0, "no adapted weight moved");
    let e = train_sft(&path, &config("").replace("emulator:f32", "tpu")).unwrap_err();
    assert!(e.contains("unknown device"), "{e}");
}
