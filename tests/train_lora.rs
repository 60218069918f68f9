//! LoRA adapters on attention, GDN and expert projections: zero-initialised B leaves the model
//! unchanged, the projected adapter gradients match finite differences, SFT steps with adapters
//! lower the loss while every non-adapted parameter stays bit-identical, and the merged
//! checkpoint loads in the inference engine with the trained logits.

use execcritic::model::{ForwardOptions, LogitsMode, Model, SeqInput};
use execcritic::train::checkpoint::save;
use execcritic::train::grpo::GrpoConfig;
use execcritic::train::lora::{Lora, LoraConfig};
use execcritic::train::loss::mean_nll;
use execcritic::train::optim::{AdamW, AdamWConfig, Schedule};
use execcritic::train::trainer::{SftExample, Trainer};
use execcritic::train::{TapeOptions, TrainModel};
use std::path::Path;

fn cfg() -> LoraConfig {
    LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: ["self_attn.q_proj", "linear_attn.in_proj_qkv", "shared_expert.down_proj", "experts.3.up_proj"]
            .map(String::from)
            .to_vec(),
        seed: 1,
    }
}

#[test]
fn adapter_gradients_match_finite_differences() {
    let mut model = TrainModel::load(Path::new("models/tiny-qwen35")).unwrap();
    let before: Vec<Vec<f32>> = model.store.params.iter().map(|p| p.data.clone()).collect();
    let mut lora = Lora::new(cfg(), &model.store).unwrap();
    assert_eq!(lora.len(), 1 + 3 + 4 + 4, "q_proj ×1, in_proj_qkv ×3, shared down ×4, expert 3 up ×4");
    lora.apply(&mut model.store);
    assert!(model.store.params.iter().zip(&before).all(|(p, b)| &p.data == b), "B = 0 leaves W unchanged");
    // Non-zero B so that dA is non-trivial.
    for p in lora.adapters.params.iter_mut().filter(|p| p.name.ends_with("lora_B")) {
        for (i, x) in p.data.iter_mut().enumerate() {
            *x = ((i * 7 % 11) as f32 - 5.0) * 0.01;
        }
    }
    lora.apply(&mut model.store);
    let ids: Vec<u32> = (0..20u32).map(|i| (i * 97 + 3) % 1024).collect();
    let (_, full) = model.nll_gradients(&ids, TapeOptions::default()).unwrap();
    let g = lora.project(&full);
    // Hold the routing fixed (top-k is piecewise constant) while differencing.
    let experts = model.forward(&ids, None, TapeOptions::default()).unwrap().experts;
    let picks: Vec<usize> = (0..lora.adapters.len()).step_by(3).collect();
    for &pi in &picks {
        let name = lora.adapters.params[pi].name.clone();
        let an = g.0[pi].clone();
        let scale = an.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
        assert!(scale > 1e-4, "{name}: vacuous");
        let i = an.iter().enumerate().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).unwrap().0;
        let h = 2.5e-3f32;
        let mut at = |d: f32| {
            lora.adapters.params[pi].data[i] += d;
            lora.apply(&mut model.store);
            let t = model.forward(&ids, Some(&experts), TapeOptions::default()).unwrap();
            let l = mean_nll(&t.logits, 1024, &ids).unwrap().loss;
            lora.adapters.params[pi].data[i] -= d;
            l
        };
        let fd = (at(h) - at(-h)) / (2.0 * h as f64);

        assert!((fd - an[i] as f64).abs() < 2e-2 * scale, "{name}[{i}]: fd {fd} vs {}", an[i]);
    }
}

#[test]
fn lora_sft_trains_only_adapters_and_merges_on_save() {
    let src = Path::new("models/tiny-qwen35");
    let model = TrainModel::load(src).unwrap();
    let frozen: Vec<Vec<f32>> = model.store.params.iter().map(|p| p.data.clone()).collect();
    let lora = Lora::new(cfg(), &model.store).unwrap();
    let opt = AdamW::new(AdamWConfig { lr: 1e-2, ..Default::default() }, &lora.adapters);
    let mut tr = Trainer {
        model,
        opt,
        schedule: Schedule::Constant,
        tape: TapeOptions::default(),
        grpo: GrpoConfig::default(),
        lora: Some(lora),
    };
    let ids: Vec<u32> = (0..24u32).map(|i| (i * 37 + 5) % 1024).collect();
    let batch = vec![SftExample { mask: (0..24).map(|i| i >= 8).collect(), ids: ids.clone() }];
    let losses: Vec<f64> = (0..4).map(|_| tr.sft_step(&batch).unwrap().loss).collect();
    eprintln!("LoRA SFT losses: {losses:?}");
    assert!(losses[3] < losses[0] - 0.05, "{losses:?}");
    let targets = cfg().targets;
    for (p, f) in tr.model.store.params.iter().zip(&frozen) {
        let adapted = targets.iter().any(|t| p.name.contains(t.as_str()));
        assert_eq!(&p.data == f, !adapted, "{}: adapted weights move, the rest stay frozen", p.name);
    }
    let tmp = tempfile::tempdir().unwrap();
    save(&tmp.path().join("merged"), src, &tr.model.store, None, usize::MAX).unwrap();
    let m = Model::load(&tmp.path().join("merged")).unwrap();
    let mut st = m.new_state();
    let out = m
        .forward(&mut [SeqInput::new(&ids, &mut st)], &ForwardOptions { logits: LogitsMode::All, ..Default::default() })
        .unwrap();
    let tape = tr.model.forward(&ids, None, TapeOptions::default()).unwrap();
    let max = out[0].logits.data().iter().zip(&tape.logits).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(max < 1e-4, "merged checkpoint logits differ by {max}");
    assert!(Lora::new(LoraConfig { targets: vec!["nope".into()], ..cfg() }, &tr.model.store).is_err());
}

#[test]
fn train_sft_cli_with_lora_writes_a_merged_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = std::fs::canonicalize("models/tiny-qwen35").unwrap();
    let ids: Vec<u32> = (0..16u32).map(|i| (i * 37 + 5) % 1024).collect();
    let ex = SftExample { mask: (0..16).map(|i| i >= 4).collect(), ids };
    std::fs::write(d.join("data.jsonl"), serde_json::to_string(&ex).unwrap()).unwrap();
    let toml = format!(
        "model = {:?}\ndata = \"data.jsonl\"\nout = \"out\"\nsteps = 1\nbatch_size = 1\n[optimizer]\nlr = 1e-2\n\
         [lora]\nrank = 2\nalpha = 4.0\ntargets = [\"self_attn.q_proj\"]\n",
        model.to_str().unwrap()
    );
    std::fs::write(d.join("sft.toml"), toml).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["train", "sft", "--config"])
        .arg(d.join("sft.toml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fin = d.join("out/final");
    assert!(fin.join("model.safetensors.index.json").exists() && !fin.join("optimizer.safetensors").exists());
    Model::load(&fin).unwrap();
}
