//! A few SFT updates on the tiny fixture, then a Hugging Face checkpoint (sharded, with index,
//! optimizer state): the loss goes down, the inference engine loads the checkpoint and gives the
//! training model's logits, the training model reloads the same parameters, the optimizer state
//! resumes, and a bf16 source model is saved back as bf16.

use execcritic::model::{ForwardOptions, LogitsMode, Model, SeqInput};
use execcritic::tensor::DType;
use execcritic::train::checkpoint::{load_optimizer, save, source_dtype};
use execcritic::train::grpo::GrpoConfig;
use execcritic::train::optim::{AdamWConfig, Schedule};
use execcritic::train::trainer::{SftExample, Trainer};
use execcritic::train::{TapeOptions, TrainModel};
use std::path::Path;

fn trainer(dir: &Path, lr: f32) -> Trainer {
    let model = TrainModel::load(dir).unwrap();
    Trainer::new(
        model,
        AdamWConfig {
            lr,
            ..Default::default()
        },
    )
}

fn batch() -> Vec<SftExample> {
    (0..2u32)
        .map(|s| {
            let ids: Vec<u32> = (0..24u32).map(|i| (i * 37 + s * 101 + 5) % 1024).collect();
            let mask = (0..24).map(|i| i >= 8).collect();
            SftExample { ids, mask }
        })
        .collect()
}

#[test]
fn sft_steps_then_checkpoint_roundtrip() {
    let src = Path::new("models/tiny-qwen35");
    let mut tr = trainer(src, 1e-3);
    let b = batch();
    let losses: Vec<f64> = (0..4).map(|_| tr.sft_step(&b).unwrap().loss).collect();
    eprintln!("SFT losses: {losses:?}");
    assert!(
        losses[3] < losses[0] - 0.05,
        "loss must go down: {losses:?}"
    );
    assert!(
        tr.sft_step(&[SftExample {
            ids: vec![1, 2],
            mask: vec![true, false]
        }])
        .is_err(),
        "no trained token"
    );

    let tmp = tempfile::tempdir().unwrap();
    let ck = tmp.path().join("step-5");
    save(&ck, src, &tr.model.store, Some(&tr.opt), 400_000).unwrap();
    let shards = std::fs::read_dir(&ck)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("model-")
        })
        .count();
    assert!(
        shards >= 3,
        "small shard size gives several shards ({shards})"
    );
    assert!(ck.join("model.safetensors.index.json").exists() && ck.join("config.json").exists());
    // Saving again over the same folder replaces it atomically.
    save(&ck, src, &tr.model.store, Some(&tr.opt), 400_000).unwrap();

    // The engine loads it and agrees with the training model.
    let ids = &b[0].ids;
    let tape = tr.model.forward(ids, None, TapeOptions::default()).unwrap();
    let m = Model::load(&ck).unwrap();
    let mut st = m.new_state();
    let out = m
        .forward(
            &mut [SeqInput::new(ids, &mut st)],
            &ForwardOptions {
                logits: LogitsMode::All,
                ..Default::default()
            },
        )
        .unwrap();
    let max = out[0]
        .logits
        .data()
        .iter()
        .zip(&tape.logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(max < 1e-4, "engine vs trained logits: {max}");

    // Resume: same parameters and optimizer state; the next step matches an uninterrupted one.
    let back = TrainModel::load(&ck).unwrap();
    for (a, b) in back.store.params.iter().zip(&tr.model.store.params) {
        assert_eq!((&a.name, &a.data), (&b.name, &b.data));
    }
    let opt = load_optimizer(&ck, &back.store).unwrap();
    assert_eq!(opt.step, 4);
    assert_eq!(opt.m, tr.opt.m);
    let mut resumed = Trainer {
        model: back,
        opt,
        schedule: Schedule::Constant,
        tape: TapeOptions { recompute: true },
        grpo: GrpoConfig::default(),
        lora: None,
    };
    let a = tr.sft_step(&b).unwrap();
    let r = resumed.sft_step(&b).unwrap();
    assert_eq!(a.loss, r.loss);
    assert_eq!(
        tr.model.store.params[5].data,
        resumed.model.store.params[5].data
    );
}

#[test]
fn bf16_source_is_saved_as_bf16() {
    let src = Path::new("models/tiny-qwen35-bf16");
    assert_eq!(source_dtype(src).unwrap(), DType::BF16);
    let tr = trainer(src, 1e-6);
    let tmp = tempfile::tempdir().unwrap();
    let ck = tmp.path().join("ck");
    save(&ck, src, &tr.model.store, None, usize::MAX).unwrap();
    let bytes = std::fs::read(ck.join("model-00001-of-00001.safetensors")).unwrap();
    let sf = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert!(sf
        .tensors()
        .iter()
        .all(|(_, t)| t.dtype() == safetensors::Dtype::BF16));
    // The master weights were exactly bf16 values, so the round trip is exact.
    let back = TrainModel::load(&ck).unwrap();
    for (a, b) in back.store.params.iter().zip(&tr.model.store.params) {
        assert_eq!(a.data, b.data, "{}", a.name);
    }
    assert!(
        load_optimizer(&ck, &back.store).is_err(),
        "no optimizer state was saved"
    );
}

#[test]
fn train_sft_cli_writes_checkpoints_and_rejects_bad_configs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = std::fs::canonicalize("models/tiny-qwen35").unwrap();
    let lines: Vec<String> = batch()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    std::fs::write(d.join("data.jsonl"), lines.join("\n")).unwrap();
    std::fs::write(
        d.join("sft.toml"),
        format!("model = {:?}\ndata = \"data.jsonl\"\nout = \"out\"\nsteps = 2\nbatch_size = 1\nsave_every = 1\n[optimizer]\nlr = 1e-4\n[schedule]\nkind = \"cosine\"\ntotal_steps = 2\nwarmup_steps = 0\nmin_ratio = 0.1\n", model.to_str().unwrap()),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_execcritic");
    let o = std::process::Command::new(bin)
        .args(["train", "sft", "--config"])
        .arg(d.join("sft.toml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let steps: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(steps.len(), 2);
    // Cosine over 2 steps from 1e-4 to 1e-5: factor 1 at step 0, (1 + 0.1)/2 at step 1.
    assert!((steps[0]["lr"].as_f64().unwrap() - 1e-4).abs() < 1e-9);
    assert!((steps[1]["lr"].as_f64().unwrap() - 5.5e-5).abs() < 1e-9);
    for f in ["step-1", "step-2", "final"] {
        assert!(
            d.join("out")
                .join(f)
                .join("model.safetensors.index.json")
                .exists(),
            "{f}"
        );
    }
    std::fs::write(d.join("bad.toml"), "model = \"x\"\nsteps = 1\n").unwrap();
    let o = std::process::Command::new(bin)
        .args(["train", "sft", "--config"])
        .arg(d.join("bad.toml"))
        .output()
        .unwrap();
    assert!(!o.status.success());
}
